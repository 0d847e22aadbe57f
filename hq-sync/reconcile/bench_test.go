package reconcile

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/posgate/posgate/hq-sync/hqstore"
	"github.com/posgate/posgate/hq-sync/hqstore/sqlite"
	"github.com/posgate/posgate/hq-sync/hqstore/storetest"
	"github.com/posgate/posgate/internal/hqwire"
	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/wire"
)

// Day fixture of BenchmarkReconcile1M: 500 stores × 4 terminals × 500 transactions (one in
// 25 a refund), each terminal's day close and each store's declaration.
const (
	benchStores    = 500
	benchTerminals = 4
	benchPerTerm   = 500
)

// loadBenchDay stores the fixture in st, one batch per store, and returns the number of
// transactions.
func loadBenchDay(tb testing.TB, st hqstore.Storage) int {
	tb.Helper()
	start := time.Now()
	type batch struct {
		b    *hqwire.Batch
		hash string
	}
	// Building rows (payload JSON and content hashes) is CPU work: do it in parallel.
	batches := make([]batch, benchStores)
	var wg sync.WaitGroup
	next := make(chan int)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for s := range next {
				store := fmt.Sprintf("S%04d", s)
				var rows, closes []hqwire.Row
				for t := range benchTerminals {
					term := fmt.Sprintf("T%d", t)
					trows := storetest.Sales(store, term, 1, benchPerTerm, date, t0)
					for i := 24; i < len(trows); i += 25 {
						trows[i] = storetest.Refund(store, term, trows[i].Seq, date, trows[i].At, 1, 100, wire.MethodCard)
					}
					rows = append(rows, trows...)
					closes = append(closes, storetest.DayClose(store, term, benchPerTerm+1, date, t0.Add(12*time.Hour), trows))
				}
				b, hash := storetest.NewBatch(store, "day", append(rows, closes...), storetest.Day(date, 1, t0.Add(14*time.Hour), rows))
				batches[s] = batch{b, hash}
			}
		}()
	}
	for s := range benchStores {
		next <- s
	}
	close(next)
	wg.Wait()
	built := time.Since(start)
	n := 0
	for _, b := range batches {
		storetest.MustPut(tb, st, b.b, b.hash, received)
		n += len(b.b.Days[0].Txns)
	}
	tb.Logf("fixture: %d transactions of %d stores built in %v, stored in %v", n, benchStores,
		built.Round(time.Millisecond), (time.Since(start) - built).Round(time.Millisecond))
	return n
}

// BenchmarkReconcile1M reconciles one business date of 1,000,000 transactions across 500
// stores held by the SQLite engine, Storage.Rows and Storage.Days included:
//
//	go test -run '^$' -bench Reconcile1M -benchtime 3x ./hq-sync/reconcile/
//
// It reports seconds per reconciliation (Run: Storage.Rows and Storage.Days side by side,
// then the comparison) and, from one more pass done step by step, the seconds of each.
func BenchmarkReconcile1M(b *testing.B) {
	st, n := openBenchHQ(b)
	ctx := context.Background()
	var total time.Duration
	runs := 0
	for b.Loop() {
		start := time.Now()
		r, err := Run(ctx, st, date, "")
		if err != nil {
			b.Fatal(err)
		}
		total += time.Since(start)
		runs++
		if !r.OK() || r.HQTxns != n || r.LedgerTxns != n {
			b.Fatalf("fixture does not reconcile: %s", r.Summary())
		}
	}
	// The parts, once, for the record.
	start := time.Now()
	rows, err := st.Rows(ctx, date, "")
	if err != nil {
		b.Fatal(err)
	}
	t1 := time.Now()
	days, err := st.Days(ctx, date, "")
	if err != nil {
		b.Fatal(err)
	}
	t2 := time.Now()
	reconcile(date, "", rows, days)
	t3 := time.Now()
	sec := total.Seconds() / float64(runs)
	b.ReportMetric(sec, "s/reconcile")
	b.ReportMetric(t1.Sub(start).Seconds(), "s/rows")
	b.ReportMetric(t2.Sub(t1).Seconds(), "s/days")
	b.ReportMetric(t3.Sub(t2).Seconds(), "s/compare")
	if sec > 10 {
		b.Errorf("one reconciliation of %d transactions took %.1f s, over 10 s", n, sec)
	}
}

