package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/posgate/posgate/e2e"
	"github.com/posgate/posgate/internal/stack"
	"github.com/posgate/posgate/store-server/client"
)

// clusterStore is one store of a shared cluster under test.
type clusterStore struct {
	id       string
	master   *stack.Proc // the node serving the store's slot at the start
	slot     int
	srv      *e2e.StoreServer
	cashiers map[string]*e2e.Cashier
}

// storesOnMasters picks n store ids whose slots are served by n different masters.
func storesOnMasters(t testing.TB, st *stack.Stack, n int) []*clusterStore {
	t.Helper()
	ctx := context.Background()
	var out []*clusterStore
	taken := map[*stack.Proc]bool{}
	for i := 1; len(out) < n && i < 1000; i++ {
		id := fmt.Sprintf("S%03d", i)
		slot, err := st.KeySlot(ctx, slotKey(id))
		if err != nil {
			t.Fatal(err)
		}
		m, err := st.SlotMaster(ctx, slot)
		if err != nil {
			t.Fatal(err)
		}
		if !taken[m] {
			taken[m] = true
			out = append(out, &clusterStore{id: id, master: m, slot: slot, cashiers: map[string]*e2e.Cashier{}})
		}
	}
	if len(out) < n {
		t.Fatalf("found stores on %d masters, want %d", len(out), n)
	}
	return out
}

