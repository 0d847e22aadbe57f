package client_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"

	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/stack"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/client"
)

// The client against the real store-server, every method and a refusal, is tested in the
// store-server package (client_test.go there), which runs one with Redis and a broker.

// TestRequests: each method sends its route, the token as a bearer token, and its body as
// JSON (a CSV import as text/csv), and reads the answer.
func TestRequests(t *testing.T) {
	type seen struct{ method, path, auth, ctype, body string }
	var got []seen
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got = append(got, seen{r.Method, r.URL.RequestURI(), r.Header.Get("Authorization"), r.Header.Get("Content-Type"), string(b)})
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{}`))
	}))
	defer srv.Close()
	c := &client.Client{BaseURL: srv.URL + "/", Token: "tok"}
	ctx := context.Background()
	counted := int64(4)
	calls := []func() error{
		func() error { _, err := c.Stock(ctx, false); return err },
		func() error {
			_, err := c.Count(ctx, client.CountRequest{ID: "c1", SKU: "MILK", Counted: &counted})
			return err
		},
		func() error {
			_, err := c.ImportCatalog(ctx, []wire.CatalogItem{{SKU: "MILK", Name: "Milk", Price: 1250}})
			return err
		},
		func() error {
			_, err := c.ImportCatalogCSV(ctx, strings.NewReader("sku,name,price\nMILK,Milk,12.50\n"))
			return err
		},
		func() error { _, err := c.Oversells(ctx, "2026-11-29", true); return err },
		func() error { _, err := c.Parked(ctx, false); return err },
		func() error { _, err := c.SetLimits(ctx, client.Limits{WindowMs: 1000, Store: 1}); return err },
	}
	for _, call := range calls {
		if err := call(); err != nil {
			t.Fatal(err)
		}
	}
	want := []seen{
		{"GET", "/v1/stock?proof=0", "Bearer tok", "", ""},
		{"POST", "/v1/stock/count", "Bearer tok", "application/json", `{"id":"c1","sku":"MILK","counted":4}`},
		{"POST", "/v1/catalog", "Bearer tok", "application/json", `{"items":[{"sku":"MILK","name":"Milk","price":"12.50"}]}`},
		{"POST", "/v1/catalog", "Bearer tok", "text/csv", "sku,name,price\nMILK,Milk,12.50\n"},
		{"GET", "/v1/oversells?all=1&date=2026-11-29", "Bearer tok", "", ""},
		{"GET", "/v1/parked", "Bearer tok", "", ""},
		{"PUT", "/v1/limits", "Bearer tok", "application/json",
			`{"window_ms":1000,"store":1,"terminal":0,"scan":0,"pay":0,"refund":0}`},
	}
	if len(got) != len(want) {
		t.Fatalf("%d requests, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("request %d: %+v\nwant %+v", i, got[i], want[i])
		}
	}
}

// TestProblem: a problem answer is an *Error with its status, code and detail, found with
// errors.As, for a call that decodes an answer and for Backup.
func TestProblem(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusConflict)
		w.Write([]byte(`{"type":"https://posgate.dev/errors/backup_running","title":"Conflict","status":409,` +
			`"code":"backup_running","detail":"a backup of the store is being made"}`))
	}))
	defer srv.Close()
	c := &client.Client{BaseURL: srv.URL, Token: "tok"}
	_, err := c.Mode(context.Background())
	rc, berr := c.Backup(context.Background())
	for _, err := range []error{err, berr} {
		var e *client.Error
		if !errors.As(err, &e) || e.Status != http.StatusConflict || e.Code != "backup_running" ||
			e.Message != "a backup of the store is being made" || !strings.Contains(err.Error(), "backup_running") {
			t.Fatalf("a problem answer: %#v", err)
		}
	}
	if rc != nil {
		t.Fatal("Backup refused, and a body to read")
	}
}

// TestTransportError: no answer is not an *Error: the caller cannot tell whether the store
// made the change, and must not read it as a refusal.
func TestTransportError(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	_, err := (&client.Client{BaseURL: url}).Adjust(context.Background(), client.AdjustRequest{ID: "a", SKU: "MILK", Delta: 1})
	var e *client.Error
	if err == nil || errors.As(err, &e) {
		t.Fatalf("no store-server listening: %v (%T), want a transport error", err, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := (&client.Client{BaseURL: url}).Mode(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled context: %v, want context.Canceled", err)
	}
}

// TestAnswerNotFromTheStore: a non-2xx answer that is not a problem (a proxy's) is an
// *Error with its status, no code, and the start of the body as its message.
func TestAnswerNotFromTheStore(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "upstream connect error", http.StatusBadGateway)
	}))
	defer srv.Close()
	_, err := (&client.Client{BaseURL: srv.URL}).Terminals(context.Background())
	var e *client.Error
	if !errors.As(err, &e) || e.Status != http.StatusBadGateway || e.Code != "" || !strings.Contains(e.Message, "upstream connect error") {
		t.Fatalf("a proxy's 502: %#v", err)
	}
}

func TestCountersAdd(t *testing.T) {
	var sum client.Counters // nil maps: Add makes them
	sum.Add(client.Counters{Sales: 2, Amount: 1250, ByMethod: map[string]money.Fen{wire.MethodCash: 1000, wire.MethodCard: 250}})
	sum.Add(client.Counters{Sales: 1, Amount: 99, ByMethod: map[string]money.Fen{wire.MethodCash: 99},
		Refunds: 1, RefundAmount: 50, RefundByMethod: map[string]money.Fen{wire.MethodCard: 50}})
	sum.Add(client.Counters{})
	want := client.Counters{Sales: 3, Amount: 1349, ByMethod: map[string]money.Fen{wire.MethodCash: 1099, wire.MethodCard: 250},
		Refunds: 1, RefundAmount: 50, RefundByMethod: map[string]money.Fen{wire.MethodCard: 50}}
	if !sum.Equal(want) || len(sum.ByMethod) != 2 || len(sum.RefundByMethod) != 1 {
		t.Fatalf("sum %+v, want %+v", sum, want)
	}
}

// TestImportsStaySmall: the client, which a back-office program imports, brings in none of
// the store's own packages, SQLite, Redis or MQTT.
func TestImportsStaySmall(t *testing.T) {
	stack.SkipShort(t)
	out, err := exec.Command("go", "list", "-deps", "github.com/posgate/posgate/store-server/client").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasPrefix(dep, "github.com/posgate/posgate/") && dep != "github.com/posgate/posgate/store-server/client" {
			switch strings.TrimPrefix(dep, "github.com/posgate/posgate/") {
			case "internal/money", "internal/wire", "internal/perr":
			default:
				t.Errorf("the client imports %s", dep)
			}
		}
		for _, bad := range []string{"sqlite", "redis", "mqtt"} {
			if strings.Contains(dep, bad) {
				t.Errorf("the client imports %s", dep)
			}
		}
	}
}
