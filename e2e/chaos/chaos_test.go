package chaos

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/posgate/posgate/e2e"
	"github.com/posgate/posgate/internal/stack"
	"github.com/posgate/posgate/store-server/client"
)

// The environment of a run: CHAOS_SEED (default: a fresh one, printed) draws the schedule;
// CHAOS_MINUTES (default 1: the short run of `make test`) bounds the faults' time.
const (
	seedEnv    = "CHAOS_SEED"
	minutesEnv = "CHAOS_MINUTES"
)

const catalog = `sku,barcode,name,price
MILK,6901234567890,Milk 1L,12.50
BREAD,6901234567891,Bread,8.99
EGGS,6901234567892,Eggs x10,15.90
TEA,6901234567894,Green tea,0.30
`

// hqSecret is the store's secret with HQ.
const hqSecret = "chaos-store-secret-for-hq"

var opening = map[string]int64{"MILK": 100000, "BREAD": 100000, "EGGS": 100000, "TEA": 50}

// TestChaos runs a seeded schedule of faults against one store (a Redis Sentinel trio,
// mosquitto, a store-server and three tills, one behind a proxy, the store's uploader to an
// HQ) under a cashier load, and checks the invariants after every fault and at the end, and
// at the end that HQ holds every row and exception of the store's ledger.
func TestChaos(t *testing.T) {
	seed, minutes := runParams(t)
	t.Logf("chaos seed %d, %.1f minutes (rerun: make chaos SEED=%d MINUTES=%g)", seed, minutes, seed, minutes)
	c, cashiers := startCluster(t)
	sched := NewSchedule(seed)
	ctx := context.Background()
	load := StartLoad(cashiers)
	defer load.Stop()
	dates := []string{Today(c.TZ)}
	start := time.Now()
	for n := 1; time.Since(start) < time.Duration(minutes*float64(time.Minute)); n++ {
		st := sched.Next()
		sleep(ctx, st.Calm)
		did, err := c.Inject(ctx, st)
		if err != nil {
			t.Fatalf("seed %d step %d %v: %v", seed, n, st, err)
		}
		load.Pause()
		for _, d := range append(c.Dates(), Today(c.TZ)) {
			if !slices.Contains(dates, d) {
				dates = append(dates, d)
			}
		}
		rep := Check(ctx, c.Store, cashiers, dates)
		load.Resume()
		m, _ := c.Store.Manager().Mode(ctx)
		t.Logf("step %d at %v: %s: %s; drift %d %v, rebuilds %d", n, time.Since(start).Round(time.Second), st.Fault,
			did, m.Stats.Drift, m.Stats.DriftReasons, m.Stats.Rebuilds)
		if !rep.OK {
			t.Fatalf("seed %d step %d (%v): invariants broken (rerun: make chaos SEED=%d MINUTES=%g):\n%s\nstore-server log:\n%s",
				seed, n, st, seed, minutes, rep, tail(c.Store.Log))
		}
	}
	load.Stop()
	rep := Check(ctx, c.Store, cashiers, dates)
	if !rep.OK {
		t.Fatalf("seed %d at the end: invariants broken:\n%s", seed, rep)
	}
	t.Logf("seed %d: final check\n%s", seed, joinLines(rep.String()))
	// HQ holds what the ledger holds, once the uploader has sent it all.
	hqCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	hq := e2e.Report{OK: true}
	e2e.VerifyHQ(hqCtx, c.Store, c.HQ, &hq)
	if !hq.OK {
		t.Fatalf("seed %d at the end: HQ does not hold the store's ledger:\n%s\nuploader log:\n%s", seed, hq,
			tail(c.Uploader.Log))
	}
	t.Logf("seed %d: at HQ\n%s", seed, joinLines(hq.String()))
}

// runParams reads the seed and the minutes of a run.
func runParams(t *testing.T) (uint64, float64) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(seedEnv); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("%s=%q: %v", seedEnv, s, err)
		}
	}
	minutes := 1.0
	if s := os.Getenv(minutesEnv); s != "" {
		var err error
		if minutes, err = strconv.ParseFloat(s, 64); err != nil || minutes <= 0 {
			t.Fatalf("%s=%q: want a positive number of minutes", minutesEnv, s)
		}
	}
	return seed, minutes
}