// openBenchHQ opens an HQ database holding the fixture. Loading it takes about a minute; set
// RECONCILE_BENCH_DB to a file path to keep the loaded database there and reuse it.
func openBenchHQ(b *testing.B) (hqstore.Storage, int) {
	path := os.Getenv("RECONCILE_BENCH_DB")
	if path == "" {
		st, _ := MustOpenHQ(b)
		return st, loadBenchDay(b, st)
	}
	_, statErr := os.Stat(path)
	st, err := sqlite.Open(context.Background(), path)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	if statErr != nil {
		return st, loadBenchDay(b, st)
	}
	days, err := st.Days(context.Background(), date, "")
	if err != nil {
		b.Fatal(err)
	}
	n := 0
	for _, d := range days {
		n += len(d.Day.Txns)
	}
	if len(days) != benchStores || n != benchStores*benchTerminals*benchPerTerm {
		b.Fatalf("%s holds %d days of %d transactions: not the fixture", path, len(days), n)
	}
	return st, n
}

// memDay returns the fixture as Storage.Rows and Storage.Days would return it, built in
// memory (no payloads, no database): for timing the comparison alone.
func memDay() ([]hqstore.StoredRow, []hqstore.StoredDay) {
	rows := make([]hqstore.StoredRow, 0, benchStores*benchTerminals*(benchPerTerm+1))
	days := make([]hqstore.StoredDay, 0, benchStores)
	methods := []string{wire.MethodCash, wire.MethodCard, wire.MethodQR}
	for s := range benchStores {
		store := fmt.Sprintf("S%04d", s)
		day := hqstore.StoredDay{Store: store, Day: hqwire.StoreDay{BusinessDate: date, Revision: 1}, ReceivedAt: received,
			FirstAt: received}
		for t := range benchTerminals {
			term := fmt.Sprintf("T%d", t)
			var p wire.DayClosePayload
			p.BusinessDate = date
			per := map[string]*wire.MethodTotal{}
			for i := range benchPerTerm {
				seq := int64(i + 1)
				m := methods[seq%3]
				amt := money.Fen(100 + seq*37%9900)
				kind := hqwire.KindSale
				if i%25 == 24 {
					kind, m, amt = hqwire.KindRefund, wire.MethodCard, 100
				}
				by := map[string]money.Fen{m: amt}
				rows = append(rows, hqstore.StoredRow{Store: store, Terminal: term, Seq: seq, Kind: kind, BusinessDate: date,
					FlowNo: seq, Amount: amt, ByMethod: by, ReceivedAt: received})
				day.Day.Txns = append(day.Day.Txns, hqwire.Txn{Terminal: term, Seq: seq, Kind: kind, FlowNo: seq,
					Amount: amt, ByMethod: map[string]money.Fen{m: amt}})
				mt := per[m]
				if mt == nil {
					mt = &wire.MethodTotal{Method: m}
					per[m] = mt
				}
				if kind == hqwire.KindSale {
					p.SaleCount++
					p.SaleAmount += amt
					mt.SaleCount++
					mt.SaleAmount += amt
				} else {
					p.RefundCount++
					p.RefundAmount += amt
					mt.RefundCount++
					mt.RefundAmount += amt
				}
			}
			for _, m := range methods {
				if per[m] != nil {
					p.Methods = append(p.Methods, *per[m])
				}
			}
			js, _ := json.Marshal(&p)
			rows = append(rows, hqstore.StoredRow{Store: store, Terminal: term, Seq: benchPerTerm + 1, Kind: hqwire.KindDayClose,
				BusinessDate: date, ReceivedAt: received, Payload: js})
		}
		days = append(days, day)
	}
	return rows, days
}

// BenchmarkCompare1M times the comparison alone on the fixture built in memory:
//
//	go test -run '^$' -bench Compare1M ./hq-sync/reconcile/
func BenchmarkCompare1M(b *testing.B) {
	rows, days := memDay()
	b.ReportAllocs()
	for b.Loop() {
		if r := reconcile(date, "", rows, days); !r.OK() || r.HQTxns != 1_000_000 {
			b.Fatal(r.Summary())
		}
	}
}
