package main

import (
	"bytes"
	"context"
	"encoding/json"
	"github.com/posgate/posgate/internal/guard"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/posgate/posgate/internal/stack"
	"github.com/posgate/posgate/store-server/client"
)

// Shared by badinput_test.go and api_test.go: an in-process store-server (the same Main
// wiring as the binary) against a real Redis and a real mosquitto started by internal/stack.

const (
	biStoreID = "S1"
	biToken   = "manager-token-of-the-tests"
	biTZ      = "Asia/Shanghai"
)

// biServer is a store-server running in this process.
type biServer struct {
	Stack  *stack.Stack
	Main   *Main
	Base   string // http(s)://host:port of the manager API
	Broker string // the MQTT broker URL the server uses
	Client *http.Client
}

// biRunServer starts a real redis and mosquitto and a store-server on port 0 with a
// t.TempDir() data directory, waits until its gate is in Redis mode, and stops it (and the
// stack) when t ends.
func biRunServer(t *testing.T, extra ...string) *biServer {
	t.Helper()
	return biRunTuned(t, nil, extra...)
}

// biRunTuned is biRunServer with tune, if not nil, setting the Main's unexported pacing
// before it runs.
func biRunTuned(t *testing.T, tune func(*Main), extra ...string) *biServer {
	t.Helper()
	s := stack.Run(t, stack.Options{Redis: true, MQTT: true})
	srv := biStartTuned(t, s, tune, append([]string{"--redis-addr", s.Redis[0].Addr()}, extra...)...)
	srv.waitMode(t, client.ModeRedis, 20*time.Second)
	return srv
}

// biStartServer starts a store-server on the stack s (its mosquitto) with args, which name
// its Redis, and returns once it listens, whatever its gate's mode.
func biStartServer(t *testing.T, s *stack.Stack, extra ...string) *biServer {
	t.Helper()
	return biStartTuned(t, s, nil, extra...)
}

// biStartTuned is biStartServer with tune, as biRunTuned's.
func biStartTuned(t *testing.T, s *stack.Stack, tune func(*Main), extra ...string) *biServer {
	t.Helper()
	m := NewMain()
	if tune != nil {
		tune(m)
	}
	// These tests send wrong tokens on purpose, many of them; the guard that makes a
	// guesser wait is tested on the binary (TestManagerTokenRoles).
	m.APIFailures = guard.New(guard.Config{Free: 1 << 20})
	args := []string{
		"--store", biStoreID,
		"--data-dir", t.TempDir(),
		"--mqtt-url", s.MQTTURL(),
		"--api-listen", "127.0.0.1:0",
		"--api-token-file", secretFile(t, biToken),
		"--tz", biTZ,
		"--log-level", "error",
	}
	args = append(args, extra...)
	if err := m.ParseFlags(args); err != nil {
		t.Fatalf("ParseFlags: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("store-server Run: %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Errorf("store-server did not stop within 20s")
		}
	})
	var addrs Addrs
	select {
	case addrs = <-m.Ready:
	case err := <-done:
		done <- err // for the cleanup
		t.Fatalf("store-server stopped before it was ready: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("store-server not ready within 30s")
	}
	srv := &biServer{Stack: s, Main: m, Base: "http://" + addrs.API, Broker: addrs.Broker,
		Client: &http.Client{Timeout: 10 * time.Second}}
	if m.APITLSCert != "" {
		srv.Base = "https://" + addrs.API
		srv.Client = tlsClient(t, m.APITLSCert)
	}
	return srv
}

// manager returns a client of the manager API, with the manager token, for requests that
// drive a flow; the tests of the wire itself (status codes, headers, bodies) use do.
func (s *biServer) manager() *client.Client {
	return &client.Client{BaseURL: s.Base, HTTPClient: s.Client, Token: biToken}
}

// must fails t on err, and returns the answer: must[T](t, what)(call(...)).
func must[T any](t testing.TB, what string) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return v
	}
}

// importCSV imports a CSV catalog through the client and returns the answer.
func (s *biServer) importCSV(t testing.TB, csv []byte) client.ImportAnswer {
	t.Helper()
	return must[client.ImportAnswer](t, "import a catalog")(s.manager().ImportCatalogCSV(context.Background(), bytes.NewReader(csv)))
}

// waitMode polls /v1/mode until the gate is in mode.
func (s *biServer) waitMode(t testing.TB, mode client.Mode, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		m, err := s.manager().Mode(context.Background())
		if err == nil && m.Mode == mode {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("gate mode is %q (%v), want %q", m.Mode, err, mode)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// do sends one request to the manager API. An empty token sends no Authorization header.
func (s *biServer) do(t testing.TB, method, path, token, ctype string, body []byte) (int, http.Header, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, s.Base+path, rd)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := s.Client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return resp.StatusCode, resp.Header, b
}

// mustJSON sends a request with the manager token (a JSON body if in is not nil), expects
// 200 with application/json and decodes the answer into out (if not nil).
func (s *biServer) mustJSON(t testing.TB, method, path string, in, out any) {
	t.Helper()
	var body []byte
	ctype := ""
	if in != nil {
		var err error
		if body, err = json.Marshal(in); err != nil {
			t.Fatalf("encode %T: %v", in, err)
		}
		ctype = "application/json"
	}
	s.mustRaw(t, method, path, ctype, body, out)
}

// mustRaw is mustJSON with a body given as bytes and its content type.
func (s *biServer) mustRaw(t testing.TB, method, path, ctype string, body []byte, out any) {
	t.Helper()
	status, h, b := s.do(t, method, path, biToken, ctype, body)
	if status != http.StatusOK {
		t.Fatalf("%s %s: status %d, want 200: %s", method, path, status, b)
	}
	if ct := h.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Fatalf("%s %s: Content-Type %q, want application/json", method, path, ct)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: decode %s: %v", method, path, b, err)
		}
	}
}

