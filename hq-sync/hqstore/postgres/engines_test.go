package postgres_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/posgate/posgate/hq-sync/hqstore"
	"github.com/posgate/posgate/hq-sync/hqstore/sqlite"
	"github.com/posgate/posgate/hq-sync/serve"
	"github.com/posgate/posgate/internal/hqwire"
	"github.com/posgate/posgate/internal/money"
)

// TestEnginesAnswerAlike: one signed batch whose row's hash holds a NUL, sent over HTTP to
// hq-sync serve on the SQLite engine and on the PostgreSQL engine, gets the same answer:
// refused (400). A hash was held to its length only: SQLite stored the row, and PostgreSQL,
// whose text cannot hold a NUL, answered 500, so the uploader retried the batch for good.
func TestEnginesAnswerAlike(t *testing.T) {
	ctx := context.Background()
	lite, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "hq.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer lite.Close()
	secret := []byte("s1-secret-at-least-16")
	at := time.Date(2025, 3, 1, 2, 0, 0, 0, time.UTC)
	b := hqwire.Batch{V: hqwire.Version, Store: "S1", ID: "S1-review-000000001", SentAt: at, Rows: []hqwire.Row{{
		Kind: hqwire.KindSale, Terminal: "T1", Seq: 1, BusinessDate: "2025-03-01", FlowNo: 1, At: at,
		Hash: "ab\x00cd", Amount: 100, ByMethod: map[string]money.Fen{"card": 100}, Payload: json.RawMessage(`{}`)}}}
	body, err := json.Marshal(&b)
	if err != nil {
		t.Fatal(err)
	}
	answer := func(st hqstore.Storage) (int, string) {
		srv := httptest.NewServer(serve.New(st, map[string][]byte{"S1": secret}, serve.Options{Now: func() time.Time { return at }}))
		defer srv.Close()
		req, _ := http.NewRequest(http.MethodPost, srv.URL+serve.BatchesPath, bytes.NewReader(body))
		ts := strconv.FormatInt(at.Unix(), 10)
		req.Header.Set(hqwire.HeaderStore, "S1")
		req.Header.Set(hqwire.HeaderTimestamp, ts)
		req.Header.Set(hqwire.HeaderIdemKey, b.ID)
		req.Header.Set(hqwire.HeaderContentHash, hqwire.ContentHash(body))
		req.Header.Set(hqwire.HeaderSignature, hqwire.Sign(secret, http.MethodPost, serve.BatchesPath, "S1", ts, b.ID, body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(bytes.TrimSpace(raw))
	}
	ls, lb := answer(lite)
	ps, pb := answer(open(t))
	if ls != http.StatusBadRequest || ps != http.StatusBadRequest {
		t.Errorf("SQLite answers %d %s\nPostgreSQL answers %d %s\nwant 400 from both", ls, lb, ps, pb)
	}
}
