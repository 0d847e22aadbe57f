package serve_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/posgate/posgate/hq-sync/hqstore/storetest"
	"github.com/posgate/posgate/hq-sync/serve"
	"github.com/posgate/posgate/internal/hqwire"
	"github.com/prometheus/client_golang/prometheus"
)

// postFlowBody sends body as a flow exceptions batch key, signed by store with secret.
func (e *env) postFlowBody(store string, secret []byte, key string, body []byte) (*http.Response, []byte) {
	e.t.Helper()
	ts := strconv.FormatInt(e.now.Unix(), 10)
	req, _ := http.NewRequest(http.MethodPost, e.srv.URL+hqwire.FlowsPath, bytes.NewReader(body))
	req.Header.Set(hqwire.HeaderStore, store)
	req.Header.Set(hqwire.HeaderTimestamp, ts)
	req.Header.Set(hqwire.HeaderIdemKey, key)
	req.Header.Set(hqwire.HeaderContentHash, hqwire.ContentHash(body))
	req.Header.Set(hqwire.HeaderSignature, hqwire.Sign(secret, http.MethodPost, hqwire.FlowsPath, store, ts, key, body))
	return e.do(req)
}

// postFlows sends a flow exceptions batch signed by store with secret.
func (e *env) postFlows(store string, secret []byte, b *hqwire.FlowBatch) (*http.Response, []byte) {
	e.t.Helper()
	body, _ := json.Marshal(b)
	return e.postFlowBody(store, secret, b.ID, body)
}

// mustPostFlows sends b signed by its store and checks HQ's signed receipt of stored states.
func (e *env) mustPostFlows(b *hqwire.FlowBatch, stored int) {
	e.t.Helper()
	resp, body := e.postFlows(b.Store, secrets[b.Store], b)
	var rc hqwire.FlowReceipt
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &rc) != nil || rc.BatchID != b.ID ||
		rc.Exceptions != len(b.Exceptions) || rc.Stored != stored ||
		!hqwire.VerifyReceipt(secrets[b.Store], resp.Header.Get(hqwire.HeaderSignature), b.Store, b.ID, body) {
		e.t.Fatalf("flow exceptions %s: %d %s; want a signed receipt of %d stored", b.ID, resp.StatusCode, body, stored)
	}
}

// TestFlowsRoute: a store's flow exceptions are stored from a signed batch, once (a resend
// stores nothing), and a resolution replaces the booked state; bad input is refused with a
// coded 4xx and stores nothing, and the next good batch is stored beside what HQ held.
func TestFlowsRoute(t *testing.T) {
	reg := prometheus.NewRegistry()
	e := newEnv(t, serve.Options{Metrics: reg})
	x := storetest.FlowException("T2", 1, storetest.D1, storetest.T0, 7, 8, "T1:1", 100)
	b := &hqwire.FlowBatch{V: hqwire.Version, Store: "S1", ID: "f-100-100", SentAt: e.now,
		Exceptions: []hqwire.FlowException{x}}
	e.mustPostFlows(b, 1)
	e.mustPostFlows(b, 0)
	// The states stored are counted; the one sent again is not.
	if got, ok := metricValue(t, reg, "posgate_hq_flow_exceptions_total", map[string]string{"store": "S1"}); !ok || got != 1 {
		t.Errorf("posgate_hq_flow_exceptions_total{store=S1} = %v (present %v), want 1", got, ok)
	}
	held := storetest.StoredFlow("S1", x, e.now)
	storetest.CheckFlows(t, e.store, storetest.D1, "", false, held)

	refused := func(b *hqwire.FlowBatch, status int, code string, mutate func(x *hqwire.FlowException)) {
		t.Helper()
		c := *b
		c.Exceptions = append([]hqwire.FlowException(nil), b.Exceptions...)
		mutate(&c.Exceptions[0])
		resp, body := e.postFlows(c.Store, secrets[c.Store], &c)
		mustProblem(t, resp, body, status, code)
	}
	next := &hqwire.FlowBatch{V: hqwire.Version, Store: "S1", ID: "f-101-101", SentAt: e.now,
		Exceptions: []hqwire.FlowException{storetest.FlowException("T2", 2, storetest.D1, storetest.T0, 9, 10, "", 101)}}
	for name, m := range map[string]func(x *hqwire.FlowException){
		"kind":       func(x *hqwire.FlowException) { x.Kind = "day_close" },
		"flow":       func(x *hqwire.FlowException) { x.FlowBooked = x.FlowGiven },
		"change":     func(x *hqwire.FlowException) { x.Change = 0 },
		"held_by":    func(x *hqwire.FlowException) { x.HeldBy = "T1:x" },
		"date":       func(x *hqwire.FlowException) { x.BusinessDate = "2025-3-1" },
		"resolution": func(x *hqwire.FlowException) { x.Resolution = "no resolved flag" },
		"nul":        func(x *hqwire.FlowException) { x.Resolved, x.Resolution = true, "a\x00b" },
	} {
		t.Run(name, func(t *testing.T) { refused(next, http.StatusBadRequest, hqwire.CodeBatchInvalid, m) })
	}
	two := *next
	two.Exceptions = []hqwire.FlowException{next.Exceptions[0], next.Exceptions[0]}
	resp, body := e.postFlows("S1", secrets["S1"], &two)
	mustProblem(t, resp, body, http.StatusBadRequest, hqwire.CodeBatchInvalid)
	resp, body = e.postFlows("S1", []byte("not-the-secret-of-S1"), next)
	mustProblem(t, resp, body, http.StatusUnauthorized, hqwire.CodeUnauthorized)
	resp, body = e.postFlows("S2", secrets["S2"], next)
	mustProblem(t, resp, body, http.StatusForbidden, hqwire.CodeStoreMismatch)
	resp, body = e.postFlowBody("S1", secrets["S1"], next.ID, []byte(`{"v":1,"store":"S1","batch_id":"f-101-101","flows":[]}`))
	mustProblem(t, resp, body, http.StatusBadRequest, hqwire.CodeJSONInvalid)
	req, _ := http.NewRequest(http.MethodGet, e.srv.URL+hqwire.FlowsPath, nil)
	resp, body = e.do(req)
	mustProblem(t, resp, body, http.StatusMethodNotAllowed, hqwire.CodeMethodNotAllowed)
	storetest.CheckFlows(t, e.store, storetest.D1, "", false, held)

	// The next good batch: stored beside what HQ held; the resolution, a later change, wins.
	e.now = e.now.Add(time.Minute)
	res := storetest.ResolvedFlow(x, storetest.T0.Add(time.Hour), "receipt 7 of T2 reprinted as 8", 102)
	next.ID, next.Exceptions = "f-101-102", append(next.Exceptions, res)
	e.mustPostFlows(next, 2)
	storetest.CheckFlows(t, e.store, storetest.D1, "S1", false, storetest.StoredFlow("S1", res, e.now),
		storetest.StoredFlow("S1", next.Exceptions[0], e.now))
	if open, err := e.store.FlowExceptions(context.Background(), "", "", true); err != nil || len(open) != 1 || open[0].Seq != 2 {
		t.Fatalf("open flow exceptions: %+v, %v", open, err)
	}
}
