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

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/posgate/posgate/e2e"
	"github.com/posgate/posgate/internal/stack"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/client"
)

// clusterBenchStore starts the store-server binary of store on the cluster with the bench
// catalog, every live limit at its maximum and opening stock of 10 million per SKU.
func clusterBenchStore(b *testing.B, bin string, st *stack.Stack, store, dir string) *e2e.StoreServer {
	b.Helper()
	ctx := context.Background()
	var csv strings.Builder
	csv.WriteString("sku,name,price\n")
	for _, it := range benchSKUs {
		fmt.Fprintf(&csv, "%s,%s,%s\n", it.SKU, it.Name, it.Price)
	}
	if err := os.MkdirAll(filepath.Join(dir, "store"), 0o700); err != nil {
		b.Fatal(err)
	}
	catalog := filepath.Join(dir, "catalog.csv")
	if err := os.WriteFile(catalog, []byte(csv.String()), 0o600); err != nil {
		b.Fatal(err)
	}
	srv, err := e2e.StartStore(ctx, bin, e2e.StoreOptions{Store: store, DataDir: filepath.Join(dir, "store"), TZ: benchTZ,
		Cluster: st.ClusterAddrs(), MQTTURL: st.MQTTURL(), Token: benchToken, Catalog: catalog, LogLevel: "warn"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { srv.Stop() })
	mgr := srv.Manager()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if m, err := mgr.Mode(ctx); err == nil && m.Mode == client.ModeRedis {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("store %s: the gate is not in redis mode after 30s", store)
		}
		time.Sleep(50 * time.Millisecond)
	}
	const top = 1_000_000_000
	if _, err := mgr.SetLimits(ctx, client.Limits{WindowMs: 1000, Store: top, Terminal: top, Scan: top, Pay: top, Refund: top}); err != nil {
		b.Fatal(err)
	}
	for _, it := range benchSKUs {
		if _, err := mgr.Adjust(ctx, client.AdjustRequest{ID: "open-" + it.SKU, SKU: it.SKU, Delta: 10_000_000,
			Reason: client.ReasonOpening}); err != nil {
			b.Fatal(err)
		}
	}
	return srv
}

