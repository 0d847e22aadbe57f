package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/posgate/posgate/hq-sync/hqstore/sqlite"
	"github.com/posgate/posgate/hq-sync/serve"
	"github.com/posgate/posgate/hq-sync/upload"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/api"
)

// TestHQUploadView: GET /v1/hq shows how far headquarters has the store's rows, read from
// the state of a real uploader sending the store-server's live ledger to a real hq-sync
// serve (SQLite): nothing before any uploader ran, the backlog and HQ's refusal while HQ is
// down, and nothing owed once it is back.
func TestHQUploadView(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := biRunServer(t)
	srv.openStore(t)
	r := biStartRun(t, srv)
	for seq := int64(1); seq <= 3; seq++ {
		msg, want := r.good(t, "T1", seq)
		r.step(t, "sale", "T1", msg, want)
	}

	hqView := func() api.HQAnswer {
		t.Helper()
		var a api.HQAnswer
		srv.mustJSON(t, "GET", "/v1/hq", nil, &a)
		return a
	}
	state := filepath.Join(srv.Main.DataDir, "upload.db")
	if a := hqView(); a.Found || a.State != state || a.Upload != nil {
		t.Fatalf("before any upload: %+v, want not found at %s", a, state)
	}
	// metric checks that the scrape holds each series with its value (nil: absent).
	metric := func(when string, want map[string]*float64) {
		t.Helper()
		fams := srv.scrape(t)
		for name, w := range want {
			got, ok := fams.value(name)
			if w == nil && ok || w != nil && (!ok || got != *w) {
				t.Errorf("%s: %s = %v (present %v), want %v", when, name, got, ok, biDeref(w))
			}
		}
	}
	num := func(v float64) *float64 { return &v }
	metric("before any upload", map[string]*float64{"posgate_store_hq_uploader_found": num(0),
		"posgate_store_hq_backlog_rows": nil})

	// HQ is down: the uploader keeps the rows and says why.
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "maintenance", http.StatusServiceUnavailable)
	}))
	defer down.Close()
	loc, err := wire.LoadLocation(biTZ)
	if err != nil {
		t.Fatal(err)
	}
	secret := []byte("s1-secret")
	cfg := upload.Config{LedgerPath: filepath.Join(srv.Main.DataDir, "ledger.db"), StatePath: state, Store: biStoreID,
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
	if dom := browse(t, srv.Base+"/#token="+biToken); !strings.Contains(dom, "<li>Upload to headquarters failing: ") ||
		!strings.Contains(dom, `rows waiting for HQ`) {
		t.Errorf("the dashboard does not raise the failing upload:\n%s", dom)
	}

	// HQ is back.
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "hq.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	up := httptest.NewServer(serve.New(st, map[string][]byte{biStoreID: secret}, serve.Options{}))
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
	if dom := browse(t, srv.Base+"/#token="+biToken); !strings.Contains(dom, `<b class="good">0</b>rows waiting for HQ`) ||
		strings.Contains(dom, "Upload to headquarters failing") {
		t.Errorf("the dashboard does not show the upload done:\n%s", dom)
	}
	rows, err := st.Rows(ctx, r.date, biStoreID)
	if err != nil || len(rows) < 3 {
		t.Fatalf("HQ holds %d rows of %s (%v), want the 3 sales", len(rows), r.date, err)
	}
}
