package outbox_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/posgate/posgate/internal/sqlitedb"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/terminal-agent/outbox"
)

// minSamples is the fewest commits of each kind a latency benchmark measures, whatever b.N
// is, so that `make bench` (-benchtime 1x) still yields a meaningful p99.
const minSamples = 3000

// basketLines is how many lines the scan benchmark adds to a sale before it opens the next.
const basketLines = 20

var benchCatalog = wire.Catalog{V: 1, Store: "S1", Version: 1, Items: []wire.CatalogItem{
	{SKU: "MILK", Barcode: "6901234567890", Name: "Milk 1L", Price: 1250},
	{SKU: "BREAD", Name: "Bread", Price: 899},
	{SKU: "EGGS", Name: "Eggs x10", Price: 1590},
}}

// BenchmarkDurableEnqueue measures how long the outbox takes to durably commit one event, next
// to a raw single-row SQLite commit on a second database opened the same way (WAL,
// synchronous=FULL, through sqlitedb) in the same directory. The two are interleaved, one
// sample of each per round and alternating which goes first, so that both see the same disk
// and the same neighbours.
//
//   - scan: outbox.Store.Do with a client token that adds a line to an open sale, as the
//     API's POST /v1/sales/{id}/lines does: one scan event.
//   - heartbeat: outbox.Store.Enqueue of a heartbeat, the smallest event the outbox queues.
//
// It reports the p50 and p99 of each (enq-*, raw-*) and their ratios; ns/op is the mean
// enqueue latency. It runs max(b.N, minSamples) rounds.
func BenchmarkDurableEnqueue(b *testing.B) {
	b.Run("scan", func(b *testing.B) {
		ctx := context.Background()
		s := openBenchStore(b)
		var sale string
		lines := 0
		newSale := func() {
			var err error
			sale, _, _, err = s.Do(ctx, "", "", outbox.Mode{Disconnected: true}, func(t *outbox.Tx) (string, error) {
				return t.OpenSale()
			})
			if err != nil {
				b.Fatal(err)
			}
			lines = 0
		}
		newSale()
		n := 0
		benchCommits(b, s, func() error {
			n++
			lines++
			token := fmt.Sprintf("bench-%d", n)
			body := []byte(`{"sku":"MILK","qty":1}`)
			fp := outbox.Fingerprint("POST", "/v1/sales/"+sale+"/lines", body)
			_, _, _, err := s.Do(ctx, token, fp, outbox.Mode{Disconnected: true}, func(t *outbox.Tx) (string, error) {
				_, err := t.AddLine(sale, "MILK", "", 1)
				return sale, err
			})
			return err
		}, func() {
			if lines == basketLines { // the next customer's sale; not timed
				newSale()
			}
		})
	})
	b.Run("heartbeat", func(b *testing.B) {
		ctx := context.Background()
		s := openBenchStore(b)
		benchCommits(b, s, func() error {
			_, err := s.Enqueue(ctx, wire.KindHeartbeat, &wire.HeartbeatPayload{Backlog: 12, OldestAgeMs: 3456, CatalogVersion: 1})
			return err
		}, nil)
	})
}

func openBenchStore(b *testing.B) *outbox.Store {
	b.Helper()
	ctx := context.Background()
	s, err := outbox.Open(ctx, filepath.Join(b.TempDir(), "outbox.db"), outbox.Config{Store: "S1", Terminal: "T1", Location: time.UTC})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	if _, err := s.ReplaceCatalog(ctx, benchCatalog); err != nil {
		b.Fatal(err)
	}
	return s
}

// benchCommits times enqueue against a raw single-row commit, interleaved, and reports both
// distributions. between, if set, runs untimed after each round.
func benchCommits(b *testing.B, s *outbox.Store, enqueue func() error, between func()) {
	b.Helper()
	raw := openRaw(b)
	rounds := max(b.N, minSamples)
	enq := make([]time.Duration, 0, rounds)
	ref := make([]time.Duration, 0, rounds)
	timeOne := func(f func() error, into *[]time.Duration) {
		t0 := time.Now()
		if err := f(); err != nil {
			b.Fatal(err)
		}
		*into = append(*into, time.Since(t0))
	}
	// Warm up both databases (first pages, statement caches) untimed.
	for range 20 {
		if err := enqueue(); err != nil {
			b.Fatal(err)
		}
		if err := raw(); err != nil {
			b.Fatal(err)
		}
		if between != nil {
			between()
		}
	}
	b.ResetTimer()
	for i := range rounds {
		if i%2 == 0 {
			timeOne(enqueue, &enq)
			timeOne(raw, &ref)
		} else {
			timeOne(raw, &ref)
			timeOne(enqueue, &enq)
		}
		if between != nil {
			between()
		}
	}
	b.StopTimer()
	reportLatencies(b, enq, ref)
}

// openRaw opens a second database the way every posgate database is opened and returns a
// function that commits one row of the size of a scan event in its own transaction.
func openRaw(b *testing.B) func() error {
	b.Helper()
	ctx := context.Background()
	db, err := sqlitedb.Open(ctx, filepath.Join(b.TempDir(), "raw.db"), nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	if _, err := db.W.ExecContext(ctx, `CREATE TABLE t (id INTEGER PRIMARY KEY, payload BLOB NOT NULL, created_ms INTEGER NOT NULL)`); err != nil {
		b.Fatal(err)
	}
	payload := []byte(`{"sale_id":"T1-0123456789abcdef","line":1,"sku":"MILK","qty":1,"unit_price":1250}`)
	return func() error {
		tx, err := db.W.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if _, err := tx.ExecContext(ctx, `INSERT INTO t (payload, created_ms) VALUES (?, ?)`, payload, time.Now().UnixMilli()); err != nil {
			return err
		}
		return tx.Commit()
	}
}

// reportLatencies reports p50 and p99 of enq and ref, their ratios, and the mean of enq as
// ns/op.
func reportLatencies(b *testing.B, enq, ref []time.Duration) {
	b.Helper()
	slices.Sort(enq)
	slices.Sort(ref)
	var sum time.Duration
	for _, d := range enq {
		sum += d
	}
	ep50, ep99 := percentile(enq, 50), percentile(enq, 99)
	rp50, rp99 := percentile(ref, 50), percentile(ref, 99)
	b.ReportMetric(float64(sum.Nanoseconds())/float64(len(enq)), "ns/op")
	b.ReportMetric(float64(ep50.Nanoseconds()), "enq-p50-ns")
	b.ReportMetric(float64(ep99.Nanoseconds()), "enq-p99-ns")
	b.ReportMetric(float64(rp50.Nanoseconds()), "raw-p50-ns")
	b.ReportMetric(float64(rp99.Nanoseconds()), "raw-p99-ns")
	b.ReportMetric(float64(ep50)/float64(rp50), "p50-x-raw")
	b.ReportMetric(float64(ep99)/float64(rp99), "p99-x-raw")
}

// percentile returns the p-th percentile (nearest rank) of sorted durations.
func percentile(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := (len(sorted)*p + 99) / 100 // ceil(n·p/100), 1-based
	return sorted[max(i, 1)-1]
}