// clusterDrain drains a backlog of terminals × perTerminal offline sales into each of
// stores at once, and returns each store's time from the first publish to its last ack.
// Every sale must be acked accepted and be in the store's ledger, Redis agreeing.
func clusterDrain(b *testing.B, broker string, stores map[string]*e2e.StoreServer, prefix string, terminals int,
	perTerminal int64, at time.Time) map[string]time.Duration {
	b.Helper()
	took := map[string]time.Duration{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	terms := map[string][]*drainTerm{}
	clients := map[string][]mqtt.Client{}
	for store := range stores {
		for t := range terminals {
			d := newDrainTermOf(store, fmt.Sprintf("%s-%d", prefix, t), perTerminal, at)
			if err := stores[store].Enrol(d.id); err != nil {
				b.Fatal(err)
			}
			terms[store] = append(terms[store], d)
			clients[store] = append(clients[store], benchConnectTo(b, broker, store, d.id, d.onAcks))
		}
	}
	start := time.Now()
	for store, ds := range terms {
		wg.Go(func() {
			var sw sync.WaitGroup
			for i, d := range ds {
				sw.Go(func() { d.run(ctx, clients[store][i]) })
			}
			sw.Wait()
			mu.Lock()
			took[store] = time.Since(start)
			mu.Unlock()
		})
	}
	wg.Wait()
	loc, _ := wire.LoadLocation(benchTZ)
	date := at.In(loc).Format(wire.BusinessDate)
	for store, ds := range terms {
		for _, c := range clients[store] {
			c.Disconnect(100)
		}
		tot, err := stores[store].Manager().Totals(context.Background(), date)
		if err != nil {
			b.Fatal(err)
		}
		sales := map[string]int64{}
		for _, tt := range tot.Terminals {
			sales[tt.Terminal] = tt.Ledger.Sales
			if tt.RedisDiff {
				b.Errorf("store %s %s: Redis's counters differ from the ledger's", store, tt.Terminal)
			}
		}
		for _, d := range ds {
			d.mu.Lock()
			if d.low <= d.n || len(d.bad) > 0 || sales[d.id] != perTerminal {
				b.Fatalf("store %s %s: %d of %d acked, %d in the ledger, bad acks %q", store, d.id, d.low-1, d.n, sales[d.id], d.bad)
			}
			d.mu.Unlock()
		}
	}
	return took
}

// BenchmarkClusterStores: three stores share one Redis Cluster (3 masters with a replica
// each; each store's slot on another master) and one mosquitto, each its own store-server
// binary. Each store drains an offline backlog of 2 terminals × 10,000 three-line sales
// (batches of 250, a window of 2,000, as the agent sends). The reference, in the same run:
// the first store draining the same backlog alone on the same cluster. It reports each
// store's events/s when the three drain at once (store-min-events/s, store-mean-events/s),
// their sum (cluster-events/s), the lone store's (alone-events/s), and the ratio of the
// mean to it. All of it shares the machine's cores: on 2 cores the three stores' servers,
// the six Redis nodes and mosquitto compete for them.
// go test -run '^$' -bench ClusterStores -benchtime 1x -timeout 30m ./store-server/
func BenchmarkClusterStores(b *testing.B) {
	const terminals, perTerminal = 2, 10_000
	st := stack.Run(b, stack.Options{Cluster: true, MQTT: true, Logf: func(string, ...any) {}})
	root, err := e2e.ModuleRoot()
	if err != nil {
		b.Fatal(err)
	}
	bins, err := e2e.Build(context.Background(), root, b.TempDir(), false)
	if err != nil {
		b.Fatal(err)
	}
	picked := storesOnMasters(b, st, 3)
	dir := b.TempDir()
	stores := map[string]*e2e.StoreServer{}
	for _, cs := range picked {
		stores[cs.id] = clusterBenchStore(b, bins.StoreServer, st, cs.id, filepath.Join(dir, cs.id))
	}
	first := picked[0].id
	at := time.Now().Add(-2 * time.Hour) // sold offline two hours ago, one event per ms
	if loc, _ := wire.LoadLocation(benchTZ); at.In(loc).Format(wire.BusinessDate) !=
		at.Add(perTerminal*time.Millisecond).In(loc).Format(wire.BusinessDate) {
		at = at.Add(-5 * time.Minute) // keep the backlog on one business date: its totals are read on at's
	}
	for i := 0; b.Loop(); i++ {
		alone := clusterDrain(b, st.MQTTURL(), map[string]*e2e.StoreServer{first: stores[first]}, fmt.Sprintf("A%d", i),
			terminals, perTerminal, at)[first]
		together := clusterDrain(b, st.MQTTURL(), stores, fmt.Sprintf("C%d", i), terminals, perTerminal, at)
		n := float64(terminals * perTerminal)
		aloneRate := n / alone.Seconds()
		var sum, low float64
		for store, d := range together {
			r := n / d.Seconds()
			sum += r
			if low == 0 || r < low {
				low = r
			}
			b.Logf("store %s with the two others: %.0f events/s (%v)", store, r, d.Round(time.Millisecond))
		}
		mean := sum / float64(len(together))
		b.Logf("store %s alone: %.0f events/s (%v); three at once: %.0f events/s each on average, %.0f in all",
			first, aloneRate, alone.Round(time.Millisecond), mean, sum)
		b.ReportMetric(low, "store-min-events/s")
		b.ReportMetric(mean, "store-mean-events/s")
		b.ReportMetric(sum, "cluster-events/s")
		b.ReportMetric(aloneRate, "alone-events/s")
		b.ReportMetric(mean/aloneRate, "x-alone")
	}
}
