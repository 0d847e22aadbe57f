// Package deploy holds what an operator installs beside posgate's binaries: the systemd
// units (systemd/), Prometheus's alert rules (prometheus/) and a Grafana dashboard
// (grafana/). Its tests check them with the tools that read them: systemd-analyze and
// promtool (make deps installs both). That every metric they name is one the binaries
// export is checked by e2e's TestPagesWithRealData, which scrapes them running.
package deploy

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/posgate/posgate/e2e"
	"github.com/posgate/posgate/internal/stack"
)

func tool(t *testing.T, name, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s is needed to check deploy/ (make deps installs Debian's %s): %v", name, pkg, err)
	}
	return p
}

// TestAlertRules: promtool reads the rules, and its unit tests of them
// (posgate-rules-test.yml) pass: each alert fires on the series the binaries export, and
// not before its time.
func TestAlertRules(t *testing.T) {
	stack.SkipShort(t)
	promtool := tool(t, "promtool", "prometheus")
	for _, args := range [][]string{{"check", "rules", "posgate-rules.yml"}, {"test", "rules", "posgate-rules-test.yml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = "prometheus"
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// TestSystemdUnits: systemd-analyze verify takes each unit, and its offline security
// review rates it 2.0 or better (0 is best, 10 worst). verify refuses a unit whose ExecStart
// binary does not exist, so the units are checked with it pointing at binaries just built
// (their place in the unit, /usr/local/bin, is the operator's).
func TestSystemdUnits(t *testing.T) {
	analyze := tool(t, "systemd-analyze", "systemd")
	stack.SkipShort(t) // before the build
	root, err := e2e.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	bins, err := e2e.Build(context.Background(), root, t.TempDir(), false)
	if err != nil {
		t.Fatal(err)
	}
	units, err := filepath.Glob("systemd/*.service")
	if err != nil || len(units) != 3 {
		t.Fatalf("units %v (%v), want store-server's, the uploader's and serve's", units, err)
	}
	dir := t.TempDir()
	var copies []string
	for _, u := range units {
		b, err := os.ReadFile(u)
		if err != nil {
			t.Fatal(err)
		}
		s := strings.NewReplacer("/usr/local/bin/store-server", bins.StoreServer, "/usr/local/bin/hq-sync", bins.HQSync).Replace(string(b))
		if s == string(b) {
			t.Errorf("%s starts neither /usr/local/bin/store-server nor /usr/local/bin/hq-sync", u)
		}
		for _, want := range []string{"DynamicUser=yes", "ProtectSystem=strict", "StateDirectory=", "NoNewPrivileges=yes"} {
			if !strings.Contains(s, "\n"+want) {
				t.Errorf("%s lacks %s", u, want)
			}
		}
		c := filepath.Join(dir, filepath.Base(u))
		if err := os.WriteFile(c, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		copies = append(copies, c)
	}
	if out, err := exec.Command(analyze, append([]string{"verify"}, copies...)...).CombinedOutput(); err != nil || len(out) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
	for _, c := range copies {
		if out, err := exec.Command(analyze, "security", "--offline=true", "--threshold=20", c).CombinedOutput(); err != nil {
			t.Errorf("systemd-analyze security %s: %v\n%s", filepath.Base(c), err, out[max(0, len(out)-400):])
		}
	}
}

// TestGrafanaDashboard: the dashboard is JSON Grafana reads: panels with unique ids, each
// query with an expression on a posgate metric.
func TestGrafanaDashboard(t *testing.T) {
	b, err := os.ReadFile("grafana/posgate.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		UID    string `json:"uid"`
		Panels []struct {
			ID      int    `json:"id"`
			Type    string `json:"type"`
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil || d.UID == "" || len(d.Panels) < 10 {
		t.Fatalf("dashboard: %v, uid %q, %d panels", err, d.UID, len(d.Panels))
	}
	ids := map[int]bool{}
	metric := regexp.MustCompile(`posgate_[a-z0-9_]+`)
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d twice", p.ID)
		}
		ids[p.ID] = true
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			if !metric.MatchString(q.Expr) || strings.Count(q.Expr, "(") != strings.Count(q.Expr, ")") {
				t.Errorf("panel %q: query %q", p.Title, q.Expr)
			}
		}
	}
}
