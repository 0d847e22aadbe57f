package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/posgate/posgate/e2e/browser"

	sclient "github.com/posgate/posgate/store-server/client"

	dto "github.com/prometheus/client_model/go"

	"github.com/posgate/posgate/e2e"
	"github.com/posgate/posgate/hq-sync/serve"
	"github.com/posgate/posgate/hq-sync/upload"
	"github.com/posgate/posgate/internal/metricstest"
	"github.com/posgate/posgate/internal/stack"
	"github.com/posgate/posgate/internal/wire"
)

// TestHQUploadView: a running store-server shows its managers how far headquarters has the
// store's rows (GET /v1/hq, the hq_* metrics, the dashboard), read from the state of a real
// uploader sending the store-server's live ledger to a real hq-sync serve (SQLite): nothing
// before any uploader ran, the backlog and HQ's refusal while HQ is down, and nothing owed
// once it is back.
func TestHQUploadView(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	bins, _, srv, sdir := startE2EStore(ctx, t, stack.Options{Redis: true}, dir, "sku,name,price\nMILK,Milk 1L,12.50\n")
	loc, err := wire.LoadLocation(e2eTZ)
	if err != nil {
		t.Fatal(err)
	}
	date := time.Now().In(loc).Format(wire.BusinessDate)
	adir := filepath.Join(dir, "agent-T01")
	if err := os.MkdirAll(adir, 0o700); err != nil {
		t.Fatal(err)
	}
	agent, err := e2e.StartAgent(ctx, bins.TerminalAgent, e2e.AgentOptions{Store: e2eStore, Terminal: "T01",
		Broker: srv.Broker, DataDir: adir, TZ: e2eTZ})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { agent.Kill() })
	c, err := e2e.ReadyCashier(ctx, agent.API, agent.Token, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := c.Sale([]string{"MILK"}, "cash"); err != nil {
			t.Fatal(err)
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	_, err = c.WaitDrained(wctx)
	cancel()
	if err != nil {
		t.Fatal(err)
	}

	hqView := func() sclient.HQAnswer {
		t.Helper()
		a, err := srv.Manager().HQ(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	state := filepath.Join(sdir, "upload.db") // where the store-server looks by default
	if a := hqView(); a.Found || a.State != state || a.Upload != nil {
		t.Fatalf("before any upload: %+v, want not found at %s", a, state)
	}
	// metric checks that the store-server's scrape holds each series with its value (nil:
	// absent).
	metric := func(when string, want map[string]*float64) {
		t.Helper()
		fams := scrapeStore(t, srv)
		for name, w := range want {
			got, ok := metricstest.Value(fams, name, nil)
			if w == nil && ok || w != nil && (!ok || got != *w) {
				t.Errorf("%s: %s = %v (present %v), want %v", when, name, got, ok, deref(w))
			}
		}
	}
	num := func(v float64) *float64 { return &v }
	metric("before any upload", map[string]*float64{"posgate_store_hq_uploader_found": num(0),
		"posgate_store_hq_backlog_rows": nil})
	dashboard := "http://" + srv.API + "/#token=" + srv.Opts.Token

	// HQ is down: the uploader keeps the rows and says why.
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "maintenance", http.StatusServiceUnavailable)
	}))
	defer down.Close()
	secret := []byte(e2eSecret)
	cfg := upload.Config{LedgerPath: filepath.Join(sdir, "ledger.db"), StatePath: state, Store: e2eStore,
		Location: loc, Secret: secret, HQURL: down.URL + serve.BatchesPath, BatchAge: time.Millisecond,
		RetryBase: 50 * time.Millisecond, RetryCap: 200 * time.Millisecond}
	// once sends what the ledger holds, waiting out an unreachable HQ for at most wait.
	once := func(cfg upload.Config, wait time.Duration) error {
		u, err := upload.New(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer u.Close()
		c, cancel := context.WithTimeout(ctx, wait)
		defer cancel()
		return u.Once(c)
	}
	if err := once(cfg, time.Second); err == nil {
		t.Fatal("an upload to a down HQ succeeded")
	}
	a := hqView()
	if !a.Found || a.Upload == nil || a.Upload.Backlog < 3 || a.Upload.Pending == "" ||
		!strings.Contains(a.Upload.LastError, "503") || !a.Upload.LastSentAt.IsZero() {
		t.Fatalf("with HQ down: %+v %+v", a, a.Upload)
	}
	metric("with HQ down", map[string]*float64{"posgate_store_hq_uploader_found": num(1),
		"posgate_store_hq_backlog_rows":               num(float64(a.Upload.Backlog)),
		"posgate_store_hq_pending_batch_failed_sends": num(float64(a.Upload.Attempts)),
		"posgate_store_hq_last_ack_timestamp_seconds": nil, "posgate_store_hq_days_too_large_to_declare": num(0),
		"posgate_store_hq_days_declaring_in_parts": num(0)})
	if a.Upload.Attempts < 1 {
		t.Errorf("with HQ down: %d failed sends recorded", a.Upload.Attempts)
	}
	if dom := browse(t, dashboard); !strings.Contains(dom, "<li>Upload to headquarters failing: ") ||
		!strings.Contains(dom, `rows waiting for HQ`) {
		t.Errorf("the dashboard does not raise the failing upload:\n%s", dom)
	}

	// HQ is back.
	st, err := openStorage(ctx, filepath.Join(dir, "hq.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	up := httptest.NewServer(serve.New(st, map[string][]byte{e2eStore: secret}, serve.Options{}))
	defer up.Close()
	cfg.HQURL = up.URL + serve.BatchesPath
	if err := once(cfg, time.Minute); err != nil {
		t.Fatalf("upload: %v", err)
	}
	a = hqView()
	if !a.Found || a.Upload == nil || a.Upload.Backlog != 0 || a.Upload.Pending != "" || a.Upload.LastError != "" ||
		a.Upload.LastSentAt.IsZero() || a.Upload.Batches < 1 {
		t.Fatalf("after the upload: %+v %+v", a, a.Upload)
	}
	metric("after the upload", map[string]*float64{"posgate_store_hq_backlog_rows": num(0),
		"posgate_store_hq_pending_batch_failed_sends": num(0),
		"posgate_store_hq_last_ack_timestamp_seconds": num(float64(a.Upload.LastSentAt.UnixMilli()) / 1000)})
	if dom := browse(t, dashboard); !strings.Contains(dom, `<b class="good">0</b>rows waiting for HQ`) ||
		strings.Contains(dom, "Upload to headquarters failing") {
		t.Errorf("the dashboard does not show the upload done:\n%s", dom)
	}
	if now := time.Now().In(loc).Format(wire.BusinessDate); now != date {
		t.Skipf("the business day changed during the test (%s → %s); run it again", date, now)
	}
	rows, err := st.Rows(ctx, date, e2eStore)
	if err != nil || len(rows) < 3 {
		t.Fatalf("HQ holds %d rows of %s (%v), want the 3 sales", len(rows), date, err)
	}
}

// scrapeStore reads the store-server's GET /metrics with the manager token.
func scrapeStore(t *testing.T, srv *e2e.StoreServer) []*dto.MetricFamily {
	t.Helper()
	req, err := http.NewRequest("GET", "http://"+srv.API+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+srv.Opts.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("GET /metrics: %d %s %v", resp.StatusCode, resp.Header.Get("Content-Type"), err)
	}
	fams, err := metricstest.Parse(body)
	if err != nil {
		t.Fatalf("parse metrics: %v\n%s", err, body)
	}
	return fams
}

func deref(v *float64) any {
	if v == nil {
		return "absent"
	}
	return *v
}

// browse loads url in headless Chromium, waits until the page has drawn its data once and
// returns its HTML.
func browse(t *testing.T, url string) string { t.Helper(); return browser.Browse(t, url) }
