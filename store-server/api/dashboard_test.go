package api

import (
	"os/exec"
	"testing"
)

// TestDashboardScriptParses runs node's syntax check on the dashboard's script: a script
// that does not parse leaves managers a blank page, and nothing else in the build reads it.
// node is installed by make deps, like the servers the other tests use.
func TestDashboardScriptParses(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is needed to check dashboard.js (make deps installs nodejs): %v", err)
	}
	if out, err := exec.Command(node, "--check", "dashboard/dashboard.js").CombinedOutput(); err != nil {
		t.Fatalf("node --check dashboard.js: %v\n%s", err, out)
	}
}
