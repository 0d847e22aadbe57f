//go:build linux

package field

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/posgate/posgate/e2e"
	"github.com/posgate/posgate/internal/stack"
)

// setupWine creates a Wine prefix for the test and ends its processes after it.
func setupWine(t *testing.T) *e2e.Wine {
	t.Helper()
	start := time.Now()
	w, err := e2e.SetupWine(context.Background(), root(t), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	t.Logf("Wine prefix ready in %s", time.Since(start).Round(100*time.Millisecond))
	return w
}

// TestWindowsAgentUnderWine: the windows/amd64 terminal-agent.exe, as make release builds
// it, under Wine with no zone database on the machine (ZONEINFO at an empty directory, no
// GOROOT) and --tz Asia/Shanghai: it sells live, offline behind a cut link, is killed with
// its backlog unsynced (SIGKILL to the Windows process itself; a restart proves the outbox
// lock was let go), drains, and the store's ledger and Redis agree with the till.
func TestWindowsAgentUnderWine(t *testing.T) {
	stack.SkipShort(t)
	exe := windowsAgent(t)
	w := setupWine(t)
	out, err := w.Run(context.Background(), exe, "--version")
	if err != nil || !strings.HasPrefix(out, "terminal-agent ") || !strings.Contains(out, "windows/amd64") {
		t.Fatalf("terminal-agent.exe --version: %v\n%s", err, out)
	}
	t.Logf("under Wine: %s", strings.TrimSpace(out))
	f := startField(t, exe, w.Runner(), "127.0.0.1")
	f.gone = func(int) error {
		if pids := w.Processes("terminal-agent.exe"); len(pids) > 0 {
			return fmt.Errorf("terminal-agent.exe still runs after SIGKILL: pids %v", pids)
		}
		return nil
	}
	f.run()
}
