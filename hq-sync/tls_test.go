package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/posgate/posgate/hq-sync/hqstore/sqlite"
	"github.com/posgate/posgate/internal/certtest"
	"github.com/posgate/posgate/internal/wire"
	sclient "github.com/posgate/posgate/store-server/client"
	"github.com/posgate/posgate/store-server/ledger"
	"github.com/posgate/posgate/store-server/uploadstate"
)

// TestUploadOverTLS: "serve --tls-cert" answers HTTPS only, with its certificate in the
// metrics; "upload --hq-ca" trusts the chain's own authority for it and sends the store's
// rows; without --hq-ca the uploader refuses the certificate and sends nothing.
func TestUploadOverTLS(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	ca := certtest.NewCA(t)
	notAfter := time.Now().Add(90 * 24 * time.Hour).Truncate(time.Second)
	cert, key := ca.IssueFiles(t, notAfter)
	stores := filepath.Join(dir, "stores.json")
	if err := os.WriteFile(stores, []byte(fmt.Sprintf(`[{"store":%q,"secret":%q}]`, e2eStore, e2eSecret)), 0o600); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(dir, "hq.db")
	url, metricsURL := startServe(t, db, stores, "--tls-cert", cert, "--tls-key", key)
	if !strings.HasPrefix(url, "https://") {
		t.Fatalf("serve with --tls-cert at %s", url)
	}
	if res, err := http.Get("http" + strings.TrimPrefix(url, "https")); err == nil {
		res.Body.Close()
		if res.StatusCode != http.StatusBadRequest { // Go's answer to plain HTTP on a TLS port
			t.Fatalf("plain HTTP to serve with --tls-cert: %s", res.Status)
		}
	}
	var expiry float64
	for line := range strings.Lines(get(t, metricsURL)) {
		if v, ok := strings.CutPrefix(line, "posgate_hq_tls_cert_expiry_timestamp_seconds "); ok {
			expiry, _ = strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	if expiry != float64(notAfter.Unix()) {
		t.Errorf("serve's metrics: certificate expiry %v, want %d", expiry, notAfter.Unix())
	}

	// A ledger with one sale.
	loc, err := wire.LoadLocation(e2eTZ)
	if err != nil {
		t.Fatal(err)
	}
	ledgerPath := filepath.Join(dir, "ledger.db")
	l, err := ledger.Open(ctx, ledgerPath, e2eStore, loc)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	sale := &wire.SalePayload{SaleID: "s1", OpenedAt: at, Total: 250,
		Lines:    []wire.Line{{Line: 1, SKU: "MILK", Name: "Milk", Qty: 1, UnitPrice: 250, Amount: 250}},
		Payments: []wire.Payment{{Method: wire.MethodCash, Amount: 300}}, Change: 50}
	body, err := json.Marshal(sale)
	if err != nil {
		t.Fatal(err)
	}
	out, err := l.Commit(ctx, []ledger.Record{{Terminal: "T01", Seq: 1, Kind: wire.KindSale, At: at, Payload: body,
		Status: wire.AckAccepted, Final: true, FlowNo: 1, Sale: sale,
		Hash: wire.Hash(wire.KindSale, e2eStore, "T01", 1, at, body)}})
	if err != nil || out[0].Err != nil || out[0].Status != wire.AckAccepted {
		t.Fatalf("commit the sale: %v %+v", err, out)
	}
	date := l.BusinessDate(at)
	l.Close()

	upload := func(ctx context.Context, state string, extra ...string) (int, string) {
		args := append([]string{"upload", "--once", "--store", e2eStore, "--ledger", ledgerPath, "--state", state,
			"--hq-url", url, "--secret-file", secretFile(t, e2eSecret), "--tz", e2eTZ, "--log-level", "warn"}, extra...)
		code, _, errs := runCmd(ctx, args...)
		return code, errs
	}
	rows := func() int {
		st, err := sqlite.Open(ctx, db)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		got, err := st.Rows(ctx, date, e2eStore)
		if err != nil {
			t.Fatal(err)
		}
		return len(got)
	}
	// Without it the uploader retries, as for an HQ away: the batch waits, its failed sends
	// counted with the certificate error, until the uploader is stopped.
	untrusting := filepath.Join(dir, "untrusting.db")
	stopped, stop := context.WithCancel(ctx)
	defer stop()
	var code int
	var errs string
	exited := make(chan struct{})
	go func() { defer close(exited); code, errs = upload(stopped, untrusting) }()
	var st sclient.UploadStatus
	for deadline := time.Now().Add(20 * time.Second); st.Attempts == 0; {
		select {
		case <-exited:
			t.Fatalf("upload without --hq-ca exited before a failed send: exit %d: %s", code, errs)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no failed send of the uploader without --hq-ca in 20 s: %+v", st)
		}
		if _, err := os.Stat(untrusting); err == nil { // not before the uploader made it
			st, _ = uploadstate.ReadStatus(ctx, ledgerPath, untrusting, e2eStore, loc)
		}
	}
	stop()
	<-exited
	if code == 0 {
		t.Fatalf("upload without --hq-ca: exit %d: %s", code, errs)
	}
	if st.Pending == "" || !strings.Contains(st.LastError, "certificate") {
		t.Errorf("upload without --hq-ca: status %+v, want a pending batch failed for HQ's certificate", st)
	}
	if n := rows(); n != 0 {
		t.Fatalf("HQ holds %d rows from an uploader that does not trust its certificate", n)
	}
	if code, errs := upload(ctx, filepath.Join(dir, "upload.db"), "--hq-ca", ca.Path); code != 0 {
		t.Fatalf("upload --hq-ca: exit %d: %s", code, errs)
	}
	if n := rows(); n != 1 {
		t.Fatalf("HQ holds %d rows after the upload over TLS, want 1", n)
	}
	if code, errs := upload(ctx, filepath.Join(dir, "bad-ca.db"), "--hq-ca", cert+".missing"); code != 2 || !strings.Contains(errs, "--hq-ca") {
		t.Fatalf("upload with a missing --hq-ca file: exit %d: %s", code, errs)
	}
}
