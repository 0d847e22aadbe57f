package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/posgate/posgate/internal/hqwire"
	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/ledger"
)

// hqBeforeExceptions is an HQ whose serve gives back a store's rows, moves and days but is
// from before the export parts of exceptions: it answers them as such a serve does, 400
// export_invalid ("part ... is not rows, moves or days"). It holds, for store S1, A's
// opening stock of 5 and one offline sale of 6 A by T1. refuse names a part it refuses
// besides (a test of the refusal of a part the refill needs).
type hqBeforeExceptions struct {
	secret []byte
	refuse string
	mu     sync.Mutex
	asked  map[string]int // part → pages asked
}

func (h *hqBeforeExceptions) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	part := r.URL.Query().Get("part")
	h.mu.Lock()
	h.asked[part]++
	refuse := h.refuse
	h.mu.Unlock()
	store := r.Header.Get(hqwire.HeaderStore)
	ts := r.Header.Get(hqwire.HeaderTimestamp)
	if r.URL.Path != hqwire.ExportPath || store != "S1" || !hqwire.Verify(h.secret, r.Header.Get(hqwire.HeaderSignature),
		http.MethodGet, r.URL.RequestURI(), store, ts, "", nil) {
		http.Error(w, "unexpected request", http.StatusBadRequest)
		return
	}
	at := time.Date(2025, 3, 1, 10, 0, 0, 0, time.UTC)
	page := hqwire.ExportPage{Store: store, Part: part}
	switch {
	case part == refuse || (part != hqwire.PartRows && part != hqwire.PartMoves && part != hqwire.PartDays):
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusBadRequest)
		json.NewEncoder(w).Encode(map[string]any{"type": "urn:posgate:hq:problem:export_invalid", "title": "Bad Request",
			"status": 400, "code": hqwire.CodeExportInvalid, "detail": "part \"" + part + "\" is not rows, moves or days"})
		return
	case part == hqwire.PartMoves && r.URL.Query().Get("after") == "0":
		page.Moves = []hqwire.StockMove{{N: 1, ID: "opening-A", SKU: "A", Delta: 5, Reason: hqwire.MoveOpening, At: at}}
	case part == hqwire.PartRows && r.URL.Query().Get("after_terminal") == "":
		p := wire.SalePayload{SaleID: "s1", OpenedAt: at, Lines: []wire.Line{{Line: 1, SKU: "A", Name: "A", Qty: 6,
			UnitPrice: 100, Amount: 600}}, Total: 600, Payments: []wire.Payment{{Method: wire.MethodCash, Amount: 600}}}
		body, _ := json.Marshal(p)
		page.Rows = []hqwire.Row{{Kind: hqwire.KindSale, Terminal: "T1", Seq: 1, BusinessDate: "2025-03-01", FlowNo: 1, At: at,
			Hash: wire.Hash(wire.KindSale, store, "T1", 1, at, body), Amount: 600,
			ByMethod: map[string]money.Fen{wire.MethodCash: 600}, Payload: body}}
	}
	body, _ := json.Marshal(page)
	w.Header().Set(hqwire.HeaderSignature, hqwire.SignExport(h.secret, store, r.URL.RequestURI(), body))
	w.Write(body)
}

// TestRestoreFromHQBeforeExceptionParts: a refill from an HQ whose serve refuses the export
// parts of exceptions (400 export_invalid, a serve from before them) succeeds: the rows and
// moves are booked, the exceptions the refill's bookings flagged dropped, and the output
// warns that the store's exceptions are not given back, naming the parts. An HQ refusing a
// part the refill needs fails it.
func TestRestoreFromHQBeforeExceptionParts(t *testing.T) {
	secret := "S1-restore-before-exceptions"
	hq := &hqBeforeExceptions{secret: []byte(secret), asked: map[string]int{}}
	srv := httptest.NewServer(hq)
	defer srv.Close()
	dir := t.TempDir()
	secretFile := filepath.Join(dir, "secret")
	if err := os.WriteFile(secretFile, []byte(secret), 0o600); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "store")
	if err := os.MkdirAll(filepath.Join(dir, "another"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(data, 0o700); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	args := []string{"--from-hq", srv.URL + "/v1/batches", "--store", "S1", "--data-dir", data, "--hq-secret-file",
		secretFile, "--tz", "Asia/Shanghai", "--log-level", "error"}
	if err := restore(args, &out); err != nil {
		t.Fatalf("restore from an HQ before the exception parts: %v\n%s", err, out.String())
	}
	text := out.String()
	js := text[strings.Index(text, "{") : strings.LastIndex(text, "}")+1]
	var sum RefillSummary
	if err := json.Unmarshal([]byte(js), &sum); err != nil {
		t.Fatalf("the summary %q: %v", js, err)
	}
	if sum.Rows != 1 || sum.Moves != 1 || len(sum.NotExported) != 2 || sum.NotExported[0] != hqwire.PartExceptions ||
		sum.NotExported[1] != hqwire.PartFlows || len(sum.Warnings) != 2 || len(sum.Exceptions.Booked) != 0 {
		t.Fatalf("summary %+v", sum)
	}
	if !strings.Contains(text, "store-server restore: warning: HQ does not give back the store's exceptions") ||
		!strings.Contains(text, "store-server restore: warning: HQ does not give back the store's flow exceptions") {
		t.Errorf("the output does not warn:\n%s", text)
	}
	if hq.asked[hqwire.PartExceptions] != 1 || hq.asked[hqwire.PartFlows] != 1 {
		t.Errorf("HQ asked %v", hq.asked)
	}
	l, err := ledger.Open(context.Background(), filepath.Join(data, "ledger.db"), "S1", time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	if o, err := l.Oversells(ctx, "", true); err != nil || len(o) != 0 {
		t.Errorf("oversells after the refill: %+v, %v (the refill's own are dropped)", o, err)
	}
	if st, err := l.Stock(ctx); err != nil || st["A"] != -1 {
		t.Errorf("stock %v, %v; want A -1", st, err)
	}

	hq.mu.Lock()
	hq.refuse = hqwire.PartRows
	hq.mu.Unlock()
	out.Reset()
	args[5] = filepath.Join(dir, "another")
	if err := restore(args, &out); err == nil || !strings.Contains(err.Error(), "export_invalid") {
		t.Fatalf("restore from an HQ refusing the rows: %v, want the refusal", err)
	}
}
