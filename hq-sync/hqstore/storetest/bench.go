package storetest

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/posgate/posgate/hq-sync/hqstore"
	"github.com/posgate/posgate/internal/hqwire"
)

// BenchPutBatch stores b.N new batches of hqwire.MaxBatchRows sales each (realistic payloads,
// 10 terminals) and reports rows/s. Building the batches is not timed. It also reports
// rows per second of this process's CPU time (cpu-rows/s), which other load on the
// machine does not skew; for an engine in another process (PostgreSQL) it counts only the
// client's share.
func BenchPutBatch(b *testing.B, s hqstore.Storage) {
	ctx := context.Background()
	const terms = 10
	per := hqwire.MaxBatchRows / terms
	var rows int
	var elapsed, cpu time.Duration
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		batch := make([]hqwire.Row, 0, hqwire.MaxBatchRows)
		for t := range terms {
			batch = append(batch, Sales("BENCH", fmt.Sprintf("T%d", t), int64(i*per+1), per, D1, t0)...)
		}
		bt := &hqwire.Batch{V: hqwire.Version, Store: "BENCH", ID: fmt.Sprintf("bench-%d-%d", time.Now().UnixNano(), i), Rows: batch}
		b.StartTimer()
		start, cpu0 := time.Now(), cpuTime()
		rc, err := s.PutBatch(ctx, bt, "hash-"+bt.ID, at1)
		elapsed += time.Since(start)
		cpu += cpuTime() - cpu0
		if err != nil {
			b.Fatal(err)
		}
		if rc.New != len(batch) {
			b.Fatalf("receipt %+v", rc)
		}
		rows += len(batch)
	}
	b.ReportMetric(float64(rows)/elapsed.Seconds(), "rows/s")
	b.ReportMetric(float64(rows)/cpu.Seconds(), "cpu-rows/s")
}

// cpuTime returns the CPU time (user and system) this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Day fixture of BenchRows and BenchDays: one business date, 500 stores, 2,000 sales each
// (4 terminals × 500), 1,000,000 in all, and each store's declaration of the day listing
// its 2,000 sales.
const (
	BenchStores    = 500
	BenchTerminals = 4
	BenchPerTerm   = 500
	BenchDate      = D1
)

// LoadDay fills s with the day fixture, one batch per store (rows and declaration), and
// returns the number of rows.
func LoadDay(tb testing.TB, s hqstore.Storage) int {
	tb.Helper()
	ctx := context.Background()
	total := 0
	start := time.Now()
	for st := range BenchStores {
		store := fmt.Sprintf("S%04d", st)
		rows := make([]hqwire.Row, 0, BenchTerminals*BenchPerTerm)
		for t := range BenchTerminals {
			rows = append(rows, Sales(store, fmt.Sprintf("T%d", t), 1, BenchPerTerm, BenchDate, t0)...)
		}
		bt := &hqwire.Batch{V: hqwire.Version, Store: store, ID: "day", Rows: rows,
			Days: []hqwire.StoreDay{Day(BenchDate, 1, t0, rows)}}
		if _, err := s.PutBatch(ctx, bt, "fixture", at1); err != nil {
			tb.Fatal(err)
		}
		total += len(rows)
	}
	tb.Logf("loaded %d rows and %d declarations in %v", total, BenchStores, time.Since(start).Round(time.Millisecond))
	return total
}

// BenchRows reads the day fixture (loaded by LoadDay) with Rows(date, "") and reports
// the seconds one read takes.
func BenchRows(b *testing.B, s hqstore.Storage, want int) {
	ctx := context.Background()
	var elapsed, cpu time.Duration
	n := 0
	for b.Loop() {
		start, cpu0 := time.Now(), cpuTime()
		rows, err := s.Rows(ctx, BenchDate, "")
		elapsed += time.Since(start)
		cpu += cpuTime() - cpu0
		if err != nil {
			b.Fatal(err)
		}
		if len(rows) != want {
			b.Fatalf("%d rows, want %d", len(rows), want)
		}
		n++
	}
	b.ReportMetric(elapsed.Seconds()/float64(n), "s/scan")
	b.ReportMetric(cpu.Seconds()/float64(n), "cpu-s/scan")
}

// BenchDays reads the day fixture's declarations with Days(date, "") and reports the
// seconds one read takes.
func BenchDays(b *testing.B, s hqstore.Storage, want int) {
	ctx := context.Background()
	var elapsed, cpu time.Duration
	n := 0
	for b.Loop() {
		start, cpu0 := time.Now(), cpuTime()
		days, err := s.Days(ctx, BenchDate, "")
		elapsed += time.Since(start)
		cpu += cpuTime() - cpu0
		if err != nil {
			b.Fatal(err)
		}
		txns := 0
		for _, d := range days {
			txns += len(d.Day.Txns)
		}
		if len(days) != BenchStores || txns != want {
			b.Fatalf("%d days with %d transactions, want %d with %d", len(days), txns, BenchStores, want)
		}
		n++
	}
	b.ReportMetric(elapsed.Seconds()/float64(n), "s/scan")
	b.ReportMetric(cpu.Seconds()/float64(n), "cpu-s/scan")
}