// wantProblem checks that an answer is an RFC 9457 problem with the status and code.
func biWantProblem(t testing.TB, what string, status int, h http.Header, body []byte, wantStatus int, wantCode string) {
	t.Helper()
	if status != wantStatus {
		t.Errorf("%s: status %d, want %d: %s", what, status, wantStatus, body)
		return
	}
	if ct := h.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("%s: Content-Type %q, want application/problem+json", what, ct)
	}
	var p client.Problem
	if err := json.Unmarshal(body, &p); err != nil {
		t.Errorf("%s: problem body %q: %v", what, body, err)
		return
	}
	if p.Code != wantCode || p.Status != wantStatus || p.Title != http.StatusText(wantStatus) ||
		p.Type != "https://posgate.dev/errors/"+wantCode || p.Detail == "" {
		t.Errorf("%s: problem %+v, want status %d code %q", what, p, wantStatus, wantCode)
	}
}

// problem sends a request and checks that it is refused with a problem of the status and code.
func (s *biServer) problem(t testing.TB, what, method, path, token, ctype string, body []byte, wantStatus int, wantCode string) {
	t.Helper()
	status, h, b := s.do(t, method, path, token, ctype, body)
	biWantProblem(t, what, status, h, b, wantStatus, wantCode)
}

// adjust sets stock through the manager API and returns the SKU's stock after it.
func (s *biServer) adjust(t testing.TB, id, sku string, delta int64, reason string) (qty int64, applied bool) {
	t.Helper()
	out := must[client.AdjustAnswer](t, "adjust "+id)(s.manager().Adjust(context.Background(),
		client.AdjustRequest{ID: id, SKU: sku, Delta: delta, Reason: reason}))
	if out.SKU != sku {
		t.Fatalf("adjust %s: answer names sku %q", id, out.SKU)
	}
	return out.Qty, out.Applied
}

// count books a shelf count through the manager API and returns the delta the ledger
// booked and the SKU's stock after it.
func (s *biServer) count(t testing.TB, id, sku string, counted int64) (delta, qty int64, applied bool) {
	t.Helper()
	out := must[client.CountAnswer](t, "count "+id)(s.manager().Count(context.Background(),
		client.CountRequest{ID: id, SKU: sku, Counted: &counted}))
	if out.SKU != sku {
		t.Fatalf("count %s: answer names sku %q", id, out.SKU)
	}
	return out.Delta, out.Qty, out.Applied
}

// stock returns /v1/stock's rows by SKU, checking that ledger, proven and Redis agree.
func (s *biServer) stock(t testing.TB) map[string]client.StockRow {
	t.Helper()
	out := must[client.StockAnswer](t, "stock")(s.manager().Stock(context.Background(), true))
	if out.Mode != client.ModeRedis {
		t.Errorf("/v1/stock: mode %q, want redis", out.Mode)
	}
	rows := map[string]client.StockRow{}
	for _, r := range out.Stock {
		rows[r.SKU] = r
		if r.Redis == nil || r.Proven == nil || r.Ledger != *r.Proven || *r.Redis != r.Ledger || r.Diff != 0 {
			t.Errorf("/v1/stock %s: ledger %d proven %v redis %v diff %d: want all equal", r.SKU, r.Ledger, biDeref(r.Proven),
				biDeref(r.Redis), r.Diff)
		}
	}
	return rows
}

func biDeref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

// startMain parses args and runs a store-server in this process until it is ready. stop
// cancels it and returns how long Run took to return (failing the test past 60 s); the
// test's cleanup stops it too.
func startMain(t *testing.T, args ...string) (Addrs, func() time.Duration) {
	t.Helper()
	m := NewMain()
	if err := m.ParseFlags(args); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	var once sync.Once
	var took time.Duration
	stop := func() time.Duration {
		once.Do(func() {
			start := time.Now()
			cancel()
			select {
			case <-done:
				took = time.Since(start)
			case <-time.After(60 * time.Second):
				took = 60 * time.Second
				t.Errorf("store-server: Run had not returned 60 s after cancel")
			}
		})
		return took
	}
	select {
	case addrs := <-m.Ready:
		t.Cleanup(func() { stop() })
		return addrs, stop
	case err := <-done:
		cancel()
		t.Fatalf("store-server stopped before it was ready: %v", err)
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatal("store-server not ready within 30s")
	}
	return Addrs{}, nil
}
