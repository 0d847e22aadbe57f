package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"

	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/terminal-agent/api"
	"github.com/posgate/posgate/terminal-agent/client"
	"github.com/posgate/posgate/terminal-agent/outbox"
)

// loadOpenAPI loads the embedded document as kin-openapi reads an OpenAPI 3.1 one, checks
// it, and points its server at base.
func loadOpenAPI(t *testing.T, base string) *openapi3.T {
	t.Helper()
	doc, err := openapi3.NewLoader().LoadFromData(api.OpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	if doc.OpenAPI != "3.1.0" || !doc.IsOpenAPI31OrLater() {
		t.Fatalf("the document is OpenAPI %q, want 3.1.0", doc.OpenAPI)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("the OpenAPI document does not validate: %v", err)
	}
	doc.Servers = openapi3.Servers{{URL: base}}
	return doc
}

// conformance is a transport that validates every request and its answer against the
// document (with JSON Schema 2020-12, as openapi3filter does for a 3.1 document), and
// counts the operations and statuses seen.
type conformance struct {
	t      *testing.T
	router routers.Router
	mu     sync.Mutex
	seen   map[string]bool // operationId status
}

func (c *conformance) RoundTrip(req *http.Request) (*http.Response, error) {
	c.t.Helper()
	var body []byte
	if req.Body != nil {
		body, _ = io.ReadAll(req.Body)
		req.Body.Close()
	}
	// withBody is a copy of req carrying the body read: one is validated, another sent.
	// ValidateRequest writes the schema's defaults into the request it validates (a refund's
	// "restock": true, its length with it): the agent gets the request as the client made it.
	withBody := func() *http.Request {
		r := req.Clone(req.Context())
		switch {
		case req.Body != nil && len(body) > 0:
			r.Body = io.NopCloser(bytes.NewReader(body))
			r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
			r.ContentLength = int64(len(body))
		case req.Body != nil:
			r.Body, r.GetBody, r.ContentLength = http.NoBody, nil, 0
		}
		return r
	}
	route, params, err := c.router.FindRoute(withBody())
	if err != nil {
		c.t.Errorf("%s %s: not in the OpenAPI document: %v", req.Method, req.URL.Path, err)
		return http.DefaultTransport.RoundTrip(withBody())
	}
	in := &openapi3filter.RequestValidationInput{Request: withBody(), PathParams: params, Route: route,
		Options: &openapi3filter.Options{MultiError: true, AuthenticationFunc: bearerPresent}}
	if err := openapi3filter.ValidateRequest(req.Context(), in); err != nil {
		c.t.Errorf("%s %s %s: the request does not conform: %v", req.Method, req.URL.Path, body, err)
	}
	res, err := http.DefaultTransport.RoundTrip(withBody())
	if err != nil {
		return nil, err
	}
	answer, _ := io.ReadAll(res.Body)
	res.Body.Close()
	res.Body = io.NopCloser(bytes.NewReader(answer))
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: res.StatusCode, Header: res.Header,
		Options: &openapi3filter.Options{MultiError: true, IncludeResponseStatus: true}}
	out.SetBodyBytes(answer)
	if err := openapi3filter.ValidateResponse(req.Context(), out); err != nil {
		c.t.Errorf("%s %s: the %d answer does not conform: %v\n%s", req.Method, req.URL.Path, res.StatusCode, err, answer)
	}
	c.mu.Lock()
	c.seen[route.Operation.OperationID+" "+http.StatusText(res.StatusCode)] = true
	c.seen[route.Operation.OperationID] = true
	c.mu.Unlock()
	return res, nil
}

// bearerPresent lets a request through the document's security check when it carries a
// bearer token; whether the token is the install's is the agent's to check (access_test).
func bearerPresent(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	if !strings.HasPrefix(in.RequestValidationInput.Request.Header.Get("Authorization"), "Bearer ") {
		return errors.New("no bearer token")
	}
	return nil
}

