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

// BenchmarkCatchUp uploads a backlog of 100,000 sales (a store that was cut off from HQ
// for a few days) to hq-sync serve on the SQLite engine, in batches of 1,000, and reports
// rows/s:
//
//	go test -run '^$' -bench CatchUp -benchtime 1x ./hq-sync/upload/
func BenchmarkCatchUp(b *testing.B) {
	const backlog = 100_000
	ctx := context.Background()
	dir := b.TempDir()
	s := MustOpenStore(b, dir)
	start := time.Now()
	s.Sales(backlog, day0)
	b.Logf("ledger: %d sales committed in %v", backlog, time.Since(start).Round(time.Millisecond))
	var rows int
	var elapsed time.Duration
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
		u.Close()
		srv.Close()
		st.Close()
		os.Remove(filepath.Join(dir, "hq.db"))
		os.Remove(cfg.StatePath)
	}
	b.ReportMetric(float64(rows)/elapsed.Seconds(), "rows/s")
}
