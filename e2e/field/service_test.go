//go:build linux

package field

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	agentclient "github.com/posgate/posgate/terminal-agent/client"

	"github.com/posgate/posgate/e2e"
	"github.com/posgate/posgate/internal/stack"
)

// TestWindowsServiceUnderWine: terminal-agent.exe installed as a Windows service in Wine's
// service control manager, as docs/windows.md tells a POS vendor to: install (flags
// checked, no --data-dir: the default %ProgramData%\posgate), start (waits until it
// serves), sales, stop (the API stops, the outbox closes: the log says so), start again
// with the sales still there, `net stop` (Windows' own tool) and uninstall; every sale
// reaches the store's ledger and Redis.
func TestWindowsServiceUnderWine(t *testing.T) {
	stack.SkipShort(t)
	exe := windowsAgent(t)
	w := setupWine(t)
	dir := t.TempDir()
	began := time.Now()
	srv := startStore(t, dir)
	if err := srv.Enrol("T01"); err != nil { // the service is installed by Wine, not by e2e.StartAgent
		t.Fatal(err)
	}
	api, err := e2e.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	wine := func(want string, program string, args ...string) {
		t.Helper()
		start := time.Now()
		out, err := w.Run(ctx, program, args...)
		t.Logf("wine %s %s (%s): %s", filepath.Base(program), strings.Join(args, " "), time.Since(start).Round(10*time.Millisecond), strings.TrimSpace(out))
		if err != nil || !strings.Contains(out, want) {
			t.Fatalf("want %q in the answer: %v", want, err)
		}
	}
	// A bad flag is refused at install, not found failing later.
	if out, err := w.Run(ctx, exe, "service", "install", "--store", "S1"); err == nil {
		t.Fatalf("install without --terminal succeeded: %s", out)
	}
	wine("installed posgate-terminal-agent", exe, "service", "install", "--store", "S1", "--terminal", "T01",
		"--broker", srv.Broker, "--listen", api, "--tz", "Asia/Shanghai", "--ack-timeout", "1s", "--heartbeat", "0")
	dataDir := filepath.Join(w.Prefix, "drive_c", "ProgramData", "posgate")
	logFile := filepath.Join(dataDir, "logs", "terminal-agent.log")
	t.Cleanup(func() {
		w.Run(ctx, exe, "service", "uninstall")
		if t.Failed() {
			t.Logf("the service's log:\n%s", tail(logFile))
		}
	})
	wine("posgate-terminal-agent running", exe, "service", "start")

	cash, err := e2e.ReadyCashier(ctx, api, serviceToken(t, dataDir), 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	sellN(t, cash, 10, 0)
	wine("posgate-terminal-agent stopped", exe, "service", "stop")
	if _, err := cash.Status(); err == nil {
		t.Fatal("the API still answers after the service stopped")
	}
	if log, err := os.ReadFile(logFile); err != nil || !strings.Contains(string(log), "stopped: outbox closed") {
		t.Fatalf("the service's log %s does not show a clean stop (%v):\n%s", logFile, err, log)
	}
	if _, err := os.Stat(filepath.Join(dataDir, "outbox.db")); err != nil {
		t.Fatalf("the outbox is not in %%ProgramData%%\\posgate: %v", err)
	}

	wine("posgate-terminal-agent running", exe, "service", "start")
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := cash.WaitCatalog(wctx); err != nil {
		t.Fatal(err)
	}
	sellN(t, cash, 10, 10)
	f := &field{t: t, store: srv, cash: cash, began: began}
	f.verify(20)
	wine("stopped", "net", "stop", "posgate-terminal-agent")
	wine("removed posgate-terminal-agent", exe, "service", "uninstall")
	if out, err := w.Run(ctx, "sc", "query", "posgate-terminal-agent"); err == nil {
		t.Errorf("sc query finds the service after uninstall: %s", out)
	}
}

// sellN runs n sales through cash; any that fails fails the test.
func sellN(t *testing.T, cash *e2e.Cashier, n, from int) {
	t.Helper()
	f := &field{t: t, cash: cash}
	f.sell(n, from)
}

// serviceToken waits for the API token the service writes in its data directory at its
// first start, and returns it.
func serviceToken(t *testing.T, dataDir string) string {
	t.Helper()
	path := filepath.Join(dataDir, "api-token")
	deadline := time.Now().Add(60 * time.Second)
	for {
		tok, err := agentclient.ReadToken(path)
		if err == nil {
			return tok
		}
		if time.Now().After(deadline) {
			t.Fatalf("the service wrote no API token: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
