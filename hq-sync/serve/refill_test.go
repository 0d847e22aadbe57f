package serve_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/posgate/posgate/hq-sync/hqstore/storetest"
	"github.com/posgate/posgate/hq-sync/serve"
	"github.com/posgate/posgate/internal/hqwire"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// postMoves sends a moves batch signed by store with secret.
func (e *env) postMoves(store string, secret []byte, b *hqwire.MovesBatch) (*http.Response, []byte) {
	e.t.Helper()
	body, _ := json.Marshal(b)
	ts := strconv.FormatInt(e.now.Unix(), 10)
	req, _ := http.NewRequest(http.MethodPost, e.srv.URL+hqwire.MovesPath, bytes.NewReader(body))
	req.Header.Set(hqwire.HeaderStore, store)
	req.Header.Set(hqwire.HeaderTimestamp, ts)
	req.Header.Set(hqwire.HeaderIdemKey, b.ID)
	req.Header.Set(hqwire.HeaderContentHash, hqwire.ContentHash(body))
	req.Header.Set(hqwire.HeaderSignature, hqwire.Sign(secret, http.MethodPost, hqwire.MovesPath, store, ts, b.ID, body))
	return e.do(req)
}

// export asks for one page, signed by store with secret, and checks HQ's signature of a 200.
func (e *env) export(store string, secret []byte, q url.Values) (*http.Response, []byte, hqwire.ExportPage) {
	e.t.Helper()
	target := hqwire.ExportPath + "?" + q.Encode()
	ts := strconv.FormatInt(e.now.Unix(), 10)
	req, _ := http.NewRequest(http.MethodGet, e.srv.URL+target, nil)
	req.Header.Set(hqwire.HeaderStore, store)
	req.Header.Set(hqwire.HeaderTimestamp, ts)
	req.Header.Set(hqwire.HeaderContentHash, hqwire.ContentHash(nil))
	req.Header.Set(hqwire.HeaderSignature, hqwire.Sign(secret, http.MethodGet, target, store, ts, "", nil))
	resp, body := e.do(req)
	var page hqwire.ExportPage
	if resp.StatusCode == http.StatusOK {
		if !hqwire.VerifyExport(secrets[store], resp.Header.Get(hqwire.HeaderSignature), store, target, body) {
			e.t.Fatalf("page not signed with %s's secret for %s", store, target)
		}
		if err := json.Unmarshal(body, &page); err != nil {
			e.t.Fatal(err)
		}
	}
	return resp, body, page
}

