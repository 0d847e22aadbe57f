package upload

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/posgate/posgate/hq-sync/serve"
	"github.com/posgate/posgate/internal/metricstest"
	"github.com/posgate/posgate/internal/perr"
)

// hqModes is hq-sync serve on a real SQLite file that can be made to fail: down answers
// 503, drop closes the connection unanswered, refuse is serve with another secret for the
// store (401 unauthorized), empty answers 200 without a receipt, unsigned answers serve's
// receipt with its signature taken off (an answer in HQ's name from anything between).
type hqModes struct {
	ok, refuse http.Handler
	mode       atomic.Value // string
}

func (h *hqModes) set(mode string) { h.mode.Store(mode) }

func (h *hqModes) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch h.mode.Load() {
	case "down":
		http.Error(w, "down", http.StatusServiceUnavailable)
	case "drop":
		drop(w)
	case "refuse":
		h.refuse.ServeHTTP(w, r)
	case "empty":
		w.Write([]byte("{}"))
	case "unsigned":
		rec := httptest.NewRecorder()
		h.ok.ServeHTTP(rec, r)
		w.WriteHeader(rec.Code)
		w.Write(rec.Body.Bytes())
	default:
		h.ok.ServeHTTP(w, r)
	}
}

// scrape serves reg's /metrics once and parses it.
func scrape(t *testing.T, reg *prometheus.Registry) []*dto.MetricFamily {
	t.Helper()
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", rec.Code, rec.Body)
	}
	fams, err := metricstest.Parse(rec.Body.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

// onceFor runs u.Once for d (HQ failing all the while) and returns its error.
func onceFor(u *Uploader, d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return u.Once(ctx)
}

// TestMetrics runs the uploader against hq-sync serve through HQ down (503, then no answer),
// refusing, and answering without a receipt, then up, then declaring the day, and reads its
// /metrics at each step: the backlog and its oldest row's age are the ledger's, failures are
// counted by reason and nothing is counted sent until HQ acknowledges it.
func TestMetrics(t *testing.T) {
	dir := t.TempDir()
	s, st := MustOpenStore(t, dir), mustOpenHQ(t, dir)
	clk := newClock(day0.Add(time.Hour))
	h := &hqModes{ok: serve.New(st, map[string][]byte{testStore: testSecret}, serve.Options{Now: clk.Now}),
		refuse: serve.New(st, map[string][]byte{testStore: []byte("another-secret")}, serve.Options{Now: clk.Now})}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	cfg := config(dir, s, srv.URL+serve.BatchesPath, clk.Now)
	reg := prometheus.NewRegistry()
	cfg.Metrics = reg
	s.Sales(4, day0, "T1") // at day0, day0+1s, …
	u := MustNew(t, cfg)

	type want map[string]float64 // series (name, or name/reason) → value; -1: absent
	check := func(step string, w want) {
		t.Helper()
		fams := scrape(t, reg)
		for series, v := range w {
			name, labels := series, map[string]string(nil)
			for i := range series {
				if series[i] == '/' {
					name, labels = series[:i], map[string]string{"reason": series[i+1:]}
				}
			}
			got, ok := metricstest.Value(fams, name, labels)
			switch {
			case v < 0 && ok:
				t.Errorf("%s: %s = %v, want none", step, series, got)
			case v >= 0 && (!ok || got != v):
				t.Errorf("%s: %s = %v (present %v), want %v", step, series, got, ok, v)
			}
		}
	}
	const (
		rows     = "posgate_upload_rows_sent_total"
		batches  = "posgate_upload_batches_sent_total"
		down     = "posgate_upload_batch_failures_total/hq_down"
		refused  = "posgate_upload_batch_failures_total/hq_refused"
		other    = "posgate_upload_batch_failures_total/other"
		backlog  = "posgate_upload_backlog_rows"
		oldest   = "posgate_upload_oldest_unsent_age_seconds"
		lastOK   = "posgate_upload_last_success_timestamp_seconds"
		pending  = "posgate_upload_pending_batch_failed_sends"
		declared = "posgate_upload_last_declared_day_timestamp_seconds"
		behind   = "posgate_upload_ledger_behind_hq"
	)
	check("before any send", want{rows: 0, batches: 0, down: 0, refused: 0, other: 0, backlog: 4, oldest: 3600,
		lastOK: -1, pending: 0, declared: -1, behind: 0})

	h.set("down")
	if err := onceFor(u, 150*time.Millisecond); err == nil {
		t.Fatal("Once returned nil while HQ answered 503")
	}
	h.set("drop")
	onceFor(u, 150*time.Millisecond)
	s.Sales(3, day0.Add(10*time.Minute), "T2") // the store sells on while HQ is away
	clk.Set(day0.Add(90 * time.Minute))
	fams := scrape(t, reg)
	nDown, _ := metricstest.Value(fams, "posgate_upload_batch_failures_total", map[string]string{"reason": FailHQDown})
	attempts, _ := metricstest.Value(fams, pending, nil)
	if nDown < 2 || attempts < 2 || nDown < attempts {
		t.Errorf("HQ down: %v failures counted hq_down, %v failed sends of the pending batch; want both ≥ 2 and "+
			"every failed send counted", nDown, attempts)
	}
	check("HQ down", want{rows: 0, batches: 0, refused: 0, other: 0, backlog: 7, oldest: 5400, lastOK: -1, behind: 0})

	h.set("refuse")
	if err := onceFor(u, 5*time.Second); perr.KindOf(err) != perr.Refused {
		t.Fatalf("Once while HQ refuses: %v", err)
	}
	h.set("empty")
	onceFor(u, 100*time.Millisecond)
	fams = scrape(t, reg)
	if n, _ := metricstest.Value(fams, "posgate_upload_batch_failures_total", map[string]string{"reason": FailOther}); n < 1 {
		t.Errorf("HQ answering 200 without a receipt: %v failures counted other", n)
	}
	// A receipt without HQ's signature is not taken: the batch stays pending (HQ stored it,
	// and the signed receipt of its replay will be taken later).
	h.set("unsigned")
	if err := onceFor(u, 100*time.Millisecond); err == nil {
		t.Fatal("Once returned nil on a receipt not signed by HQ")
	}
	fams = scrape(t, reg)
	if n, _ := metricstest.Value(fams, "posgate_upload_batch_failures_total", map[string]string{"reason": FailOther}); n < 2 {
		t.Errorf("a receipt not signed by HQ: %v failures counted other, want it among them", n)
	}
	check("HQ refusing", want{refused: 1, down: nDown, rows: 0, batches: 0, backlog: 7, lastOK: -1})

	h.set("")
	clk.Set(day0.Add(2 * time.Hour))
	MustOnce(t, u) // the pending batch (4 rows), then the 3 sold since
	check("HQ back", want{rows: 7, batches: 2, refused: 1, down: nDown, backlog: 0, oldest: 0,
		lastOK: float64(clk.Now().Unix()), pending: 0, declared: -1, behind: 0})

	s.DayClose(date0, day0.Add(10*time.Hour), "T1", "T2")
	clk.Set(day1.Add(time.Hour)) // the day is over: the store declares it
	MustOnce(t, u)
	check("day declared", want{rows: 9, backlog: 0, lastOK: float64(clk.Now().Unix()),
		declared: float64(time.Date(2025, 3, 1, 0, 0, 0, 0, shanghai).Unix())})

	s.Sales(2, day1, "T1")
	s.DayClose(date1, day1.Add(10*time.Hour), "T1", "T2")
	clk.Set(day1.AddDate(0, 0, 1).Add(time.Hour))
	MustOnce(t, u)
	check("next day declared", want{rows: 13, backlog: 0, behind: 0,
		declared: float64(time.Date(2025, 3, 2, 0, 0, 0, 0, shanghai).Unix())})
}
