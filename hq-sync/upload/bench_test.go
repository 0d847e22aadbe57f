package upload

import (
	"context"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/posgate/posgate/hq-sync/hqstore/sqlite"
	"github.com/posgate/posgate/hq-sync/serve"
)

// BenchmarkCatchUp uploads a backlog of 100,000 sales of one business day that is over (a
// store that was cut off from HQ for a few days) to hq-sync serve on the SQLite engine, in
// batches of 1,000, then declares the day (about 11 MB: in parts), and reports rows/s over
// the whole, and the parts and the time the declaration took:
//
//	go test -run '^$' -bench CatchUp -benchtime 1x ./hq-sync/upload/
func BenchmarkCatchUp(b *testing.B) {
	const backlog = 100_000
	ctx := context.Background()
	dir := b.TempDir()
	s := MustOpenStore(b, dir)
	start := time.Now()
	// One second apart: from 10:00 and from midnight, all of it on date0.
	s.Sales(backlog/2, day0)
	s.Sales(backlog/2, day0.Add(-10*time.Hour))
	b.Logf("ledger: %d sales committed in %v", backlog, time.Since(start).Round(time.Millisecond))
	var rows, parts int
	var elapsed, declaring time.Duration
	b.StopTimer()
	for range b.N {
		st, err := sqlite.Open(ctx, filepath.Join(dir, "hq.db"))
		if err != nil {
			b.Fatal(err)
		}
		srv := httptest.NewServer(serve.New(st, map[string][]byte{testStore: testSecret}, serve.Options{}))
		cfg := config(dir, s, srv.URL+serve.BatchesPath, time.Now)
		cfg.BatchRows = 1000
		cfg.Progress = io.Discard // exercised, not shown
		u := MustNew(b, cfg)
		b.StartTimer()
		t0 := time.Now()
		if err := u.Once(ctx); err != nil {
			b.Fatal(err)
		}
		elapsed += time.Since(t0)
		b.StopTimer()
		rows += backlog
		days, err := st.Days(ctx, date0, testStore)
		if err != nil || len(days) != 1 || len(days[0].Day.Txns) != backlog {
			b.Fatalf("HQ holds the day as %d declarations (%v); want one of %d transactions", len(days), err, backlog)
		}
		var created string
		if err := u.state.R.QueryRow(`SELECT min(created) FROM batches WHERE days <> '{}' OR parts <> '{}'`).Scan(&created); err != nil {
			b.Fatal(err)
		}
		first, err := time.Parse(time.RFC3339Nano, created)
		if err != nil {
			b.Fatal(err)
		}
		declaring += days[0].ReceivedAt.Sub(first)
		var n int
		if err := u.state.R.QueryRow(`SELECT count(*) FROM batches WHERE parts <> '{}'`).Scan(&n); err != nil {
			b.Fatal(err)
		}
		parts += n
		u.Close()
		srv.Close()
		st.Close()
		os.Remove(filepath.Join(dir, "hq.db"))
		os.Remove(cfg.StatePath)
	}
	b.ReportMetric(float64(rows)/elapsed.Seconds(), "rows/s")
	b.ReportMetric(float64(parts)/float64(b.N), "day-parts")
	b.ReportMetric(declaring.Seconds()/float64(b.N), "declare-s")
}