// TestOpenAPIConformance drives every route of the API, with answers that succeed and
// answers that refuse, through a transport that validates each request and answer against
// the document the agent serves; every operation the document names is exercised.
func TestOpenAPIConformance(t *testing.T) {
	t.Parallel()
	a := newOfflineAgent(t, outbox.Caps{})
	above := money.Fen(2000)
	setSettings(t, a.store, func(s *wire.Settings) { s.RefundSupervisorAbove, s.OfflineRefunds = &above, true })
	doc := loadOpenAPI(t, a.srv.URL)
	router, err := legacy.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	conf := &conformance{t: t, router: router, seen: map[string]bool{}}
	hc := &http.Client{Transport: conf}
	c := &client.Client{BaseURL: a.srv.URL, HTTPClient: hc, Token: testToken}
	ctx := context.Background()
	var refused *client.Error

	if err := c.Health(ctx); err != nil {
		t.Fatal(err)
	}
	served, err := hc.Get(a.srv.URL + "/v1/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(served.Body)
	served.Body.Close()
	if served.StatusCode != 200 || !bytes.Equal(got, api.OpenAPI) {
		t.Fatalf("GET /v1/openapi.json without a token: %d, %d bytes", served.StatusCode, len(got))
	}
	a.ok("status", second(c.Status(ctx)))
	open, err := c.OpenSale(ctx, client.NewKey())
	a.ok("open", err)
	id := open.Sale.ID
	a.ok("sale", second(c.Sale(ctx, id)))
	a.ok("line", second(c.AddLine(ctx, client.NewKey(), id, client.AddLineRequest{SKU: "MILK", Qty: 2})))
	a.ok("line", second(c.AddLine(ctx, client.NewKey(), id, client.AddLineRequest{Barcode: "6901234567890", Qty: 1})))
	a.ok("remove", second(c.RemoveLine(ctx, client.NewKey(), id, 2)))
	if _, err := c.AddLine(ctx, client.NewKey(), id, client.AddLineRequest{SKU: "NOPE", Qty: 1}); !errors.As(err, &refused) {
		t.Fatalf("unknown SKU: %v", err)
	}
	paid, err := c.Pay(ctx, client.NewKey(), id, client.PayRequest{Method: "cash", Amount: "30"})
	a.ok("pay", err)
	other, _ := c.OpenSale(ctx, client.NewKey())
	a.ok("cancel", second(c.Cancel(ctx, client.NewKey(), other.Sale.ID)))
	if _, err := c.Refund(ctx, client.NewKey(), client.RefundRequest{SaleID: id}); !errors.As(err, &refused) || refused.Status != 403 {
		t.Fatalf("refund without a supervisor: %v", err)
	}
	a.ok("refund", second(c.Refund(ctx, client.NewKey(), client.RefundRequest{SaleID: id,
		Lines: []client.RefundLine{{Line: 1, Qty: 1}}, Supervisor: &wang})))
	a.ok("event", second(c.Event(ctx, paid.Event.Seq)))
	if _, err := c.Event(ctx, 999999); !errors.As(err, &refused) || refused.Status != 404 {
		t.Fatalf("unknown event: %v", err)
	}
	a.ok("parked", second(c.Parked(ctx)))
	a.ok("totals", second(c.DayTotals(ctx, "")))
	a.ok("close", second(c.DayClose(ctx, client.NewKey(), client.DayCloseRequest{BusinessDate: "2026-11-28"})))
	a.ok("close today", second(c.DayClose(ctx, client.NewKey(), client.DayCloseRequest{})))
	a.ok("reopen", second(c.DayReopen(ctx, client.NewKey(), client.DayReopenRequest{BusinessDate: "2026-11-29",
		Reason: "closed by mistake", Supervisor: &wang})))
	a.ok("totals after the reopen", second(c.DayTotals(ctx, "2026-11-29")))
	for i := 0; i < 5; i++ { // a supervisor locked: 429 with Retry-After
		c.DayReopen(ctx, client.NewKey(), client.DayReopenRequest{BusinessDate: "2026-11-28", Reason: "x",
			Supervisor: &client.Supervisor{Name: li.Name, PIN: "000000"}})
	}
	if _, err := c.DayReopen(ctx, client.NewKey(), client.DayReopenRequest{BusinessDate: "2026-11-28", Reason: "x",
		Supervisor: &li}); !errors.As(err, &refused) || refused.Status != 429 {
		t.Fatalf("a locked supervisor: %v", err)
	}
	// The refusals before the route: no token (401), a text/plain body (415).
	noToken := &client.Client{BaseURL: a.srv.URL, HTTPClient: &http.Client{Transport: responseOnly{conf}}}
	if _, err := noToken.Status(ctx); !errors.As(err, &refused) || refused.Status != 401 {
		t.Fatalf("no token: %v", err)
	}
	req, _ := http.NewRequest("POST", a.srv.URL+"/v1/sales", strings.NewReader(""))
	req.Header.Set("Authorization", "Bearer "+testToken)
	req.Header.Set("Content-Type", "text/plain")
	if res, err := (&http.Client{Transport: responseOnly{conf}}).Do(req); err != nil || res.StatusCode != 415 {
		t.Fatalf("text/plain: %v %v", res, err)
	}

	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			if !conf.seen[op.OperationID] {
				t.Errorf("%s %s (%s) was never exercised", method, path, op.OperationID)
			}
		}
	}
	for _, want := range []string{"openSale Created", "refund Created", "refund Forbidden", "dayReopen Too Many Requests",
		"status Unauthorized", "addLine Not Found", "openSale Unsupported Media Type"} {
		if !conf.seen[want] {
			t.Errorf("no %q answer was validated", want)
		}
	}
}

