package metrics_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/ingest"
	"github.com/posgate/posgate/store-server/ledger"
	"github.com/posgate/posgate/store-server/metrics"
	"github.com/posgate/posgate/store-server/presence"
)

// TestScrapeOutlivesTheLedger: when the ledger cannot be read, a scrape still answers 200
// with ingest's counters and the gate mode (what an alert needs then), without the
// per-terminal series.
func TestScrapeOutlivesTheLedger(t *testing.T) {
	led := openLedger(t)
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

// TestBacklogAges: a terminal's oldest unsent event keeps aging after the heartbeat that
// told its age (a till gone offline with a backlog sends no more): an hour later the gauge
// reads an hour more, so the alert on it fires.
func TestBacklogAges(t *testing.T) {
	led := openLedger(t)
	hourAgo := time.Now().Add(-time.Hour)
	led.Now = func() time.Time { return hourAgo }
	payload, _ := json.Marshal(wire.HeartbeatPayload{Backlog: 3, OldestAgeMs: 30_000, CatalogVersion: 1})
	outs, err := led.Commit(context.Background(), []ledger.Record{{Terminal: "T1", Seq: 1, Kind: wire.KindHeartbeat,
		Hash: "h1", At: hourAgo, Payload: payload, Status: wire.AckAccepted, Final: true}})
	if err != nil || outs[0].Err != nil || outs[0].Status != wire.AckAccepted {
		t.Fatalf("commit a heartbeat: %+v %v", outs, err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	m := metrics.New()
	m.Follow(ingest.New(ingest.Config{Store: "S1", Ledger: led, Logger: log, Observer: m}), led, nil, log)
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	for line := range strings.Lines(rec.Body.String()) {
		if v, ok := strings.CutPrefix(line, `posgate_store_terminal_backlog_oldest_seconds{terminal="T1"} `); ok {
			if age, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err != nil || age < 3630 || age > 3700 {
				t.Fatalf("oldest unsent event %s s old, want about 3630 (30 s at the heartbeat, an hour since)", strings.TrimSpace(v))
			}
			return
		}
	}
	t.Fatalf("no backlog age in\n%s", rec.Body.String())
}

// TestBacklogReportOverHeartbeat: a terminal's backlog report, which goes beside its events,
// stands over an older heartbeat, which went behind those it counted: a till whose
// heartbeat counted 3 unsent events and whose report since says 0 reads 0. A heartbeat
// newer than the last report (a till that stopped reporting) stands over it. A report of a
// terminal the ledger has nothing of yet has its series too.
func TestBacklogReportOverHeartbeat(t *testing.T) {
	led := openLedger(t)
	payload, _ := json.Marshal(wire.HeartbeatPayload{Backlog: 3, OldestAgeMs: 30_000, CatalogVersion: 1})
	empty, _ := json.Marshal(wire.HeartbeatPayload{CatalogVersion: 1})
	outs, err := led.Commit(context.Background(), []ledger.Record{
		{Terminal: "T1", Seq: 1, Kind: wire.KindHeartbeat, Hash: "h1", At: time.Now(), Payload: payload,
			Status: wire.AckAccepted, Final: true},
		{Terminal: "T3", Seq: 1, Kind: wire.KindHeartbeat, Hash: "h3", At: time.Now(), Payload: empty,
			Status: wire.AckAccepted, Final: true},
	})
	if err != nil || outs[0].Err != nil || outs[0].Status != wire.AckAccepted || outs[1].Status != wire.AckAccepted {
		t.Fatalf("commit heartbeats: %+v %v", outs, err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	board := presence.New("S1", nil, log)
	for _, r := range []wire.Backlog{
		{V: wire.Version, Terminal: "T1", Events: 0, At: time.Now()},
		{V: wire.Version, Terminal: "T2", Events: 5, OldestMs: 120_000, At: time.Now()},
		{V: wire.Version, Terminal: "T3", Events: 9, OldestMs: 1_000, At: time.Now().Add(-time.Hour)},
	} {
		raw, _ := json.Marshal(r)
		board.Handle(wire.BacklogTopic("S1", r.Terminal), raw, false)
	}
	m := metrics.New()
	m.Follow(ingest.New(ingest.Config{Store: "S1", Ledger: led, Logger: log, Observer: m}), led, board, log)
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	got := map[string]float64{}
	for line := range strings.Lines(rec.Body.String()) {
		name, v, ok := strings.Cut(strings.TrimSpace(line), " ")
		if ok && strings.HasPrefix(name, "posgate_store_terminal_backlog_") {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			got[name] = f
		}
	}
	if got[`posgate_store_terminal_backlog_events{terminal="T1"}`] != 0 ||
		got[`posgate_store_terminal_backlog_oldest_seconds{terminal="T1"}`] != 0 ||
		got[`posgate_store_terminal_backlog_events{terminal="T2"}`] != 5 ||
		got[`posgate_store_terminal_backlog_oldest_seconds{terminal="T2"}`] < 120 ||
		got[`posgate_store_terminal_backlog_events{terminal="T3"}`] != 0 || len(got) != 6 {
		t.Fatalf("backlog series %v, want T1 0 events (its report, not its heartbeat's 3), T2 5, 120 s old, "+
			"and T3 0 (its heartbeat, newer than its report of 9)", got)
	}
}

// TestOpenExceptions: a refund the ledger's sales do not cover shows as an open refund
// exception until a manager resolves it.
func TestOpenExceptions(t *testing.T) {
	led := openLedger(t)
	ctx := context.Background()
	at := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	payload, _ := json.Marshal(wire.RefundPayload{RefundID: "R1", SaleID: "nowhere", SaleSeq: 7, Method: wire.MethodCash,
		Amount: 100, Lines: []wire.RefundLine{{Line: 1, SKU: "A", Qty: 1, Amount: 100}}})
	outs, err := led.Commit(ctx, []ledger.Record{{Terminal: "T1", Seq: 8, Kind: wire.KindRefund, Hash: "h8", At: at,
		Payload: payload, Status: wire.AckAccepted, Final: true, FlowNo: 1}})
	if err != nil || outs[0].Err != nil || outs[0].Status != wire.AckAccepted {
		t.Fatalf("commit a refund of no sale: %+v %v", outs, err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	m := metrics.New()
	m.Follow(ingest.New(ingest.Config{Store: "S1", Ledger: led, Logger: log, Observer: m}), led, nil, log)
	want := func(oversell, refund, parked string) {
		t.Helper()
		rec := httptest.NewRecorder()
		m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		body := rec.Body.String()
		for _, w := range []string{`posgate_store_open_exceptions{kind="oversell"} ` + oversell,
			`posgate_store_open_exceptions{kind="refund"} ` + refund, `posgate_store_open_exceptions{kind="parked"} ` + parked} {
			if !strings.Contains(body, w+"\n") {
				t.Fatalf("no %q in\n%s", w, body)
			}
		}
	}
	// A sale refused for good as bad input: parked.
	if outs, err := led.Commit(ctx, []ledger.Record{{Terminal: "T1", Seq: 9, Kind: wire.KindSale, Hash: "h9", At: at,
		Payload: []byte(`{"sale_id": 5}`), Status: wire.AckRejected, Final: true, Code: "payload_invalid"}}); err != nil ||
		outs[0].Err != nil {
		t.Fatalf("commit a bad sale: %+v %v", outs, err)
	}
	want("0", "1", "1")
	if _, _, err := led.ResolveRefundException(ctx, "T1", 8, "a refund at the till of another store's sale"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := led.ResolveParked(ctx, "T1", 9, "", "the sale entered again"); err != nil {
		t.Fatal(err)
	}
	want("0", "0", "0")
}

// openLedger opens a fresh ledger of store S1, closed when the test ends (again, if the test
// closed it).
func openLedger(t *testing.T) *ledger.Ledger {
	t.Helper()
	loc, err := time.LoadLocation("Asia/Shanghai")
	if err != nil {
		t.Fatal(err)
	}
	led, err := ledger.Open(context.Background(), filepath.Join(t.TempDir(), "ledger.db"), "S1", loc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { led.Close() })
	return led
}

// TestCertExpiry: each listener's certificate expiry is a series of its own, read when
// scraped (a renewed certificate shows at the next scrape).
func TestCertExpiry(t *testing.T) {
	m := metrics.New()
	mqtt := time.Unix(1_900_000_000, 0)
	m.FollowCert("mqtt", func() time.Time { return mqtt })
	m.FollowCert("api", func() time.Time { return time.Unix(1_800_000_000, 0) })
	scrape := func() string {
		rec := httptest.NewRecorder()
		m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		return rec.Body.String()
	}
	body := scrape()
	for _, want := range []string{`posgate_store_tls_cert_expiry_timestamp_seconds{listener="mqtt"} 1.9e+09`,
		`posgate_store_tls_cert_expiry_timestamp_seconds{listener="api"} 1.8e+09`} {
		if !strings.Contains(body, want) {
			t.Errorf("no %q in\n%s", want, body)
		}
	}
	mqtt = time.Unix(1_950_000_000, 0)
	if want := `posgate_store_tls_cert_expiry_timestamp_seconds{listener="mqtt"} 1.95e+09`; !strings.Contains(scrape(), want) {
		t.Errorf("after renewal, no %q", want)
	}
}

// TestClockSeriesGoWhenQuiet: a till's clock series are there while the store has a reading
// of its clock from the last 5 minutes, and gone after (Prometheus marks them stale): its
// last figure and its terminal_clock_off = 1 stood for as long as the store-server ran, and
// the alert on it with them.
func TestClockSeriesGoWhenQuiet(t *testing.T) {
	led := openLedger(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	now := time.Now()
	board := presence.New("S1", func() time.Time { return now }, log)
	m := metrics.New()
	m.Follow(ingest.New(ingest.Config{Store: "S1", Ledger: led, Logger: log, Observer: m}), led, board, log)
	clockSeries := func() map[string]string {
		rec := httptest.NewRecorder()
		m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		got := map[string]string{}
		for line := range strings.Lines(rec.Body.String()) {
			if name, v, ok := strings.Cut(strings.TrimSpace(line), " "); ok && strings.HasPrefix(name, "posgate_store_terminal_clock_") {
				got[name] = v
			}
		}
		return got
	}
	for terminal, at := range map[string]time.Time{"T1": now.Add(3 * time.Minute), "T2": now.Add(-time.Hour)} {
		raw, _ := json.Marshal(wire.Backlog{V: wire.Version, Terminal: terminal, At: at})
		board.Handle(wire.BacklogTopic("S1", terminal), raw, false)
	}
	// T1, ahead, is off; T2 reads behind on one message only: not off, no figure yet.
	want := map[string]string{
		`posgate_store_terminal_clock_skew_seconds{terminal="T1"}`: "180",
		`posgate_store_terminal_clock_off{terminal="T1"}`:          "1",
		`posgate_store_terminal_clock_off{terminal="T2"}`:          "0",
	}
	if got := clockSeries(); !maps.Equal(got, want) {
		t.Fatalf("clock series %v, want %v", got, want)
	}
	now = now.Add(presence.SkewWindow + time.Second)
	if got := clockSeries(); len(got) != 0 {
		t.Fatalf("clock series of tills quiet for longer than the window: %v, want none", got)
	}
}