// startCluster starts the store and its tills.
func startCluster(t *testing.T) (*Cluster, map[string]*e2e.Cashier) {
	t.Helper()
	stack.SkipShort(t)
	ctx := context.Background()
	root, err := e2e.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	bins, err := e2e.Build(ctx, root, t.TempDir(), false)
	if err != nil {
		t.Fatal(err)
	}
	st := stack.Run(t, stack.Options{Redis: true, Replicas: 2, Sentinels: 3, MQTT: true, Logf: func(string, ...any) {}})
	dir := t.TempDir()
	cat := filepath.Join(dir, "catalog.csv")
	if err := os.WriteFile(cat, []byte(catalog), 0o600); err != nil {
		t.Fatal(err)
	}
	c := &Cluster{Stack: st, StoreID: "S1", TZ: "Asia/Shanghai", Agents: map[string]*e2e.Agent{},
		Terminals: []string{"T01", "T02", "T03"}, SKUs: []string{"BREAD", "EGGS", "MILK", "TEA"}, CutTerminal: "T03",
		ClockFiles: map[string]string{}}
	sdir := filepath.Join(dir, "store")
	if err := os.MkdirAll(sdir, 0o700); err != nil {
		t.Fatal(err)
	}
	c.Store, err = e2e.StartStore(ctx, bins.StoreServer, e2e.StoreOptions{Store: c.StoreID, DataDir: sdir, TZ: c.TZ,
		Sentinels: st.SentinelAddrs(), MasterName: st.MasterName, MQTTURL: st.MQTTURL(), Catalog: cat})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, a := range c.Agents {
			a.Kill()
		}
		c.Store.Kill()
	})
	hqDir := filepath.Join(dir, "hq")
	if err := os.MkdirAll(hqDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if c.HQ, err = e2e.StartServe(ctx, bins.HQSync, e2e.ServeOptions{DB: filepath.Join(hqDir, "hq.db"),
		Stores: map[string]string{c.StoreID: hqSecret}, Dir: hqDir}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.HQ.Kill() })
	if c.Uploader, err = e2e.StartUploader(ctx, bins.HQSync, e2e.UploaderOptions{Store: c.StoreID, DataDir: sdir,
		HQURL: c.HQ.BatchesURL(), Secret: hqSecret, TZ: c.TZ}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Uploader.Kill() })
	m := c.Store.Manager()
	for sku, q := range opening {
		if _, err := m.Adjust(ctx, client.AdjustRequest{ID: "opening-" + sku, SKU: sku, Delta: q, Reason: client.ReasonOpening}); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Store.AllowOfflineRefunds(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := m.SetLimits(ctx, client.Limits{WindowMs: 1000, Store: 2000, Terminal: 500, Scan: 200, Pay: 50, Refund: 20}); err != nil {
		t.Fatal(err)
	}
	if c.Proxy, err = e2e.NewProxy(st.Mosquitto.Addr()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Proxy.Close() })
	cashiers := map[string]*e2e.Cashier{}
	for _, term := range c.Terminals {
		broker := st.MQTTURL()
		if term == c.CutTerminal {
			broker = "tcp://" + c.Proxy.Addr()
		}
		adir := filepath.Join(dir, "agent-"+term)
		if err := os.MkdirAll(adir, 0o700); err != nil {
			t.Fatal(err)
		}
		c.ClockFiles[term] = filepath.Join(adir, "clock-offset")
		a, err := e2e.StartAgent(ctx, bins.TerminalAgent, e2e.AgentOptions{Store: c.StoreID, Terminal: term, Broker: broker,
			DataDir: adir, TZ: c.TZ, Extra: []string{"--clock-offset-file", c.ClockFiles[term]}})
		if err != nil {
			t.Fatal(err)
		}
		c.Agents[term] = a
		if cashiers[term], err = e2e.ReadyCashier(ctx, a.API, a.Token, 30*time.Second); err != nil {
			t.Fatal(err)
		}
		cashiers[term].Supervisor = &e2e.DutySupervisor
	}
	c.Cashiers = cashiers
	return c, cashiers
}

func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 6000 {
		b = b[len(b)-6000:]
	}
	return string(b)
}

// TestScheduleSeeded: a seed draws the same steps every time, and every fault comes up.
func TestScheduleSeeded(t *testing.T) {
	a, b := NewSchedule(42), NewSchedule(42)
	seen := map[Fault]bool{}
	for range 200 {
		x, y := a.Next(), b.Next()
		if x != y {
			t.Fatalf("seed 42 drew %v then %v", x, y)
		}
		seen[x.Fault] = true
	}
	if len(seen) != int(numFaults) {
		t.Errorf("200 steps drew %d of %d faults", len(seen), numFaults)
	}
	// Clock steps go both ways, by minutes and by more than a day.
	var ahead, behind, small, large bool
	s := NewSchedule(42)
	for range 200 {
		d := s.Next().Clock
		ahead, behind = ahead || d > 0, behind || d < 0
		small, large = small || d.Abs() < time.Hour, large || d.Abs() > 24*time.Hour
		if d == 0 || d.Abs() > 31*time.Hour {
			t.Fatalf("clock step %v: want 1 minute to 31 hours either way", d)
		}
	}
	if !ahead || !behind || !small || !large {
		t.Errorf("200 clock steps: ahead %v, behind %v, under an hour %v, over a day %v", ahead, behind, small, large)
	}
	if NewSchedule(43).Next() == NewSchedule(42).Next() {
		t.Error("seeds 42 and 43 drew the same first step")
	}
}
