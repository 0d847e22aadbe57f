package api_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/posgate/posgate/terminal-agent/api"
	"github.com/posgate/posgate/terminal-agent/outbox"
)

// hostile is one request the API must refuse, as a page, another app or a rebound DNS name
// would send it.
type hostile struct {
	name         string
	method, path string
	body         string
	hdr          map[string]string // over the defaults: the token, a loopback Host, JSON
	status       int
	code         string
}

// send sends h to a's API with the defaults a POS app sends, h.hdr replacing them ("" drops one).
func (a *agent) send(h hostile) resp {
	a.t.Helper()
	req, err := http.NewRequest(h.method, a.srv.URL+h.path, strings.NewReader(h.body))
	if err != nil {
		a.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testToken)
	req.Header.Set("Idempotency-Key", "hostile-"+h.name)
	if h.method != "GET" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range h.hdr {
		switch {
		case k == "Host":
			req.Host = v
		case v == "":
			req.Header.Del(k)
		default:
			req.Header.Set(k, v)
		}
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return resp{res.StatusCode, b}
}

// refuseAll sends each hostile request and checks it is refused with its status and code
// and that the outbox's events, sales, refunds, closes, reopens and recorded requests are
// as they were.
func (a *agent) refuseAll(t *testing.T, cases []hostile) {
	t.Helper()
	for _, h := range cases {
		t.Run(h.name, func(t *testing.T) {
			before := a.dump()
			r := a.send(h)
			if r.Status != h.status || r.code(t) != h.code {
				t.Errorf("%s %s: got %d %s, want %d %s", h.method, h.path, r.Status, r.Body, h.status, h.code)
			}
			if after := a.dump(); after != before {
				t.Errorf("the outbox changed:\nbefore %s\nafter  %s", before, after)
			}
		})
	}
}

// TestHostileRequests: without the token, with another, through a foreign Host name (DNS
// rebinding), from a page of a foreign origin, or with a body a form could post, nothing is
// done and the answer says why with a stable code.
func TestHostileRequests(t *testing.T) {
	t.Parallel()
	a := newOfflineAgent(t, outbox.Caps{})
	paid := a.openSale()
	a.addLine(paid, "MILK", 1)
	a.must("POST", "/v1/sales/"+paid+"/payments", `{"method":"cash","amount":"20.00"}`, 200)
	sale := `{"method":"cash","amount":"20.00"}`
	var cases []hostile
	for _, r := range []struct{ method, path, body string }{
		{"POST", "/v1/sales", ""},
		{"POST", "/v1/sales/" + paid + "/payments", sale},
		{"POST", "/v1/refunds", `{"sale_id":"` + paid + `"}`},
		{"POST", "/v1/day-close", `{}`},
		{"GET", "/v1/status", ""},
	} {
		cases = append(cases,
			hostile{"no token " + r.path, r.method, r.path, r.body, map[string]string{"Authorization": ""}, 401, api.CodeTokenRequired},
			hostile{"wrong token " + r.path, r.method, r.path, r.body,
				map[string]string{"Authorization": "Bearer " + strings.Repeat("x", len(testToken))}, 401, api.CodeTokenWrong},
			hostile{"basic auth " + r.path, r.method, r.path, r.body, map[string]string{"Authorization": "Basic " + testToken}, 401, api.CodeTokenRequired},
			hostile{"foreign host " + r.path, r.method, r.path, r.body, map[string]string{"Host": "evil.example:8181"}, 403, api.CodeHostForbidden},
			hostile{"foreign origin " + r.path, r.method, r.path, r.body, map[string]string{"Origin": "https://evil.example"}, 403, api.CodeOriginForbidden},
			hostile{"null origin " + r.path, r.method, r.path, r.body, map[string]string{"Origin": "null"}, 403, api.CodeOriginForbidden})
		if r.method == "POST" {
			cases = append(cases,
				hostile{"text/plain " + r.path, r.method, r.path, r.body, map[string]string{"Content-Type": "text/plain"}, 415, api.CodeContentType},
				hostile{"form " + r.path, r.method, r.path, r.body,
					map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, 415, api.CodeContentType},
				hostile{"no content type " + r.path, r.method, r.path, r.body, map[string]string{"Content-Type": ""}, 415, api.CodeContentType})
		}
	}
	cases = append(cases,
		hostile{"foreign host, no port", "GET", "/v1/health", "", map[string]string{"Host": "evil.example"}, 403, api.CodeHostForbidden},
		hostile{"private address host", "GET", "/v1/status", "", map[string]string{"Host": "192.168.1.20:8181"}, 403, api.CodeHostForbidden},
		hostile{"loopback-looking name", "GET", "/v1/status", "", map[string]string{"Host": "127.0.0.1.evil.example"}, 403, api.CodeHostForbidden},
		hostile{"no token, delete", "DELETE", "/v1/sales/" + paid + "/lines/1", "", map[string]string{"Authorization": ""}, 401, api.CodeTokenRequired},
		hostile{"no content type, delete", "DELETE", "/v1/sales/" + paid + "/lines/1", "", map[string]string{"Content-Type": ""}, 415, api.CodeContentType},
	)
	a.refuseAll(t, cases)

	// What a POS app sends passes: each loopback name, with or without the port.
	for _, host := range []string{"localhost:8181", "127.0.0.1:8181", "[::1]:8181", "localhost", "LOCALHOST:1"} {
		if r := a.send(hostile{method: "GET", path: "/v1/status", hdr: map[string]string{"Host": host}}); r.Status != 200 {
			t.Errorf("Host %s: %d %s", host, r.Status, r.Body)
		}
	}
	// The health check needs no token, and says only that the agent is up.
	if r := a.send(hostile{method: "GET", path: "/v1/health", hdr: map[string]string{"Authorization": ""}}); r.Status != 200 ||
		strings.TrimSpace(string(r.Body)) != `{"status":"up"}` {
		t.Errorf("health: %d %s", r.Status, r.Body)
	}
}

// TestAllowedOrigin: a page of a configured origin may call the API with the token, and
// its browser's preflight is answered; another origin is still refused.
func TestAllowedOrigin(t *testing.T) {
	t.Parallel()
	a := newOfflineAgent(t, outbox.Caps{})
	acc := testAccess
	acc.Origins = []string{"https://pos.example.com"}
	a.srv.Config.Handler = api.New(a.store, a.up, nil, acc)

	pre := a.send(hostile{name: "preflight", method: "OPTIONS", path: "/v1/sales", hdr: map[string]string{
		"Origin": "https://pos.example.com", "Access-Control-Request-Method": "POST", "Authorization": "",
		"Access-Control-Request-Private-Network": "true", "Content-Type": ""}})
	if pre.Status != http.StatusNoContent {
		t.Fatalf("preflight: %d %s", pre.Status, pre.Body)
	}
	r := a.send(hostile{name: "from the page", method: "POST", path: "/v1/sales", hdr: map[string]string{"Origin": "https://pos.example.com"}})
	if r.Status != http.StatusCreated {
		t.Fatalf("POST from the allowed origin: %d %s", r.Status, r.Body)
	}
	a.refuseAll(t, []hostile{
		{"other origin", "POST", "/v1/sales", "", map[string]string{"Origin": "https://pos.example.com.evil.example"}, 403, api.CodeOriginForbidden},
		{"other scheme", "POST", "/v1/sales", "", map[string]string{"Origin": "http://pos.example.com"}, 403, api.CodeOriginForbidden},
		{"allowed origin, no token", "POST", "/v1/sales", "", map[string]string{"Origin": "https://pos.example.com", "Authorization": ""}, 401, api.CodeTokenRequired},
	})
}

// TestPreflightHeaders: the preflight of an allowed origin names what the API takes.
func TestPreflightHeaders(t *testing.T) {
	t.Parallel()
	a := newOfflineAgent(t, outbox.Caps{})
	acc := testAccess
	acc.Origins = []string{"https://pos.example.com"}
	h := api.New(a.store, a.up, nil, acc)
	req := httptest.NewRequest("OPTIONS", "http://127.0.0.1:8181/v1/refunds", nil)
	req.Header.Set("Origin", "https://pos.example.com")
	req.Header.Set("Access-Control-Request-Method", "POST")
	req.Header.Set("Access-Control-Request-Private-Network", "true")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	got := w.Result().Header
	if w.Code != 204 || got.Get("Access-Control-Allow-Origin") != "https://pos.example.com" ||
		!strings.Contains(got.Get("Access-Control-Allow-Headers"), "Authorization") ||
		!strings.Contains(got.Get("Access-Control-Allow-Headers"), "Idempotency-Key") ||
		got.Get("Access-Control-Allow-Private-Network") != "true" {
		t.Fatalf("preflight %d %v", w.Code, got)
	}
}