// TestV010BatchRefillsTheStore: a batch in the form a v0.1.0 uploader sends (its JSON text,
// field for field; the batch's form has not changed) is stored, and the store gets its
// rows back from the export with the payload the hash was recomputed from, page by page.
func TestV010BatchRefillsTheStore(t *testing.T) {
	reg := prometheus.NewRegistry()
	e := newEnv(t, serve.Options{Metrics: reg})
	rows := sales("S1", 1, 3)
	var text bytes.Buffer
	text.WriteString(`{"v":1,"store":"S1","batch_id":"b-v010","rows":[`)
	for i, r := range rows {
		if i > 0 {
			text.WriteString(",")
		}
		by, _ := json.Marshal(r.ByMethod)
		fmt.Fprintf(&text, `{"kind":%q,"terminal":%q,"seq":%d,"business_date":%q,"flow_no":%d,"at":%q,"hash":%q,"amount":%q,"by_method":%s,"payload":%s}`,
			r.Kind, r.Terminal, r.Seq, r.BusinessDate, r.FlowNo, r.At.Format(time.RFC3339Nano), r.Hash, r.Amount.String(), by, r.Payload)
	}
	text.WriteString(`],"sent_at":"2025-03-02T00:59:00Z"}`)
	if rc := e.mustStore(request{body: text.Bytes(), store: "S1", key: "b-v010"}); rc.New != 3 {
		t.Fatalf("receipt %+v", rc)
	}
	var got []hqwire.Row
	q := url.Values{"part": {"rows"}, "limit": {"2"}}
	for {
		resp, body, page := e.export("S1", secrets["S1"], q)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("export: %d %s", resp.StatusCode, body)
		}
		got = append(got, page.Rows...)
		if !page.More {
			break
		}
		last := page.Rows[len(page.Rows)-1]
		q.Set("after_terminal", last.Terminal)
		q.Set("after_seq", strconv.FormatInt(last.Seq, 10))
	}
	if len(got) != 3 {
		t.Fatalf("%d rows exported, want 3", len(got))
	}
	for i, r := range got {
		if r.Hash != rows[i].Hash || !bytes.Equal(r.Payload, rows[i].Payload) || r.FlowNo != rows[i].FlowNo {
			t.Errorf("row %d exported %+v, sent %+v", i, r, rows[i])
		}
	}
	// Another store's secret gets its own store's data only; an unsigned request nothing.
	if _, _, page := e.export("S2", secrets["S2"], url.Values{"part": {"rows"}}); len(page.Rows) != 0 {
		t.Errorf("S2 got %d of S1's rows", len(page.Rows))
	}
	resp, body, _ := e.export("S1", []byte("not-the-secret-of-S1"), url.Values{"part": {"rows"}})
	mustProblem(t, resp, body, http.StatusUnauthorized, hqwire.CodeUnauthorized)
	resp, body, _ = e.export("S1", secrets["S1"], url.Values{"part": {"everything"}})
	mustProblem(t, resp, body, http.StatusBadRequest, hqwire.CodeExportInvalid)
	// The pages answered are counted by store and part; the refused ones are not.
	for store, want := range map[string]float64{"S1": 2, "S2": 1} {
		if got, ok := metricValue(t, reg, "posgate_hq_export_pages_total", map[string]string{"store": store, "part": "rows"}); !ok || got != want {
			t.Errorf("export pages of %s: %v (present %v), want %v", store, got, ok, want)
		}
	}
	if n, err := testutil.GatherAndCount(reg, "posgate_hq_export_pages_total"); err != nil || n != 2 {
		t.Errorf("%d export page series (%v), want 2", n, err)
	}
}

// TestMovesRoute: a store's moves are kept once per id, come back in order, and a move
// sent again with other content refuses its batch.
func TestMovesRoute(t *testing.T) {
	e := newEnv(t, serve.Options{})
	counted := int64(7)
	b := &hqwire.MovesBatch{V: hqwire.Version, Store: "S1", ID: "m-1", SentAt: e.now, Moves: []hqwire.StockMove{
		{N: 1, ID: "open-A", SKU: "A", Delta: 10, Reason: hqwire.MoveOpening, At: storetest.T0},
		{N: 2, ID: "count-A", SKU: "A", Delta: -3, Reason: hqwire.MoveAdjust, At: storetest.T0, Counted: &counted},
	}}
	for range 2 {
		resp, body := e.postMoves("S1", secrets["S1"], b)
		var rc hqwire.MovesReceipt
		if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &rc) != nil || rc.MaxN != 2 ||
			!hqwire.VerifyReceipt(secrets["S1"], resp.Header.Get(hqwire.HeaderSignature), "S1", "m-1", body) {
			t.Fatalf("moves: %d %s", resp.StatusCode, body)
		}
	}
	b.Moves[1].Delta = -4
	b.ID = "m-2"
	resp, body := e.postMoves("S1", secrets["S1"], b)
	mustProblem(t, resp, body, http.StatusConflict, hqwire.CodeMoveConflict)
	b.Moves[1].Reason = "sale"
	resp, body = e.postMoves("S1", secrets["S1"], b)
	mustProblem(t, resp, body, http.StatusBadRequest, hqwire.CodeBatchInvalid)
	resp, body = e.postMoves("S2", secrets["S2"], b)
	mustProblem(t, resp, body, http.StatusForbidden, hqwire.CodeStoreMismatch)
	_, _, page := e.export("S1", secrets["S1"], url.Values{"part": {"moves"}})
	if len(page.Moves) != 2 || page.Moves[1].Delta != -3 || page.Moves[1].Counted == nil || *page.Moves[1].Counted != 7 {
		t.Fatalf("moves exported: %+v", page.Moves)
	}
}

