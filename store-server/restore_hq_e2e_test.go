package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/posgate/posgate/e2e"
	"github.com/posgate/posgate/internal/hqwire"
	"github.com/posgate/posgate/internal/wire"
)

// hqSide is HQ's serve and the store's uploader beside a store under test.
type hqSide struct {
	t      *testing.T
	serve  *e2e.Serve
	up     *e2e.Uploader
	db     string
	starts int // uploader starts
}

// startHQ starts hq-sync serve and the store's uploader (hq-sync upload) on its data
// directory.
func startHQ(t *testing.T, b e2e.Binaries, storeDir string) *hqSide {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	secret := "s1-secret-for-the-restore-test"
	storesFile := filepath.Join(dir, "stores.json")
	js, _ := json.Marshal([]map[string]string{{"store": "S1", "secret": secret}})
	if err := os.WriteFile(storesFile, js, 0o600); err != nil {
		t.Fatal(err)
	}
	h := &hqSide{t: t, db: filepath.Join(dir, "hq.db")}
	var err error
	if h.serve, err = e2e.StartServe(ctx, b.HQSync, e2e.ServeOptions{DB: h.db, StoresFile: storesFile, Dir: dir}); err != nil {
		t.Fatal(err)
	}
	if h.up, err = e2e.StartUploader(ctx, b.HQSync, e2e.UploaderOptions{Store: "S1", DataDir: storeDir,
		HQURL: h.serve.BatchesURL(), Secret: secret, LogLevel: "info"}); err != nil {
		t.Fatal(err)
	}
	h.starts = 1
	t.Cleanup(func() {
		h.up.Kill()
		h.serve.Kill()
		if t.Failed() {
			t.Logf("uploader log: %s", tail(h.up.Log))
		}
	})
	return h
}

// superviseUploader starts the uploader again whenever it has exited, every 2 s, as its
// systemd unit does (Restart=on-failure), until ctx ends. No new state, no operator.
func (h *hqSide) superviseUploader(ctx context.Context) {
	for ctx.Err() == nil {
		if pid := h.up.Pid(); pid == 0 || syscall.Kill(pid, 0) != nil {
			h.up.Stop() // reaped already: forgets it
			if err := h.up.Start(); err != nil {
				h.t.Errorf("start the uploader: %v", err)
				return
			}
			h.starts++
		}
		select {
		case <-ctx.Done():
		case <-time.After(2 * time.Second):
		}
	}
}

// waitUploaded waits until the store's uploader has sent every ledger row to HQ and is
// not refusing the ledger.
func (h *hqSide) waitUploaded(s *e2e.StoreServer, within time.Duration) {
	h.t.Helper()
	var last string
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		a, err := s.Manager().HQ(context.Background())
		if err == nil && a.Found && a.Upload != nil && !a.Upload.LedgerBehindHQ && a.Upload.Backlog == 0 && a.Upload.Pending == "" {
			return
		}
		last = fmt.Sprintf("%+v %v", a.Upload, err)
	}
	h.t.Fatalf("the uploader did not send the ledger to HQ within %v: %s", within, last)
}

// checkHQ compares HQ's rows of the store with the ledger's as e2e.CompareRows does (each
// row at HQ once, with the same kind, date, flow number, time, hash and amounts, none
// missing either side), and returns how many sales and refunds the ledger holds.
func (h *hqSide) checkHQ(storeDir string) int {
	t := h.t
	t.Helper()
	ctx := context.Background()
	loc, err := wire.LoadLocation(biTZ)
	if err != nil {
		t.Fatal(err)
	}
	led, err := e2e.LedgerRows(ctx, filepath.Join(storeDir, "ledger.db"), biStoreID, loc)
	if err != nil {
		t.Fatal(err)
	}
	at, err := e2e.HQRows(ctx, h.db, biStoreID)
	if err != nil {
		t.Fatal(err)
	}
	rep := e2e.Report{OK: true}
	e2e.CompareRows(&rep, led, at)
	n := 0
	for _, r := range led {
		if r.Kind == hqwire.KindSale || r.Kind == hqwire.KindRefund {
			n++
		}
	}
	if !rep.OK || n == 0 {
		t.Errorf("the ledger's sales and refunds and HQ's (%d):\n%s", n, rep)
	}
	return n
}
