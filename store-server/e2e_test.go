package main

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
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

// The e2e tests run the real binaries: store-server against real mosquitto and a real Redis
// Sentinel trio, and real terminal-agents driven through their local API.

var (
	buildOnce sync.Once
	bins      e2e.Binaries
	buildErr  error
)

func binaries(t *testing.T) e2e.Binaries {
	t.Helper()
	stack.SkipShort(t) // before the build
	buildOnce.Do(func() {
		root, err := e2e.ModuleRoot()
		if err != nil {
			buildErr = err
			return
		}
		dir, err := os.MkdirTemp("", "posgate-e2e-bin-")
		if err != nil {
			buildErr = err
			return
		}
		bins, buildErr = e2e.Build(context.Background(), root, dir, false)
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return bins
}

const e2eCatalog = `sku,barcode,name,price
MILK,6901234567890,Milk 1L,12.50
BREAD,6901234567891,Bread,8.99
EGGS,6901234567892,Eggs x10,15.90
TEA,6901234567894,Green tea,0.30
`

var e2eOpening = map[string]int64{"MILK": 2000, "BREAD": 2000, "EGGS": 2000, "TEA": 20}

// env is one store under test.
type env struct {
	t        *testing.T
	stack    *stack.Stack
	store    *e2e.StoreServer
	agents   map[string]*e2e.Agent
	cashiers map[string]*e2e.Cashier
	proxies  map[string]*e2e.Proxy
	tz       string
	start    time.Time // before the store started: its business date is the first the run can trade on
}

// newEnv starts mosquitto, a Sentinel trio, a store-server and agents; offline lists the
// terminals that reach the broker through a proxy the test can cut.
func newEnv(t *testing.T, tz string, terminals []string, offline ...string) *env {
	t.Helper()
	start := time.Now()
	b := binaries(t)
	st := stack.Run(t, stack.Options{Redis: true, Replicas: 2, Sentinels: 3, MQTT: true})
	dir := t.TempDir()
	cat := filepath.Join(dir, "catalog.csv")
	if err := os.WriteFile(cat, []byte(e2eCatalog), 0o600); err != nil {
		t.Fatal(err)
	}
	sdir := filepath.Join(dir, "store")
	os.MkdirAll(sdir, 0o755) // as an operator makes it: the store-server makes it private
	ctx := context.Background()
	srv, err := e2e.StartStore(ctx, b.StoreServer, e2e.StoreOptions{Store: "S1", DataDir: sdir, TZ: tz,
		Sentinels: st.SentinelAddrs(), MasterName: st.MasterName, MQTTURL: st.MQTTURL(), Catalog: cat})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, stack: st, store: srv, agents: map[string]*e2e.Agent{}, cashiers: map[string]*e2e.Cashier{},
		proxies: map[string]*e2e.Proxy{}, tz: tz, start: start}
	t.Cleanup(func() {
		for _, a := range e.agents {
			a.Kill()
		}
		srv.Kill()
		for _, p := range e.proxies {
			p.Close()
		}
		if t.Failed() {
			t.Logf("store-server log: %s", tail(srv.Log))
		}
	})
	for sku, q := range e2eOpening {
		req := client.AdjustRequest{ID: "opening-" + sku, SKU: sku, Delta: q, Reason: client.ReasonOpening}
		if _, err := srv.Manager().Adjust(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	if err := srv.AllowOfflineRefunds(ctx); err != nil {
		t.Fatal(err)
	}
	for _, term := range terminals {
		broker := st.MQTTURL()
		for _, o := range offline {
			if o == term {
				p, err := e2e.NewProxy(strings.TrimPrefix(st.MQTTURL(), "tcp://"))
				if err != nil {
					t.Fatal(err)
				}
				e.proxies[term] = p
				broker = "tcp://" + p.Addr()
			}
		}
		adir := filepath.Join(dir, "agent-"+term)
		os.MkdirAll(adir, 0o755) // the agent makes it private
		a, err := e2e.StartAgent(ctx, b.TerminalAgent, e2e.AgentOptions{Store: "S1", Terminal: term, Broker: broker,
			DataDir: adir, TZ: tz})
		if err != nil {
			t.Fatal(err)
		}
		e.agents[term] = a
		c, err := e2e.ReadyCashier(ctx, a.API, a.Token, 20*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		c.Supervisor = &e2e.DutySupervisor
		e.cashiers[term] = c
	}
	return e
}

func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// load runs every cashier until ctx ends: mixed baskets and tenders, a refund now and then.
func (e *env) load(ctx context.Context) *sync.WaitGroup {
	var wg sync.WaitGroup
	baskets := [][]string{{"MILK"}, {"BREAD", "EGGS"}, {"TEA", "MILK"}, {"EGGS"}, {"TEA"}}
	methods := []string{"cash", "card", "qr"}
	n := 0
	for _, c := range e.cashiers {
		n++
		wg.Add(1)
		go func(c *e2e.Cashier, seed int) {
			defer wg.Done()
			for i := seed; ctx.Err() == nil; i++ {
				c.Sale(baskets[i%len(baskets)], methods[i%len(methods)])
				if i%9 == 0 {
					c.RefundOne(i)
				}
				select {
				case <-ctx.Done():
				case <-time.After(15 * time.Millisecond):
				}
			}
		}(c, n)
	}
	return &wg
}

// verify checks invariants 1-8 once everything has drained, on the business dates given or,
// with none, on every date of the run (days).
func (e *env) verify(dates ...string) {
	t := e.t
	t.Helper()
	if len(dates) == 0 {
		dates = e.days()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	rep := e2e.Verify(ctx, e.store, e.cashiers, dates)
	t.Logf("invariant report:\n%s", rep)
	if !rep.OK {
		t.Error("invariants 3/4 do not hold")
	}
	db, err := sql.Open("sqlite3", "file:"+filepath.Join(e.store.Opts.DataDir, "ledger.db")+"?mode=ro&_busy_timeout=5000")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// Invariant 1: every event a POS app got a 2xx for is in the ledger, accepted, once.
	accepted := map[string]bool{}
	rows, err := db.Query(`SELECT terminal, seq FROM events WHERE status = 'accepted'`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var term string
		var seq int64
		rows.Scan(&term, &seq)
		accepted[fmt.Sprintf("%s:%d", term, seq)] = true
	}
	rows.Close()
	total, missing := 0, 0
	for term, c := range e.cashiers {
		for key := range c.OK() {
			total++
			if !accepted[key] {
				missing++
				if missing < 5 {
					t.Errorf("event %s (terminal %s) answered 2xx is not in the ledger", key, term)
				}
			}
		}
	}
	if missing > 0 || total == 0 {
		t.Errorf("%d of %d acknowledged events missing from the ledger", missing, total)
	}
	// Invariant 5: no live sale took stock below zero.
	var liveOversells int
	db.QueryRow(`SELECT count(*) FROM oversells o JOIN events e ON e.terminal = o.terminal AND e.seq = o.seq
		WHERE e.offline = 0`).Scan(&liveOversells)
	if liveOversells != 0 {
		t.Errorf("%d oversells come from live sales", liveOversells)
	}
	// Invariant 8: flow numbers never repeat within a business date (sales and refunds).
	var flows, distinct int
	db.QueryRow(`SELECT count(*), count(DISTINCT business_date || ':' || flow_no) FROM
		(SELECT business_date, flow_no FROM sales UNION ALL SELECT business_date, flow_no FROM refunds)`).Scan(&flows, &distinct)
	if flows != distinct || flows == 0 {
		t.Errorf("flow numbers: %d rows, %d distinct", flows, distinct)
	}
	t.Logf("%d events answered 2xx all in the ledger; %d sales+refunds with distinct flow numbers", total, flows)
}

// storeZone is the store's zone tz (UTC if it cannot be loaded), as its business dates go.
func storeZone(tz string) *time.Location {
	loc, err := wire.LoadLocation(tz)
	if err != nil {
		return time.UTC
	}
	return loc
}

// today is the store's business date now.
func today(tz string) string {
	return time.Now().In(storeZone(tz)).Format(wire.BusinessDate)
}

// clearOfMidnight returns once the store's next midnight in tz is more than margin away,
// waiting past it if it is nearer: a step whose effect must be found within margin, on the
// business day the step was taken on.
func clearOfMidnight(tz string, margin time.Duration) {
	loc := storeZone(tz)
	now := time.Now().In(loc)
	y, m, d := now.Date()
	if left := time.Date(y, m, d+1, 0, 0, 0, 0, loc).Sub(now); left <= margin {
		time.Sleep(left + 100*time.Millisecond)
	}
}

// days returns the business dates the run can have traded on, from its start to today.
func (e *env) days() []string { return businessDays(e.tz, e.start) }

// businessDays returns the business dates in the zone tz from that of from to today's
// (e2e.BusinessDays).
func businessDays(tz string, from time.Time) []string {
	return e2e.BusinessDays(storeZone(tz), from)
}

// TestRedisMasterKilledUnderLoad: (a) the Redis master dies under load; Sentinel promotes a
// replica that may have missed writes; the store rebuilds its projection from the ledger.
func TestRedisMasterKilledUnderLoad(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "Asia/Shanghai", []string{"T01", "T02", "T03"})
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	wg := e.load(ctx)
	time.Sleep(3 * time.Second)
	master, err := e.stack.MasterAddr(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range e.stack.Redis {
		if r.Addr() == master {
			r.Kill()
		}
	}
	if _, err := e.stack.WaitFailover(context.Background(), master); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	e.verify()
}

// TestStoreServerKilled: (b) store-server is SIGKILLed at 10 random moments under load.
func TestStoreServerKilled(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "Asia/Shanghai", []string{"T01", "T02", "T03"})
	ctx, cancel := context.WithCancel(context.Background())
	wg := e.load(ctx)
	rng := rand.New(rand.NewPCG(2, uint64(time.Now().UnixNano())))
	for i := 0; i < 10; i++ {
		time.Sleep(time.Duration(300+rng.IntN(700)) * time.Millisecond)
		e.store.Kill()
		if err := e.store.Restart(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(time.Second)
	cancel()
	wg.Wait()
	e.verify()
}

// TestRedisDown: (c) every Redis node is down for a while: the store degrades to the ledger
// alone and keeps selling, then rebuilds and returns to Redis.
func TestRedisDown(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "Asia/Shanghai", []string{"T01", "T02"})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wg := e.load(ctx)
	time.Sleep(2 * time.Second)
	for _, r := range e.stack.Redis {
		r.Kill()
	}
	degraded := false
	deadline := time.Now().Add(4 * time.Second)
	for time.Now().Before(deadline) {
		if m, err := e.store.Manager().Mode(context.Background()); err == nil && m.Mode == client.ModeDegraded {
			degraded = true
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !degraded {
		t.Error("the store never reported degraded mode with Redis down")
	}
	before := 0
	for _, c := range e.cashiers {
		before += len(c.OK())
	}
	time.Sleep(time.Second)
	after := 0
	for _, c := range e.cashiers {
		after += len(c.OK())
	}
	if after <= before {
		t.Error("nothing was sold while Redis was down")
	}
	for _, r := range e.stack.Redis {
		if err := r.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	e.verify()
}

// TestOfflinePastMidnight: (d) a terminal is offline across midnight of its business day; its
// sales land in the day they were made, not the day they synced (invariant 7).
func TestOfflinePastMidnight(t *testing.T) {
	t.Parallel() // mostly waiting for a whole minute: it runs beside the other long tests
	// A fixed-offset zone whose midnight is the first whole UTC minute at least 25 s away
	// (offsets are whole minutes, as RFC 3339 carries; the store and agents start within
	// that, on a machine busy with the other parallel tests); once they are up, the load
	// runs from 5 s before that midnight to 5 s after it.
	midnight := time.Now().UTC().Add(25 * time.Second).Truncate(time.Minute).Add(time.Minute)
	if time.Until(midnight) >= 85*time.Second {
		midnight = midnight.Add(-time.Minute)
	}
	offset := 24*time.Hour - midnight.Sub(midnight.Truncate(24*time.Hour)) // local(midnight) = 00:00
	if offset > 12*time.Hour {
		offset -= 24 * time.Hour
	}
	sign := "+"
	if offset < 0 {
		sign, offset = "-", -offset
	}
	tz := fmt.Sprintf("UTC%s%02d:%02d", sign, int(offset.Hours()), int(offset.Minutes())%60)
	loc, err := wire.LoadLocation(tz)
	if err != nil {
		t.Fatal(err)
	}
	if got := midnight.In(loc).Format("15:04:05"); got != "00:00:00" {
		t.Fatalf("zone %s: midnight is %s local", tz, got)
	}
	e := newEnv(t, tz, []string{"T01", "T02"}, "T02")
	if left := time.Until(midnight); left < 5*time.Second {
		t.Fatalf("the store and agents took until %v before midnight to start; the load needs 5 s before it", left)
	}
	time.Sleep(time.Until(midnight.Add(-5 * time.Second)))
	before := time.Now().In(loc).Format("2006-01-02")
	e.proxies["T02"].Cut()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wg := e.load(ctx)
	wg.Wait()
	after := time.Now().In(loc).Format("2006-01-02")
	if before == after {
		t.Fatalf("the test did not cross midnight in %s (%s)", tz, before)
	}
	st, _ := e.cashiers["T02"].Status()
	if st.Online || st.Backlog == 0 {
		t.Fatalf("T02 was not offline with a backlog: %+v", st)
	}
	for _, d := range []string{before, after} {
		if tot, _ := e.cashiers["T02"].DayTotals(d); tot.SaleCount == 0 {
			t.Fatalf("T02 sold nothing offline on %s", d)
		}
	}
	e.proxies["T02"].Restore()
	e.verify(before, after)
}
