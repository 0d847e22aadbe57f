package serve_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/posgate/posgate/hq-sync/hqstore/postgres"
	"github.com/posgate/posgate/hq-sync/hqstore/storetest"
	"github.com/posgate/posgate/hq-sync/serve"
	"github.com/posgate/posgate/internal/guard"
	"github.com/posgate/posgate/internal/hqwire"
	"github.com/posgate/posgate/internal/stack"
)

// BenchmarkHandlerPostgres is serve's handler in this process (so that -cpuprofile sees
// its work: decoding, the checks of every row, the COPY's encoding) storing into
// PostgreSQL: 8 stores at once, each posting signed batches of 5,000 sales of 10
// terminals (POSGATE_BENCH_BATCH=n: of n), bodies encoded and signed before the clock starts. It reports rows/s and
// this process's CPU per row (cpu-µs/row: the handler's and the HTTP client's).
// go test -run '^$' -bench HandlerPostgres -benchtime 3x -cpuprofile cpu.out ./hq-sync/serve/
func BenchmarkHandlerPostgres(b *testing.B) {
	st := stack.Run(b, stack.Options{Postgres: true})
	ctx := context.Background()
	db, err := postgres.OpenWith(ctx, st.PostgresURL(), postgres.Options{MaxConns: 8})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	const stores, perStore = 8, 50_000
	size := 5000
	if n, err := strconv.Atoi(os.Getenv("POSGATE_BENCH_BATCH")); err == nil && n > 0 {
		size = n
	}
	secrets := map[string][]byte{}
	for i := range stores {
		secrets[fmt.Sprintf("S%02d", i)] = []byte(fmt.Sprintf("S%02d-bench-secret-key", i))
	}
	now := time.Now()
	srv := httptest.NewServer(serve.New(db, secrets, serve.Options{Guard: guard.New(guard.Config{Free: 1 << 20})}))
	defer srv.Close()
	type req struct {
		store, id string
		body      []byte
	}
	rows := 0
	var cpu float64
	var wall time.Duration
	for run := 0; b.Loop(); run++ {
		b.StopTimer()
		reqs := make([][]req, stores)
		for i := range stores {
			store := fmt.Sprintf("S%02d", i)
			var all []hqwire.Row
			for t := range 10 {
				all = append(all, storetest.Sales(store, fmt.Sprintf("T%d", t), int64(1+run*perStore/10), perStore/10,
					storetest.D1, storetest.T0)...)
			}
			for k := 0; k < len(all); k += size {
				bt := &hqwire.Batch{V: hqwire.Version, Store: store, ID: fmt.Sprintf("%s-r%d-%d", store, run, k),
					Rows: all[k:min(k+size, len(all))], SentAt: storetest.T0}
				body, _ := json.Marshal(bt)
				reqs[i] = append(reqs[i], req{store, bt.ID, body})
			}
		}
		b.StartTimer()
		c0 := processCPU()
		start := time.Now()
		var wg sync.WaitGroup
		for i := range reqs {
			wg.Go(func() {
				for _, r := range reqs[i] {
					ts := strconv.FormatInt(now.Unix(), 10)
					hreq, _ := http.NewRequest(http.MethodPost, srv.URL+serve.BatchesPath, bytes.NewReader(r.body))
					hreq.Header.Set(hqwire.HeaderStore, r.store)
					hreq.Header.Set(hqwire.HeaderTimestamp, ts)
					hreq.Header.Set(hqwire.HeaderIdemKey, r.id)
					hreq.Header.Set(hqwire.HeaderContentHash, hqwire.ContentHash(r.body))
					hreq.Header.Set(hqwire.HeaderSignature, hqwire.Sign(secrets[r.store], http.MethodPost, serve.BatchesPath,
						r.store, ts, r.id, r.body))
					resp, err := http.DefaultClient.Do(hreq)
					if err != nil {
						b.Error(err)
						return
					}
					var rc hqwire.Receipt
					err = json.NewDecoder(resp.Body).Decode(&rc)
					resp.Body.Close()
					if err != nil || resp.StatusCode != http.StatusOK || rc.New != size {
						b.Errorf("%s: %d %+v %v", r.id, resp.StatusCode, rc, err)
						return
					}
				}
			})
		}
		wg.Wait()
		wall += time.Since(start)
		cpu += processCPU() - c0
		rows += stores * perStore
	}
	b.ReportMetric(float64(rows)/wall.Seconds(), "rows/s")
	b.ReportMetric(cpu/float64(rows)*1e6, "cpu-µs/row")
}

// processCPU returns the CPU seconds (user and system) this process has used.
func processCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}
