package main

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/posgate/posgate/hq-sync/reconcile"
	"github.com/posgate/posgate/internal/stack"
)

// TestReconcileMemoryFlat: hq-sync reconcile on PostgreSQL reads a day store by store, so
// its memory does not grow with the chain. A day of 160 stores is reconciled in about the
// peak memory of a day of 40 stores of the same size each (the process's own peak RSS,
// measured by the kernel), where holding the day whole would take four times the day's
// share. Both days reconcile, and each run is recorded (reconcile_runs). The benchmark
// BenchmarkReconcile10M runs the same on a chain's day of ten million transactions.
func TestReconcileMemoryFlat(t *testing.T) {
	bins := binaries(t)
	st := stack.Run(t, stack.Options{Postgres: true})
	url := st.PostgresURL()
	small := chainDay{Date: "2025-03-01", Stores: 40, Terminals: 2, PerTerminal: 1000}
	big := chainDay{Date: "2025-03-02", Stores: 160, Terminals: 2, PerTerminal: 1000}
	small.load(t, url, 2)
	big.load(t, url, 2)
	var runs [2]reconciled
	for i, d := range []chainDay{small, big} {
		r := runReconcile(t, bins.HQSync, url, d.Date, "--progress", "--workers", "2")
		var rep reconcile.Report
		if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
			t.Fatalf("reconcile %s: exit %d, %v\n%s", d.Date, r.exit, err, r.stderr)
		}
		if r.exit != 0 || !rep.OK() || rep.HQTxns != d.txns() || rep.Stores != d.Stores {
			t.Fatalf("reconcile %s: exit %d, %d stores, %d transactions, counts %v\n%s", d.Date, r.exit, rep.Stores,
				rep.HQTxns, rep.Counts, r.stderr)
		}
		if !strings.Contains(r.summary, "transactions compared in") {
			t.Fatalf("reconcile %s: no progress summary on stderr:\n%s", d.Date, r.stderr)
		}
		runs[i] = r
		t.Logf("reconcile %s: %d transactions of %d stores in %v, peak RSS %.1f MiB", d.Date, d.txns(), d.Stores,
			r.took.Round(time.Millisecond), float64(r.maxRSS)/(1<<20))
	}
	if ratio := float64(runs[1].maxRSS) / float64(runs[0].maxRSS); ratio > 1.25 {
		t.Errorf("peak RSS %.1f MiB for 4× the stores against %.1f MiB (×%.2f): memory grows with the day",
			float64(runs[1].maxRSS)/(1<<20), float64(runs[0].maxRSS)/(1<<20), ratio)
	}
	ctx := context.Background()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var n int
	if err := c.QueryRow(ctx, `SELECT count(*) FROM reconcile_runs WHERE store = '' AND ok`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("%d runs recorded (%v), want 2", n, err)
	}
}

// BenchmarkReconcile10M reconciles a chain's day on PostgreSQL: 2,000 stores × 5 terminals
// × 1,000 sales, ten million transactions, with hq-sync reconcile as a process of its own,
// beside the reference of the same run: PostgreSQL's own COPY (SELECT …) TO of the same
// rows and declared transactions, in the order reconcile reads them, into a client that
// throws them away. It reports the reconciliation's seconds (s/reconcile), the
// reference's (s/copy), their ratio (x-copy) and reconcile's peak RSS (rss-MiB, goal
// ≤ 1024). POSGATE_BENCH_PG=url reuses a database that holds the day already (loading
// it takes minutes); POSGATE_BENCH_STORES=n runs a day of n stores instead of 2,000:
// go test -run '^$' -bench Reconcile10M -benchtime 1x -timeout 60m ./hq-sync/
func BenchmarkReconcile10M(b *testing.B) {
	bins := binaries(b)
	day := chainDay{Date: "2025-06-01", Stores: 2000, Terminals: 5, PerTerminal: 1000}
	if n, err := strconv.Atoi(os.Getenv("POSGATE_BENCH_STORES")); err == nil && n > 0 {
		day.Stores = n
	}
	url := os.Getenv("POSGATE_BENCH_PG")
	if url == "" {
		st := stack.Run(b, stack.Options{Postgres: true})
		url = st.PostgresURL()
		day.load(b, url, 2)
	}
	workers := os.Getenv("POSGATE_BENCH_WORKERS")
	if workers == "" {
		workers = "2"
	}
	var copyS, recS float64
	var rss int64
	n := 0
	for b.Loop() {
		start := time.Now()
		copied := copyDay(b, url, day.Date)
		copyS += time.Since(start).Seconds()
		r := runReconcile(b, bins.HQSync, url, day.Date, "--progress", "--workers", workers)
		var rep reconcile.Report
		if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || r.exit != 0 || rep.HQTxns != day.txns() {
			b.Fatalf("reconcile: exit %d, %d transactions (%v)\n%s", r.exit, rep.HQTxns, err, r.stderr)
		}
		if copied != int64(2*day.txns()+day.Stores*day.Terminals) {
			b.Fatalf("the reference copied %d rows", copied)
		}
		recS += r.took.Seconds()
		rss = max(rss, r.maxRSS)
		n++
		b.Logf("reconcile: %v, peak RSS %.0f MiB; %s", r.took.Round(time.Millisecond), float64(r.maxRSS)/(1<<20), r.summary)
	}
	b.ReportMetric(recS/float64(n), "s/reconcile")
	b.ReportMetric(copyS/float64(n), "s/copy")
	b.ReportMetric(recS/copyS, "x-copy")
	b.ReportMetric(float64(rss)/(1<<20), "rss-MiB")
	if rss > 1<<30 {
		b.Errorf("peak RSS %.0f MiB is over 1 GiB", float64(rss)/(1<<20))
	}
}

// copyDay copies the date's rows and declared transactions out of the database as
// reconcile reads them (by store, in key order), and returns how many rows it copied.
func copyDay(tb testing.TB, url, date string) int64 {
	tb.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		tb.Fatal(err)
	}
	defer c.Close(ctx)
	var n int64
	for _, q := range []string{
		`COPY (SELECT store, terminal, seq, kind, flow_no, amount, cash, card, qr, methods, received_ms,
			CASE WHEN kind = 'day_close' THEN payload END FROM rows WHERE business_date = '` + date + `'
			ORDER BY store, terminal, seq) TO STDOUT`,
		`COPY (SELECT store, terminal, seq, kind, flow_no, amount, cash, card, qr, methods FROM day_txns
			WHERE business_date = '` + date + `' ORDER BY store, i) TO STDOUT`,
	} {
		tag, err := c.PgConn().CopyTo(ctx, io.Discard, q)
		if err != nil {
			tb.Fatal(err)
		}
		n += tag.RowsAffected()
	}
	return n
}
