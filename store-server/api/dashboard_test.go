package api

import (
	"encoding/json"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/posgate/posgate/internal/stack"
)

// TestDashboardScriptParses runs node's syntax check on the dashboard's scripts: a script
// that does not parse leaves managers a blank page, and nothing else in the build reads it.
// node is installed by make deps, like the servers the other tests use.
func TestDashboardScriptParses(t *testing.T) {
	stack.SkipShort(t)
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is needed to check the dashboard's scripts (make deps installs nodejs): %v", err)
	}
	for _, f := range []string{"dashboard.js", "i18n.js", "charts.js"} {
		if out, err := exec.Command(node, "--check", "dashboard/"+f).CombinedOutput(); err != nil {
			t.Fatalf("node --check %s: %v\n%s", f, err, out)
		}
	}
}

// TestDashboardCatalogs: every language's catalog has the same keys, and every key the page
// and its scripts name (t("…"), data-i18n…) is in them; a word missing from a catalog
// would show as its key.
func TestDashboardCatalogs(t *testing.T) {
	cats := map[string]map[string]string{}
	for _, lang := range []string{"en", "zh-CN"} {
		b, err := os.ReadFile("dashboard/i18n/" + lang + ".json")
		if err != nil {
			t.Fatal(err)
		}
		var c map[string]string
		if err := json.Unmarshal(b, &c); err != nil {
			t.Fatalf("%s: %v", lang, err)
		}
		cats[lang] = c
	}
	for k := range cats["en"] {
		if cats["zh-CN"][k] == "" {
			t.Errorf("zh-CN lacks %q", k)
		}
	}
	for k := range cats["zh-CN"] {
		if cats["en"][k] == "" {
			t.Errorf("en lacks %q", k)
		}
	}
	used := map[string]bool{}
	literal := regexp.MustCompile(`\bt\("([a-z][\w.]*[a-z])"`)
	attr := regexp.MustCompile(`data-i18n(?:-placeholder|-title)?="([^"]+)"`)
	for _, f := range []string{"dashboard.js", "charts.js", "i18n.js", "index.html"} {
		b, err := os.ReadFile("dashboard/" + f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range literal.FindAllStringSubmatch(string(b), -1) {
			used[m[1]] = true
		}
		for _, m := range attr.FindAllStringSubmatch(string(b), -1) {
			used[m[1]] = true
		}
	}
	if len(used) < 100 {
		t.Fatalf("found %d keys in use; the page has more", len(used))
	}
	for k := range used {
		if _, ok := cats["en"][k]; !ok {
			t.Errorf("the page uses %q, which no catalog has", k)
		}
	}
	// Keys built at run time: a prefix and a value the API gives.
	for _, prefix := range []string{"mode.", "method.", "kind."} {
		n := 0
		for k := range cats["en"] {
			if strings.HasPrefix(k, prefix) {
				n++
			}
		}
		if n == 0 {
			t.Errorf("no %s… messages", prefix)
		}
	}
	for _, mode := range []string{"redis", "degraded", "rebuilding", "starting"} {
		if !slices.Contains(keys(cats["en"]), "mode."+mode) {
			t.Errorf("no words for mode %s", mode)
		}
	}
}

func keys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
