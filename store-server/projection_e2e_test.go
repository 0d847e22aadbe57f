package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/posgate/posgate/e2e"
	chrome "github.com/posgate/posgate/e2e/browser"
	"github.com/posgate/posgate/internal/stack"
	"github.com/posgate/posgate/store-server/client"
)

// TestProjectionKeysDropped: under live load from real agents, Redis loses part of the
// projection while it stays up (a SKU's stock field, a terminal's counter hash, every key
// of the store): within 2 s the store has rebuilt it from the ledger, no live sale of an
// in-stock SKU was refused for it, and Redis equals the ledger after.
func TestProjectionKeysDropped(t *testing.T) {
	e := newEnv(t, "Asia/Shanghai", []string{"T01", "T02", "T03"})
	ctx := context.Background()
	m := e.store.Manager()
	// Limits far above the load: a refusal here can only be one for stock.
	if _, err := m.SetLimits(ctx, client.Limits{WindowMs: 1000, Store: 100000, Terminal: 10000, Scan: 10000, Pay: 10000, Refund: 10000}); err != nil {
		t.Fatal(err)
	}
	prefix := "pg:{S1}:"
	for _, c := range []struct {
		name, reason string
		drop         func(rdb *redis.Client) error
	}{
		{"sku-stock-field", "stock_missing", func(rdb *redis.Client) error { return rdb.HDel(ctx, prefix+"stock", "MILK").Err() }},
		{"terminal-counter-hash", "counters_missing", func(rdb *redis.Client) error {
			// Today's hash, dropped clear of the store's midnight: the sales and the marker
			// check that must find it are of the same day (a hash of the day before, dropped
			// just after midnight, is one neither reads).
			clearOfMidnight(e.tz, 3*time.Second)
			return rdb.Del(ctx, prefix+"cnt:"+today(e.tz)+":T02").Err()
		}},
		{"store-keys", "marker_missing", func(rdb *redis.Client) error {
			keys, err := rdb.Keys(ctx, prefix+"*").Result()
			if err == nil {
				err = rdb.Del(ctx, keys...).Err()
			}
			return err
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			e.t = t
			before, err := m.Mode(ctx)
			if err != nil {
				t.Fatal(err)
			}
			refused := map[string]int{}
			for term, cs := range e.cashiers {
				refused[term] = cs.Codes()["out_of_stock"]
			}
			lctx, stop := context.WithCancel(ctx)
			var slowest sync.Map // phase → the slowest whole sale seen by a cashier
			phase := "before"
			var phaseMu sync.Mutex
			wg := e.inStockLoad(lctx, func(took time.Duration) {
				phaseMu.Lock()
				p := phase
				phaseMu.Unlock()
				for {
					old, loaded := slowest.LoadOrStore(p, took)
					if !loaded || old.(time.Duration) >= took || slowest.CompareAndSwap(p, old, took) {
						return
					}
				}
			})
			time.Sleep(1500 * time.Millisecond)
			master, err := e.stack.MasterAddr(ctx)
			if err != nil {
				t.Fatal(err)
			}
			rdb := redis.NewClient(&redis.Options{Addr: master})
			defer rdb.Close()
			phaseMu.Lock()
			phase = "around the drop"
			phaseMu.Unlock()
			if err := c.drop(rdb); err != nil {
				t.Fatal(err)
			}
			took, err := waitRebuilt(ctx, m, before.Stats, 2*time.Second)
			if err != nil {
				t.Error(err)
			}
			t.Logf("dropped %s: drift found and rebuilt in %v (polled every 20ms)", c.name, took.Round(time.Millisecond))
			time.Sleep(time.Second)
			stop()
			wg.Wait()
			b, _ := slowest.Load("before")
			d, _ := slowest.Load("around the drop")
			t.Logf("slowest whole sale (open, lines, pay) seen by a cashier: %v before, %v from the drop on", b, d)
			if log, err := os.ReadFile(e.store.Log); err == nil {
				last := ""
				for l := range strings.Lines(string(log)) {
					if strings.Contains(l, "projection rebuilt") {
						last = strings.TrimSpace(l)
					}
				}
				t.Logf("store log: %s", last)
			}
			after, err := m.Mode(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if n := after.Stats.Refused - before.Stats.Refused; n != 0 {
				t.Errorf("%d live events refused while the SKUs were in stock", n)
			}
			for term, cs := range e.cashiers {
				if n := cs.Codes()["out_of_stock"] - refused[term]; n != 0 {
					t.Errorf("%s: %d answers out_of_stock to the cashier, with every SKU in stock", term, n)
				}
			}
			t.Logf("drift %d by reason %v, rebuilds %d", after.Stats.Drift, after.Stats.DriftReasons, after.Stats.Rebuilds)
			if n := after.Stats.DriftReasons[c.reason] - before.Stats.DriftReasons[c.reason]; n < 1 {
				t.Errorf("no drift %s counted", c.reason)
			}
			want := fmt.Sprintf(`posgate_store_projection_drift_total{reason="%s"} %d`, c.reason, after.Stats.DriftReasons[c.reason])
			if got := metricLine(t, e, `posgate_store_projection_drift_total{reason="`+c.reason+`"}`); got != want {
				t.Errorf("metric %q, want %q", got, want)
			}
			e.verify()
		})
	}
	// The store manager reads it on the dashboard, in the page's language.
	b := chrome.Start(t, "zh-CN,zh")
	b.Open("http://" + e.store.API + "/#token=" + e.store.Opts.Token)
	b.WaitText("#alerts", "Redis 丢失了部分投影")
	if got := b.Text("#alerts"); !strings.Contains(got, "marker_missing") {
		t.Errorf("the dashboard's alerts do not name the last drift: %q", got)
	}
}

// waitRebuilt waits until the store has counted a drift and a rebuild past before and is
// back in Redis mode, and returns how long that took.
func waitRebuilt(ctx context.Context, m *client.Client, before client.Stats, within time.Duration) (time.Duration, error) {
	start := time.Now()
	for {
		a, err := m.Mode(ctx)
		if err == nil && a.Stats.Drift > before.Drift && a.Stats.Rebuilds > before.Rebuilds && a.Mode == client.ModeRedis {
			return time.Since(start), nil
		}
		if time.Since(start) > within {
			return time.Since(start), &driftErr{within: within, mode: a}
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type driftErr struct {
	within time.Duration
	mode   client.ModeAnswer
}

func (d *driftErr) Error() string {
	return "no drift found and rebuilt within " + d.within.String() + ": mode " + string(d.mode.Mode)
}

// inStockLoad runs every cashier on SKUs with stock to spare until ctx ends, telling took
// how long each whole sale took.
func (e *env) inStockLoad(ctx context.Context, took func(time.Duration)) *sync.WaitGroup {
	var wg sync.WaitGroup
	baskets := [][]string{{"MILK"}, {"BREAD", "EGGS"}, {"EGGS", "MILK"}, {"BREAD"}}
	methods := []string{"cash", "card", "qr"}
	n := 0
	for _, c := range e.cashiers {
		n++
		first := n // each cashier starts at its own basket
		wg.Go(func() {
			for i := first; ctx.Err() == nil; i++ {
				start := time.Now()
				c.Sale(baskets[i%len(baskets)], methods[i%len(methods)])
				took(time.Since(start))
				if i%9 == 0 {
					c.RefundOne(i)
				}
				select {
				case <-ctx.Done():
				case <-time.After(20 * time.Millisecond):
				}
			}
		})
	}
	return &wg
}

// TestEvictionPolicyRefused: on a real redis-server with maxmemory-policy allkeys-lru the
// store does not run its gate: it sells on the ledger alone and says why (log, /v1/mode);
// once the policy is noeviction it rebuilds and runs the gate.
func TestEvictionPolicyRefused(t *testing.T) {
	b := binaries(t)
	st := stack.Run(t, stack.Options{Redis: true})
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: st.Redis[0].Addr()})
	defer rdb.Close()
	if err := rdb.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	srv, err := e2e.StartStore(ctx, b.StoreServer, e2e.StoreOptions{Store: "S1", DataDir: dir, RedisAddr: st.Redis[0].Addr()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Kill() })
	m := srv.Manager()
	a, err := m.Mode(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if a.Mode != client.ModeDegraded || !strings.Contains(a.Stats.GateRefused, "maxmemory-policy is allkeys-lru") {
		t.Fatalf("mode %s, gate_refused %q: want degraded, refused for allkeys-lru", a.Mode, a.Stats.GateRefused)
	}
	log, _ := os.ReadFile(filepath.Join(dir, "store-server.log"))
	if !strings.Contains(string(log), "the gate refuses this Redis") || !strings.Contains(string(log), "allkeys-lru") {
		t.Errorf("the log does not say why:\n%s", log)
	}
	if n := strings.Count(string(log), "the gate refuses this Redis"); n != 1 {
		t.Errorf("the refusal is logged %d times, want once", n)
	}
	// The store manager reads why on the dashboard, in the page's language.
	br := chrome.Start(t, "zh-CN,zh")
	br.Open("http://" + srv.API + "/#token=" + srv.Opts.Token)
	br.WaitText("#alerts", "闸门拒绝使用此 Redis")
	if got := br.Text("#alerts"); !strings.Contains(got, "allkeys-lru") {
		t.Errorf("the dashboard's alert does not say why: %q", got)
	}
	if err := rdb.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		a, err = m.Mode(ctx)
		if err == nil && a.Mode == client.ModeRedis && a.Stats.GateRefused == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after noeviction: mode %+v, %v", a, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