// startClusterStore starts the store's server on the cluster and two terminals selling.
func startClusterStore(t *testing.T, b e2e.Binaries, st *stack.Stack, cs *clusterStore, dir string) {
	t.Helper()
	ctx := context.Background()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	cat := filepath.Join(dir, "catalog.csv")
	if err := os.WriteFile(cat, []byte(e2eCatalog), 0o600); err != nil {
		t.Fatal(err)
	}
	sdir := filepath.Join(dir, "store")
	os.MkdirAll(sdir, 0o700)
	srv, err := e2e.StartStore(ctx, b.StoreServer, e2e.StoreOptions{Store: cs.id, DataDir: sdir, TZ: "Asia/Shanghai",
		Cluster: st.ClusterAddrs(), MQTTURL: st.MQTTURL(), Catalog: cat})
	if err != nil {
		t.Fatal(err)
	}
	cs.srv = srv
	t.Cleanup(func() {
		srv.Kill()
		if t.Failed() {
			t.Logf("store-server %s log: %s", cs.id, tail(srv.Log))
		}
	})
	if err := srv.AllowOfflineRefunds(ctx); err != nil {
		t.Fatal(err)
	}
	for sku, q := range e2eOpening {
		req := client.AdjustRequest{ID: "opening-" + sku, SKU: sku, Delta: q, Reason: client.ReasonOpening}
		if _, err := srv.Manager().Adjust(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	for _, term := range []string{"T01", "T02"} {
		adir := filepath.Join(dir, "agent-"+term)
		os.MkdirAll(adir, 0o700)
		a, err := e2e.StartAgent(ctx, b.TerminalAgent, e2e.AgentOptions{Store: cs.id, Terminal: term, Broker: st.MQTTURL(),
			DataDir: adir, TZ: "Asia/Shanghai"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { a.Kill() })
		c, err := e2e.ReadyCashier(ctx, a.API, a.Token, 20*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		c.Supervisor = &e2e.DutySupervisor
		cs.cashiers[term] = c
	}
}

// modeWatch samples a store's gate mode and figures every 50 ms.
type modeWatch struct {
	mu       sync.Mutex
	modes    map[client.Mode]int // samples per mode
	rebuilds []int64             // first and last seen
	accepted []int64
	maxGap   time.Duration // the longest time the accepted count stood still while sales went on
}

func watchMode(ctx context.Context, srv *e2e.StoreServer) (*modeWatch, *sync.WaitGroup) {
	w := &modeWatch{modes: map[client.Mode]int{}}
	var wg sync.WaitGroup
	wg.Go(func() {
		last, lastAt := int64(-1), time.Now()
		for ctx.Err() == nil {
			qctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			a, err := srv.Manager().Mode(qctx)
			cancel()
			if err == nil {
				w.mu.Lock()
				w.modes[a.Mode]++
				if len(w.rebuilds) == 0 {
					w.rebuilds, w.accepted = []int64{a.Stats.Rebuilds, 0}, []int64{a.Stats.Accepted, 0}
				}
				w.rebuilds[1], w.accepted[1] = a.Stats.Rebuilds, a.Stats.Accepted
				if a.Stats.Accepted != last {
					last, lastAt = a.Stats.Accepted, time.Now()
				} else {
					w.maxGap = max(w.maxGap, time.Since(lastAt))
				}
				w.mu.Unlock()
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
	return w, &wg
}

// TestClusterSharedByStores: three store-servers (three stores, two selling terminals each)
// share one Redis Cluster of 3 masters with a replica each, each store's keys in one slot,
// the three slots on three masters. Under load, the master of the first store's slot is
// SIGKILLed and its replica promoted: that store rebuilds its projection from the ledger
// and resumes in Redis mode; the two stores on untouched masters never leave Redis mode
// and never rebuild. Invariants hold for all three stores (e2e.Verify: the tills' totals
// = the ledger's = Redis counters, stock proven and equal in Redis).
func TestClusterSharedByStores(t *testing.T) {
	b := binaries(t)
	st := stack.Run(t, stack.Options{Cluster: true, MQTT: true})
	stores := storesOnMasters(t, st, 3)
	for _, cs := range stores {
		startClusterStore(t, b, st, cs, filepath.Join(t.TempDir(), cs.id))
	}
	began := time.Now()
	loadCtx, stopLoad := context.WithCancel(context.Background())
	defer stopLoad()
	var watches []*modeWatch
	var wgs []*sync.WaitGroup
	for _, cs := range stores {
		w, wg := watchMode(loadCtx, cs.srv)
		watches = append(watches, w)
		wgs = append(wgs, wg)
		e := &env{t: t, cashiers: cs.cashiers}
		wgs = append(wgs, e.load(loadCtx))
	}
	start := time.Now()
	time.Sleep(3 * time.Second)
	victim := stores[0]
	if err := victim.master.Kill(); err != nil {
		t.Fatal(err)
	}
	killedAt := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	promoted, err := st.WaitClusterFailover(ctx, victim.master, victim.slot)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("slot %d of store %s moved from %s to %s in %v", victim.slot, victim.id, victim.master.Name, promoted.Name,
		time.Since(killedAt).Round(time.Millisecond))
	time.Sleep(4 * time.Second)
	stopLoad()
	for _, wg := range wgs {
		wg.Wait()
	}
	took := time.Since(start)
	dates := businessDays("Asia/Shanghai", began)
	for i, cs := range stores {
		w := watches[i]
		vctx, vcancel := context.WithTimeout(context.Background(), 90*time.Second)
		rep := e2e.Verify(vctx, cs.srv, cs.cashiers, dates)
		vcancel()
		final, err := cs.srv.Manager().Mode(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("store %s (slot %d on %s): modes sampled %v, rebuilds %d → %d, %d accepted (%.0f/s), longest stand-still %v",
			cs.id, cs.slot, cs.master.Name, w.modes, w.rebuilds[0], final.Stats.Rebuilds, final.Stats.Accepted,
			float64(final.Stats.Accepted)/took.Seconds(), w.maxGap.Round(time.Millisecond))
		if !rep.OK {
			t.Errorf("store %s: invariants do not hold:\n%s", cs.id, rep)
		}
		if i == 0 {
			if final.Stats.Rebuilds <= w.rebuilds[0] || final.Mode != client.ModeRedis {
				t.Errorf("store %s, whose master died: rebuilds %d → %d, mode %s; want a rebuild and Redis mode",
					cs.id, w.rebuilds[0], final.Stats.Rebuilds, final.Mode)
			}
			continue
		}
		if len(w.modes) != 1 || w.modes[client.ModeRedis] == 0 || final.Stats.Rebuilds != w.rebuilds[0] {
			t.Errorf("store %s on an untouched master paused: modes %v, rebuilds %d → %d", cs.id, w.modes,
				w.rebuilds[0], final.Stats.Rebuilds)
		}
	}
}
