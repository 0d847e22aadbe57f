package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/posgate/posgate/e2e"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/ledger"
)

// TestUploadMetricsListen: "hq-sync upload --metrics-listen" serves the uploader's metrics
// and the Go and process series while it runs, HQ away.
func TestUploadMetricsListen(t *testing.T) {
	dir := t.TempDir()
	ledgerPath := filepath.Join(dir, "ledger.db")
	loc, err := wire.LoadLocation(e2eTZ)
	if err != nil {
		t.Fatal(err)
	}
	l, err := ledger.Open(context.Background(), ledgerPath, e2eStore, loc)
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	for attempt := 1; ; attempt++ {
		addr := freePort(t)
		ctx, cancel := context.WithCancel(context.Background())
		exited := make(chan string, 1)
		go func() {
			code, _, errs := runCmd(ctx, "upload", "--store", e2eStore, "--ledger", ledgerPath, "--state",
				filepath.Join(dir, "upload.db"), "--hq-url", "http://"+freePort(t)+"/v1/batches", "--secret-file", secretFile(t, e2eSecret),
				"--tz", e2eTZ, "--log-level", "error", "--metrics-listen", addr)
			exited <- fmt.Sprintf("upload exited %d: %s", code, errs)
		}()
		wctx, wcancel := context.WithTimeout(context.Background(), 20*time.Second)
		listening := make(chan error, 1)
		go func() { listening <- e2e.WaitListening(wctx, addr) }()
		var msg string
		select {
		case err := <-listening:
			msg = fmt.Sprint(err)
			if err == nil {
				body := get(t, "http://"+addr+"/metrics")
				for _, series := range []string{"posgate_upload_backlog_rows 0", "posgate_upload_rows_sent_total 0",
					`posgate_upload_batch_failures_total{reason="hq_down"} 0`, "posgate_upload_ledger_behind_hq 0",
					"go_goroutines "} {
					if !strings.Contains(body, series) {
						t.Errorf("GET /metrics has no %q:\n%s", series, body)
					}
				}
			}
		case msg = <-exited: // it gave up before it listened
		}
		wcancel()
		cancel()
		if msg == "<nil>" {
			if msg = <-exited; msg != "upload exited 0: " {
				t.Error(msg)
			}
			return
		}
		if !strings.Contains(msg, "address already in use") || attempt == 3 {
			t.Fatalf("upload --metrics-listen %s: %s", addr, msg)
		}
	}
}