// responseOnly validates the answer to a request the document says the agent refuses (its
// request cannot conform), as conformance validates the answers of conforming ones.
type responseOnly struct{ c *conformance }

func (r responseOnly) RoundTrip(req *http.Request) (*http.Response, error) {
	ct := req.Header.Get("Content-Type")
	req.Header.Set("Content-Type", "application/json") // found and checked as the POS app sends it
	route, params, err := r.c.router.FindRoute(req)
	req.Header.Set("Content-Type", ct)
	if err != nil {
		return nil, err
	}
	res, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	answer, _ := io.ReadAll(res.Body)
	res.Body.Close()
	res.Body = io.NopCloser(bytes.NewReader(answer))
	in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route}
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: res.StatusCode, Header: res.Header,
		Options: &openapi3filter.Options{IncludeResponseStatus: true}}
	out.SetBodyBytes(answer)
	if err := openapi3filter.ValidateResponse(req.Context(), out); err != nil {
		r.c.t.Errorf("%s %s: the %d answer does not conform: %v", req.Method, req.URL.Path, res.StatusCode, err)
	}
	r.c.mu.Lock()
	r.c.seen[route.Operation.OperationID+" "+http.StatusText(res.StatusCode)] = true
	r.c.mu.Unlock()
	return res, nil
}

// second returns the error of a (value, error) pair.
func second[T any](_ T, err error) error { return err }

// TestOpenAPIDocument: the document is valid JSON, names every route the agent serves, and
// lists every code of the refusals before the route.
func TestOpenAPIDocument(t *testing.T) {
	t.Parallel()
	var doc map[string]any
	if err := json.Unmarshal(api.OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	s := string(api.OpenAPI)
	for _, code := range []string{api.CodeTokenRequired, api.CodeTokenWrong, api.CodeHostForbidden, api.CodeOriginForbidden,
		api.CodeContentType, outbox.CodeSupervisorRequired, outbox.CodeSupervisorUnknown, outbox.CodeSupervisorPINWrong,
		outbox.CodeSupervisorLocked} {
		if !strings.Contains(s, "`"+code+"`") {
			t.Errorf("the document does not name %s", code)
		}
	}
}
