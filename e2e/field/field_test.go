//go:build linux

// Package field runs the terminal-agent as it ships for the field on the platforms it runs
// there — the windows/amd64 .exe under Wine, the static linux/arm64 binary under qemu-user —
// against a real store-server on a real Redis Sentinel trio: live sales, the network cut,
// offline sales, SIGKILL with a backlog, restart and drain, every 2xx sale in the ledger
// once, and each device with no zone database but the agent's own. `make test` runs it as
// its own steps (test-wine, test-qemu).
package field

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/mattn/go-sqlite3"

	"github.com/posgate/posgate/e2e"
	"github.com/posgate/posgate/internal/stack"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/client"
)

// build is one binary built once per test binary (the Go build cache keeps a rebuild to
// seconds; the first cross build of SQLite's C takes minutes on a loaded machine).
type build struct {
	once sync.Once
	path string
	err  error
}

var (
	native  build // store-server for this machine
	windows build // terminal-agent.exe
	arm64   build // the static linux/arm64 terminal-agent
	binDir  string
	dirOnce sync.Once
)

func root(t *testing.T) string {
	t.Helper()
	r, err := e2e.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func binaryDir(t *testing.T) string {
	dirOnce.Do(func() {
		var err error
		if binDir, err = os.MkdirTemp("", "posgate-field-bin-"); err != nil {
			panic(err)
		}
	})
	return binDir
}

// get builds b with f once and returns its path.
func (b *build) get(t *testing.T, what string, f func() (string, error)) string {
	t.Helper()
	b.once.Do(func() {
		start := time.Now()
		b.path, b.err = f()
		t.Logf("built %s in %s", what, time.Since(start).Round(100*time.Millisecond))
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

func storeServer(t *testing.T) string {
	return native.get(t, "store-server", func() (string, error) {
		bins, err := e2e.Build(context.Background(), root(t), binaryDir(t), false)
		return bins.StoreServer, err
	})
}

func windowsAgent(t *testing.T) string {
	return windows.get(t, "terminal-agent for windows/amd64", func() (string, error) {
		return e2e.CrossBuild(context.Background(), root(t), binaryDir(t), e2e.Windows, "./terminal-agent")
	})
}

func arm64Agent(t *testing.T) string {
	return arm64.get(t, "terminal-agent for linux/arm64 (static)", func() (string, error) {
		dir := filepath.Join(binaryDir(t), "arm64")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", err
		}
		return e2e.CrossBuild(context.Background(), root(t), dir, e2e.LinuxARM64, "./terminal-agent")
	})
}

const catalog = `sku,barcode,name,price
MILK,6901234567890,Milk 1L,12.50
BREAD,6901234567891,Bread,8.99
EGGS,6901234567892,Eggs x10,15.90
TEA,6901234567894,Green tea,0.30
`

// store is a store-server on a Sentinel trio (one replica) with its embedded broker, its
// catalog and opening stock booked.
func startStore(t *testing.T, dir string) *e2e.StoreServer {
	t.Helper()
	bin := storeServer(t)
	st := stack.Run(t, stack.Options{Redis: true, Replicas: 1, Sentinels: 3})
	cat := filepath.Join(dir, "catalog.csv")
	if err := os.WriteFile(cat, []byte(catalog), 0o600); err != nil {
		t.Fatal(err)
	}
	sdir := filepath.Join(dir, "store")
	if err := os.MkdirAll(sdir, 0o700); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	srv, err := e2e.StartStore(ctx, bin, e2e.StoreOptions{Store: "S1", DataDir: sdir,
		Sentinels: st.SentinelAddrs(), MasterName: st.MasterName, Catalog: cat})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		srv.Kill()
		if t.Failed() {
			t.Logf("store-server log:\n%s", tail(srv.Log))
		}
	})
	if err := srv.AllowOfflineRefunds(ctx); err != nil {
		t.Fatal(err)
	}
	for sku, q := range map[string]int64{"MILK": 500, "BREAD": 500, "EGGS": 500, "TEA": 500} {
		req := client.AdjustRequest{ID: "opening-" + sku, SKU: sku, Delta: q, Reason: client.ReasonOpening}
		if _, err := srv.Manager().Adjust(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	return srv
}

func tail(path string) string {
	b, _ := os.ReadFile(path)
	return string(b[max(0, len(b)-4000):])
}

// field is one agent on its platform, reaching the store through a proxy the test cuts.
type field struct {
	t      *testing.T
	store  *e2e.StoreServer
	proxy  *e2e.Proxy
	agent  *e2e.Agent
	cash   *e2e.Cashier
	gone   func(pid int) error // after a SIGKILL of pid: nil once nothing of the agent is left running
	phases []string
	began  time.Time // before the store started: verify checks every business date since
}

// startField starts the store, the proxy and the agent (bin through runner); brokerHost
// names the proxy's host as the agent is given it (an IP, or a hosts entry).
func startField(t *testing.T, bin string, runner *e2e.Runner, brokerHost string) *field {
	t.Helper()
	dir := t.TempDir()
	f := &field{t: t, began: time.Now()}
	f.store = startStore(t, dir)
	proxy, err := e2e.NewProxy(strings.TrimPrefix(f.store.Broker, "tcp://"))
	if err != nil {
		t.Fatal(err)
	}
	f.proxy = proxy
	t.Cleanup(func() { proxy.Close() })
	_, port, _ := strings.Cut(proxy.Addr(), ":")
	adir := filepath.Join(dir, "agent")
	if err := os.MkdirAll(adir, 0o700); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	a, err := e2e.StartAgent(context.Background(), bin, e2e.AgentOptions{Store: "S1", Terminal: "T01",
		Broker: "tcp://" + brokerHost + ":" + port, DataDir: adir, Runner: runner})
	if err != nil {
		t.Fatal(err)
	}
	f.agent = a
	t.Cleanup(func() {
		a.Kill()
		if t.Failed() {
			t.Logf("agent log:\n%s", tail(a.Log))
		}
	})
	if f.cash, err = e2e.ReadyCashier(context.Background(), a.API, a.Token, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	f.cash.Supervisor = &e2e.DutySupervisor
	f.phase("agent up with the catalog", start)
	return f
}

func (f *field) phase(name string, start time.Time) {
	f.phases = append(f.phases, fmt.Sprintf("%s %s", name, time.Since(start).Round(10*time.Millisecond)))
}

var (
	baskets = [][]string{{"MILK"}, {"BREAD", "EGGS"}, {"TEA", "MILK"}, {"EGGS"}, {"TEA"}}
	methods = []string{"cash", "card", "qr"}
)

// sell runs n sales (and a refund now and then) and fails the test on any that fails.
func (f *field) sell(n, from int) {
	f.t.Helper()
	for i := from; i < from+n; i++ {
		if err := f.cash.Sale(baskets[i%len(baskets)], methods[i%len(methods)]); err != nil {
			f.t.Fatalf("sale %d: %v", i, err)
		}
		if i%7 == 0 {
			if err := f.cash.RefundOne(i); err != nil {
				f.t.Fatalf("refund after sale %d: %v", i, err)
			}
		}
	}
}

func (f *field) waitOnline(want bool, within time.Duration) {
	f.t.Helper()
	deadline := time.Now().Add(within)
	for {
		st, err := f.cash.Status()
		if err == nil && st.Online == want {
			return
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("agent online=%v after %s, want %v (%v)", st.Online, within, want, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// run is the field's day: live sales, the link cut, offline sales, SIGKILL with the backlog
// unsynced, restart, the link back, the drain, more live sales; then every check.
func (f *field) run() {
	t := f.t
	start := time.Now()
	f.waitOnline(true, 30*time.Second)
	f.sell(20, 0)
	f.phase("20 live sales", start)

	start = time.Now()
	f.proxy.Cut()
	f.waitOnline(false, 30*time.Second)
	f.sell(30, 20)
	st, err := f.cash.Status()
	if err != nil || st.Backlog == 0 {
		t.Fatalf("offline with no backlog: %+v %v", st, err)
	}
	f.phase(fmt.Sprintf("link cut, 30 offline sales (backlog %d)", st.Backlog), start)

	start = time.Now()
	pid := f.agent.Pid()
	if err := f.agent.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := f.gone(pid); err != nil {
		t.Fatal(err)
	}
	f.proxy.Restore()
	// The agent refuses to start while another process holds its outbox's lock: a restart
	// that serves proves the killed one let it go.
	if err := f.agent.Restart(context.Background()); err != nil {
		t.Fatalf("restart after SIGKILL: %v", err)
	}
	f.phase("SIGKILL with the backlog unsynced, restart", start)

	start = time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := f.cash.WaitDrained(ctx); err != nil {
		t.Fatalf("drain after restart: %v", err)
	}
	f.phase("backlog drained", start)
	start = time.Now()
	f.sell(10, 50)
	f.phase("10 live sales", start)
	f.verify(60)
	t.Logf("phases: %s", strings.Join(f.phases, "; "))
}

// verify checks, once drained (and at least atLeast events answered 2xx), that till = ledger = Redis (e2e.Verify) and that every event
// the POS app got a 2xx for is in the ledger, accepted, exactly once.
func (f *field) verify(atLeast int) {
	t := f.t
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if f.began.IsZero() {
		t.Fatal("the field's start is not set: verify cannot tell which dates the run sold on")
	}
	loc, err := wire.LoadLocation(f.store.Opts.TZ)
	if err != nil {
		t.Fatal(err)
	}
	// Every date since the start: a run that crosses the store's midnight sold on two.
	rep := e2e.Verify(ctx, f.store, map[string]*e2e.Cashier{"T01": f.cash}, e2e.BusinessDays(loc, f.began))
	t.Logf("invariant report:\n%s", rep)
	if !rep.OK {
		t.Error("till, ledger and Redis do not agree")
	}
	db, err := sql.Open("sqlite3", "file:"+filepath.Join(f.store.Opts.DataDir, "ledger.db")+"?mode=ro&_busy_timeout=5000")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	times := map[string]int{}
	rows, err := db.Query(`SELECT terminal, seq FROM events WHERE status = 'accepted'`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var term string
		var seq int64
		if err := rows.Scan(&term, &seq); err != nil {
			t.Fatal(err)
		}
		times[fmt.Sprintf("%s:%d", term, seq)]++
	}
	rows.Close()
	ok := f.cash.OK()
	bad := 0
	for key := range ok {
		if times[key] != 1 {
			bad++
			if bad <= 5 {
				t.Errorf("event %s answered 2xx is in the ledger %d times", key, times[key])
			}
		}
	}
	if bad > 0 || len(ok) < atLeast {
		t.Errorf("%d of %d events answered 2xx not in the ledger exactly once", bad, len(ok))
	}
	t.Logf("%d events answered 2xx, each in the ledger once", len(ok))
}
