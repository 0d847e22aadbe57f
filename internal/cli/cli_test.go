package cli

import (
	"bytes"
	"errors"
	"flag"
	"strings"
	"testing"
	"time"
)

func testFlags(out *bytes.Buffer) (*Flags, *string, *time.Duration, *bool, *int) {
	f := NewFlags("test", out)
	var s string
	var d time.Duration
	var b bool
	var n int
	f.String(&s, "name", "POSGATE_TEST_NAME", "def", "a name")
	f.Duration(&d, "wait", "POSGATE_TEST_WAIT", time.Second, "a wait")
	f.Bool(&b, "on", "POSGATE_TEST_ON", false, "a switch")
	f.Int(&n, "count", "POSGATE_TEST_COUNT", 3, "a count")
	return f, &s, &d, &b, &n
}

func TestFlagsFromEnvironmentThenArguments(t *testing.T) {
	t.Setenv("POSGATE_TEST_NAME", "from-env")
	t.Setenv("POSGATE_TEST_WAIT", "5s")
	t.Setenv("POSGATE_TEST_ON", "true")
	f, s, d, b, n := testFlags(new(bytes.Buffer))
	if err := f.Parse([]string{"--count", "7", "--name", "from-args"}); err != nil {
		t.Fatal(err)
	}
	if *s != "from-args" || *d != 5*time.Second || !*b || *n != 7 {
		t.Errorf("got name %q wait %v on %v count %d; want from-args 5s true 7", *s, *d, *b, *n)
	}
	if !f.Given("name") || f.Given("wait") {
		t.Errorf("Given: name %v (by an argument), wait %v (by the environment only)", f.Given("name"), f.Given("wait"))
	}
	if f.Env("wait") != "POSGATE_TEST_WAIT" || f.Env("nope") != "" {
		t.Errorf("Env: %q %q", f.Env("wait"), f.Env("nope"))
	}
}

func TestFlagsRefuseAnEnvironmentValueThatDoesNotParse(t *testing.T) {
	for _, c := range []struct{ env, value string }{
		{"POSGATE_TEST_WAIT", "5 minutes"},
		{"POSGATE_TEST_ON", "yes please"},
		{"POSGATE_TEST_COUNT", "seven"},
	} {
		t.Run(c.env, func(t *testing.T) {
			t.Setenv(c.env, c.value)
			f, _, _, _, _ := testFlags(new(bytes.Buffer))
			err := f.Parse(nil)
			if err == nil || !strings.Contains(err.Error(), c.env) {
				t.Fatalf("Parse with %s=%q: %v; want an error naming the variable", c.env, c.value, err)
			}
		})
	}
}

func TestFlagsHelpPrintsDefaultsNotTheEnvironment(t *testing.T) {
	t.Setenv("POSGATE_TEST_NAME", "s3cret-value")
	var out bytes.Buffer
	f, _, _, _, _ := testFlags(&out)
	if err := f.Parse([]string{"--help"}); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--help: %v", err)
	}
	if strings.Contains(out.String(), "s3cret-value") {
		t.Errorf("--help printed a value from the environment:\n%s", out.String())
	}
	if !strings.Contains(out.String(), `(default "def")`) || !strings.Contains(out.String(), "(env POSGATE_TEST_NAME)") {
		t.Errorf("--help should print the flag's own default and its variable:\n%s", out.String())
	}
}

// TestListFlag: a list flag takes each value given, comma lists among them, and its
// environment variable as a comma list when no argument gave it.
func TestListFlag(t *testing.T) {
	var out bytes.Buffer
	f := NewFlags("x", &out)
	var l []string
	f.List(&l, "allow", "X_ALLOW", "origins")
	if err := f.Parse([]string{"--allow", "https://a.example, https://b.example", "--allow", "https://c.example"}); err != nil {
		t.Fatal(err)
	}
	if strings.Join(l, " ") != "https://a.example https://b.example https://c.example" {
		t.Fatalf("list %q", l)
	}
	t.Setenv("X_ALLOW", "https://d.example,,https://e.example")
	f = NewFlags("x", &out)
	l = nil
	f.List(&l, "allow", "X_ALLOW", "origins")
	if err := f.Parse(nil); err != nil || strings.Join(l, " ") != "https://d.example https://e.example" {
		t.Fatalf("list from the environment %q (%v)", l, err)
	}
}

func TestWantsVersion(t *testing.T) {
	for _, c := range []struct {
		args []string
		want bool
	}{
		{[]string{"--version"}, true},
		{[]string{"-version"}, true},
		{[]string{"--store", "S1", "--version"}, true},
		{[]string{"--store", "S1"}, false},
		{[]string{"--", "--version"}, false},
		{nil, false},
	} {
		if got := WantsVersion(c.args); got != c.want {
			t.Errorf("WantsVersion(%q) = %v, want %v", c.args, got, c.want)
		}
	}
}
