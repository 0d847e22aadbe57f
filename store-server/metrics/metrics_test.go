package metrics_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/posgate/posgate/store-server/ingest"
	"github.com/posgate/posgate/store-server/ledger"
	"github.com/posgate/posgate/store-server/metrics"
)

// TestScrapeOutlivesTheLedger: when the ledger cannot be read, a scrape still answers 200
// with ingest's counters and the gate mode (what an alert needs then), without the
// per-terminal series.
func TestScrapeOutlivesTheLedger(t *testing.T) {
	loc, err := time.LoadLocation("Asia/Shanghai")
	if err != nil {
		t.Fatal(err)
	}
	led, err := ledger.Open(context.Background(), filepath.Join(t.TempDir(), "ledger.db"), "S1", loc)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	m := metrics.New()
	in := ingest.New(ingest.Config{Store: "S1", Ledger: led, Logger: log, Observer: m})
	m.Follow(in, led, nil, log)
	m.Commit(3*time.Millisecond, 12)

	scrape := func() (int, string) {
		rec := httptest.NewRecorder()
		m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		return rec.Code, rec.Body.String()
	}
	if code, body := scrape(); code != http.StatusOK || !strings.Contains(body, `posgate_store_gate_mode{mode="starting"} 1`) {
		t.Fatalf("scrape: %d\n%s", code, body)
	}
	led.Close()
	code, body := scrape()
	for _, want := range []string{`posgate_store_gate_mode{mode="starting"} 1`, "posgate_store_commit_errors_total 0",
		"posgate_store_ledger_commit_records_count 1"} {
		if code != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("scrape with the ledger closed: %d, no %q", code, want)
		}
	}
}
