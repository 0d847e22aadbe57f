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

// checkHQ compares HQ's rows of the store with the ledger's: the same sales and refunds of
// each terminal, by seq, with the same flow numbers and amounts, none missing either side.
func (h *hqSide) checkHQ(storeDir string) int {
	t := h.t
	t.Helper()
	type row struct{ flow, amount int64 }
	read := func(path, query string) map[string]row {
		db := openRO(t, path)
		defer db.Close()
		rows, err := db.Query(query)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		m := map[string]row{}
		for rows.Next() {
			var term string
			var seq int64
			var r row
			if err := rows.Scan(&term, &seq, &r.flow, &r.amount); err != nil {
				t.Fatal(err)
			}
			m[fmt.Sprintf("%s:%d", term, seq)] = r
		}
		return m
	}
	led := read(filepath.Join(storeDir, "ledger.db"), `SELECT terminal, seq, flow_no, total FROM sales
		UNION ALL SELECT terminal, seq, flow_no, amount FROM refunds`)
	hq := read(h.db, `SELECT terminal, seq, flow_no, amount FROM rows WHERE store = 'S1' AND kind IN ('sale', 'refund')`)
	bad := 0
	for k, r := range led {
		if got, ok := hq[k]; !ok || got != r {
			if bad++; bad < 5 {
				t.Errorf("%s: ledger flow %d amount %d, HQ %+v (held: %v)", k, r.flow, r.amount, got, ok)
			}
		}
	}
	for k := range hq {
		if _, ok := led[k]; !ok {
			if bad++; bad < 10 {
				t.Errorf("%s at HQ is not in the ledger", k)
			}
		}
	}
	if bad > 0 || len(led) == 0 {
		t.Errorf("%d of %d sales and refunds differ between the ledger and HQ (%d at HQ)", bad, len(led), len(hq))
	}
	return len(led)
}