// TestExportExceptions: the exceptions and flow exceptions a store sent come back to it,
// and to it only, page by page in key order, each in the state HQ holds; a bad key is
// refused export_invalid.
func TestExportExceptions(t *testing.T) {
	e := newEnv(t, serve.Options{})
	xs := validExceptions() // an open oversell of T1:100, a resolved refund exception of T1:101
	b := batch("S1", "b-x", sales("S1", 1, 3))
	b.Exceptions = xs
	e.mustStore(upload(b))
	other := batch("S2", "b-x", nil)
	other.Exceptions = xs[:1]
	e.mustStore(upload(other))
	flows := []hqwire.FlowException{storetest.FlowException("T2", 1, storetest.D1, storetest.T0, 7, 8, "T1:1", 100),
		storetest.FlowException("T2", 2, storetest.D1, storetest.T0, 9, 10, "", 101)}
	e.mustPostFlows(&hqwire.FlowBatch{V: hqwire.Version, Store: "S1", ID: "f-1", Exceptions: flows, SentAt: e.now}, 2)

	var got []hqwire.Exception
	q := url.Values{"part": {hqwire.PartExceptions}, "limit": {"1"}}
	for pages := 1; ; pages++ {
		resp, body, page := e.export("S1", secrets["S1"], q)
		if resp.StatusCode != http.StatusOK || page.Part != hqwire.PartExceptions || len(page.Rows) != 0 {
			t.Fatalf("page %d: %d %s", pages, resp.StatusCode, body)
		}
		got = append(got, page.Exceptions...)
		if !page.More {
			if pages != 2 {
				t.Errorf("%d pages of 1 for 2 exceptions", pages)
			}
			break
		}
		last := page.Exceptions[len(page.Exceptions)-1]
		q.Set("after_kind", last.Kind)
		q.Set("after_terminal", last.Terminal)
		q.Set("after_seq", strconv.FormatInt(last.Seq, 10))
		q.Set("after_sku", last.SKU)
	}
	if len(got) != 2 || got[0].Key() != xs[0].Key() || got[1].Key() != xs[1].Key() || got[0].QtyShort != 2 ||
		got[0].Resolved || !got[1].Resolved || got[1].Resolution != xs[1].Resolution || got[1].Change != 3 {
		t.Fatalf("exported %+v, sent %+v", got, xs)
	}
	if _, _, page := e.export("S2", secrets["S2"], url.Values{"part": {hqwire.PartExceptions}}); len(page.Exceptions) != 1 ||
		page.Exceptions[0].Key() != xs[0].Key() {
		t.Errorf("S2's exceptions: %+v", page.Exceptions)
	}
	resp, body, page := e.export("S1", secrets["S1"], url.Values{"part": {hqwire.PartFlows}, "after_terminal": {"T2"},
		"after_seq": {"1"}})
	if resp.StatusCode != http.StatusOK || page.More || len(page.Flows) != 1 || page.Flows[0].Seq != 2 || page.Flows[0].FlowGiven != 9 {
		t.Fatalf("flow exceptions after T2:1: %d %s", resp.StatusCode, body)
	}
	if _, _, page := e.export("S2", secrets["S2"], url.Values{"part": {hqwire.PartFlows}}); len(page.Flows) != 0 {
		t.Errorf("S2 got S1's flow exceptions: %+v", page.Flows)
	}
	resp, body, _ = e.export("S1", secrets["S1"], url.Values{"part": {hqwire.PartExceptions}, "after_seq": {"x"}})
	mustProblem(t, resp, body, http.StatusBadRequest, hqwire.CodeExportInvalid)
}
