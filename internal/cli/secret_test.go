package cli

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func secretFlags(out *bytes.Buffer) (*Flags, *string) {
	f := NewFlags("test", out)
	var s string
	f.Secret(&s, "token", "POSGATE_TEST_TOKEN", 16, "the test's token")
	return f, &s
}

// TestSecretFromFileOrEnvironment: a secret comes from its file (one line ending dropped)
// or its variable, never from an argument, never both; too short or empty is refused
// without its value in the message; --help prints neither.
func TestSecretFromFileOrEnvironment(t *testing.T) {
	dir := t.TempDir()
	write := func(name, v string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good", "a-token-of-twenty-bytes\n")
	short := write("short", "tiny-secret\n")
	empty := write("empty", "\n")
	for _, c := range []struct {
		name, env string
		setEnv    bool
		args      []string
		want, err string
	}{
		{name: "file", args: []string{"--token-file", good}, want: "a-token-of-twenty-bytes"},
		{name: "env", env: "another-token-of-20-bytes", setEnv: true, want: "another-token-of-20-bytes"},
		{name: "none", want: ""},
		{name: "both", env: "another-token-of-20-bytes", setEnv: true, args: []string{"--token-file", good}, err: "not both"},
		{name: "short file", args: []string{"--token-file", short}, err: "11 bytes, want at least 16"},
		{name: "short env", env: "tiny-secret", setEnv: true, err: "POSGATE_TEST_TOKEN: 11 bytes, want at least 16"},
		{name: "empty file", args: []string{"--token-file", empty}, err: "is empty"},
		{name: "empty env", env: "", setEnv: true, err: "empty"},
		{name: "missing file", args: []string{"--token-file", filepath.Join(dir, "nope")}, err: "no such file"},
		{name: "as an argument", args: []string{"--token", "a-token-of-twenty-bytes"}, err: "not defined"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.setEnv {
				t.Setenv("POSGATE_TEST_TOKEN", c.env)
			}
			var out bytes.Buffer
			f, s := secretFlags(&out)
			err := f.Parse(c.args)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err %v, want %q", err, c.err)
				}
				for _, v := range []string{"tiny-secret", "a-token-of-twenty-bytes"} {
					if strings.Contains(err.Error(), v) || strings.Contains(out.String(), v) {
						t.Errorf("the secret's value was printed: %v / %s", err, out.String())
					}
				}
				return
			}
			if err != nil || *s != c.want {
				t.Fatalf("got %q (%v), want %q", *s, err, c.want)
			}
		})
	}
}

func TestSecretFileFromItsVariableAndHelp(t *testing.T) {
	p := filepath.Join(t.TempDir(), "tok")
	if err := os.WriteFile(p, []byte("from-the-file-of-the-var"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("POSGATE_TEST_TOKEN_FILE", p)
	var out bytes.Buffer
	f, s := secretFlags(&out)
	if err := f.Parse(nil); err != nil || *s != "from-the-file-of-the-var" {
		t.Fatalf("got %q (%v)", *s, err)
	}
	if f.SecretSource("token") != "--token-file "+p {
		t.Errorf("source %q", f.SecretSource("token"))
	}
	os.Unsetenv("POSGATE_TEST_TOKEN_FILE")
	t.Setenv("POSGATE_TEST_TOKEN", "s3cret-value-of-the-env")
	out.Reset()
	f, _ = secretFlags(&out)
	if err := f.Parse([]string{"--help"}); !errors.Is(err, flag.ErrHelp) {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "s3cret") || !strings.Contains(out.String(), "-token-file") ||
		!strings.Contains(out.String(), "POSGATE_TEST_TOKEN") {
		t.Errorf("help:\n%s", out.String())
	}
}
