package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/posgate/posgate/internal/pinhash"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/terminal-agent/api"
	"github.com/posgate/posgate/terminal-agent/client"
	"github.com/posgate/posgate/terminal-agent/outbox"
	"github.com/posgate/posgate/terminal-agent/uplink"
)

var shanghai = func() *time.Location {
	l, err := time.LoadLocation("Asia/Shanghai")
	if err != nil {
		panic(err)
	}
	return l
}()

// headers records the headers of every request the agent gets.
type headers struct {
	mu  sync.Mutex
	got []http.Header
}

func (h *headers) last() http.Header {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.got[len(h.got)-1]
}

// supervisor is the store's supervisor in these tests.
var supervisor = client.Supervisor{Name: "S-07", PIN: "482913"}

// runAgent starts the real API server over a temp outbox whose uplink can never reach its
// broker (every step is decided offline, refunds allowed), on 2026-11-29 10:00 in Shanghai,
// and returns its URL and the headers of the requests it gets.
func runAgent(t *testing.T) (string, *headers) {
	t.Helper()
	now := func() time.Time { return time.Date(2026, 11, 29, 10, 0, 0, 0, shanghai) }
	ctx, cancel := context.WithCancel(context.Background())
	store, err := outbox.Open(ctx, filepath.Join(t.TempDir(), "outbox.db"), outbox.Config{Store: "S1", Terminal: "T1",
		Location: shanghai, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	up := uplink.New(uplink.Config{BrokerURL: "tcp://127.0.0.1:1", Store: "S1", Terminal: "T1", Now: now}, store)
	done := make(chan struct{})
	go func() { defer close(done); up.Run(ctx) }()
	h := &headers{}
	agent := api.New(store, up, nil, api.Access{Token: "install-token"})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		h.got = append(h.got, r.Header.Clone())
		h.mu.Unlock()
		agent.ServeHTTP(w, r)
	}))
	t.Cleanup(func() { srv.Close(); cancel(); <-done; store.Close() })
	if _, err := store.ReplaceCatalog(ctx, wire.Catalog{V: 1, Store: "S1", Version: 3, Items: []wire.CatalogItem{
		{SKU: "MILK", Barcode: "6901234567890", Name: "Milk 1L", Price: 1250},
		{SKU: "BREAD", Name: "Bread", Price: 899},
	}}); err != nil {
		t.Fatal(err)
	}
	// The store's settings: refunds offline allowed, each approved by supervisor S-07.
	h7, err := pinhash.Hash(supervisor.PIN)
	if err != nil {
		t.Fatal(err)
	}
	st := wire.Settings{V: wire.Version, Store: "S1", Version: 1, OfflineRefunds: true,
		Supervisors: []wire.Supervisor{{Name: supervisor.Name, PINHash: h7}}}
	b, _ := json.Marshal(st)
	if _, err := store.ReplaceSettings(ctx, st, b); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 100 && up.Status().OfflineSince.IsZero(); i++ {
		time.Sleep(10 * time.Millisecond)
	}
	return srv.URL, h
}

// must fails t on err.
func must[T any](t *testing.T, what string) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return v
	}
}

// TestEveryMethod drives every route once through the client against the real server: a
// sale scanned, a line removed, paid and refunded; a sale cancelled; an event's state; the
// day's totals, its close and a supervisor's reopen; status and the parked list.
func TestEveryMethod(t *testing.T) {
	url, h := runAgent(t)
	c := &client.Client{BaseURL: url + "/", Token: "install-token"}
	ctx := context.Background()

	st := must[client.StatusAnswer](t, "status")(c.Status(ctx))
	if st.Store != "S1" || st.Terminal != "T1" || st.Online || st.CatalogVersion != 3 {
		t.Fatalf("status: %+v", st)
	}
	if got := h.last().Get("Authorization"); got != "Bearer install-token" {
		t.Errorf("Authorization %q, want the token as a bearer token", got)
	}

	sale := must[client.SaleAnswer](t, "open a sale")(c.OpenSale(ctx, client.NewKey()))
	id := sale.Sale.ID
	if id == "" || sale.Sale.State != "open" || h.last().Get("Idempotency-Key") == "" {
		t.Fatalf("open a sale: %+v, key %q", sale, h.last().Get("Idempotency-Key"))
	}
	sale = must[client.SaleAnswer](t, "add a line")(c.AddLine(ctx, client.NewKey(), id, client.AddLineRequest{SKU: "MILK", Qty: 2}))
	if sale.Line != 1 || sale.Sale.Total != 2500 || sale.Event == nil || !sale.Event.Offline || sale.Event.Key != wire.Key("T1", sale.Event.Seq) {
		t.Fatalf("add a line: %+v", sale)
	}
	scan := *sale.Event
	sale = must[client.SaleAnswer](t, "add by barcode")(c.AddLine(ctx, client.NewKey(), id, client.AddLineRequest{Barcode: "6901234567890", Qty: 1}))
	if sale.Line != 2 || sale.Sale.Total != 3750 {
		t.Fatalf("add a line by barcode: %+v", sale)
	}
	sale = must[client.SaleAnswer](t, "remove a line")(c.RemoveLine(ctx, client.NewKey(), id, 2))
	if len(sale.Sale.Lines) != 1 || sale.Sale.Total != 2500 {
		t.Fatalf("remove line 2: %+v", sale.Sale)
	}
	sale = must[client.SaleAnswer](t, "read the sale")(c.Sale(ctx, id))
	if sale.Sale.ID != id || sale.Sale.Total != 2500 || sale.Event != nil {
		t.Fatalf("read the sale: %+v", sale)
	}
	sale = must[client.SaleAnswer](t, "pay")(c.Pay(ctx, client.NewKey(), id, client.PayRequest{Method: "cash", Amount: "30.00"}))
	if sale.Sale.State != "completed" || sale.Sale.Change != 500 || sale.Event == nil || sale.Sale.BusinessDate != "2026-11-29" {
		t.Fatalf("pay: %+v", sale)
	}
	rf := must[client.RefundAnswer](t, "refund")(c.Refund(ctx, client.NewKey(), client.RefundRequest{SaleID: id,
		Lines: []client.RefundLine{{Line: 1, Qty: 1}}, Supervisor: &supervisor}))
	if rf.Refund.SaleID != id || rf.Refund.Amount != 1250 || rf.Refund.Method != "cash" || !rf.Refund.Restock || rf.Event == nil ||
		rf.Refund.ApprovedBy != "S-07" {
		t.Fatalf("refund: %+v", rf)
	}

	other := must[client.SaleAnswer](t, "open a second sale")(c.OpenSale(ctx, client.NewKey())).Sale.ID
	must[client.SaleAnswer](t, "add a line")(c.AddLine(ctx, client.NewKey(), other, client.AddLineRequest{SKU: "BREAD", Qty: 1}))
	if s := must[client.SaleAnswer](t, "cancel")(c.Cancel(ctx, client.NewKey(), other)); s.Sale.State != "cancelled" {
		t.Fatalf("cancel: %+v", s.Sale)
	}

	ev := must[client.EventState](t, "event")(c.Event(ctx, scan.Seq))
	if ev.Seq != scan.Seq || ev.Key != scan.Key || ev.State != "pending" {
		t.Fatalf("event %d: %+v", scan.Seq, ev)
	}

	tot := must[client.DayTotalsAnswer](t, "day totals")(c.DayTotals(ctx, "2026-11-29"))
	if tot.BusinessDate != "2026-11-29" || tot.SaleCount != 1 || tot.SaleAmount != 2500 || tot.RefundAmount != 1250 || tot.ClosedSeq != 0 {
		t.Fatalf("day totals: %+v", tot)
	}
	if today := must[client.DayTotalsAnswer](t, "today's totals")(c.DayTotals(ctx, "")); today.SaleCount != 1 {
		t.Fatalf("today's totals: %+v", today)
	}
	closed := must[client.DayCloseAnswer](t, "day close")(c.DayClose(ctx, client.NewKey(), client.DayCloseRequest{}))
	if closed.Totals.BusinessDate != "2026-11-29" || closed.Totals.SaleCount != 1 || closed.Event == nil {
		t.Fatalf("day close: %+v", closed)
	}
	ro := must[client.DayReopenAnswer](t, "reopen")(c.DayReopen(ctx, client.NewKey(), client.DayReopenRequest{
		BusinessDate: "2026-11-29", Reason: "closed by mistake", Supervisor: &supervisor}))
	if ro.Reopen.CloseSeq != closed.Event.Seq || ro.Reopen.Supervisor != "S-07" || ro.Reopen.Reason != "closed by mistake" || ro.Reopen.ClosedTotals.SaleCount != 1 {
		t.Fatalf("reopen: %+v, want the close of event %d", ro.Reopen, closed.Event.Seq)
	}

	if p := must[client.ParkedAnswer](t, "parked")(c.Parked(ctx)); p.Parked == nil || len(p.Parked) != 0 {
		t.Fatalf("parked: %+v, want an empty list", p)
	}
	if st := must[client.StatusAnswer](t, "status")(c.Status(ctx)); st.Backlog == 0 {
		t.Fatalf("status after the day's trade: %+v, want a backlog offline", st)
	}
}

// TestRefused: an answer other than 2xx is an *Error with the status and the agent's code
// and message, found with errors.As; the request changed nothing.
func TestRefused(t *testing.T) {
	url, h := runAgent(t)
	ctx := context.Background()
	var noToken *client.Error
	if _, err := (&client.Client{BaseURL: url}).OpenSale(ctx, client.NewKey()); !errors.As(err, &noToken) ||
		noToken.Status != http.StatusUnauthorized || noToken.Code != "token_required" {
		t.Fatalf("a client without the token: %v, want 401 token_required", err)
	}
	if h.last().Get("Authorization") != "" {
		t.Errorf("Authorization %q sent without a token", h.last().Get("Authorization"))
	}
	c := &client.Client{BaseURL: url, Token: "install-token"}
	id := must[client.SaleAnswer](t, "open a sale")(c.OpenSale(ctx, client.NewKey())).Sale.ID
	for _, x := range []struct {
		name   string
		call   func() error
		status int
		code   string
	}{
		{"unknown sku", func() error {
			_, err := c.AddLine(ctx, client.NewKey(), id, client.AddLineRequest{SKU: "NOPE", Qty: 1})
			return err
		}, 404, "unknown_sku"},
		{"empty sale paid", func() error {
			_, err := c.Pay(ctx, client.NewKey(), id, client.PayRequest{Method: "cash", Amount: "1.00"})
			return err
		}, 409, "sale_empty"},
		{"sub-fen amount", func() error {
			_, err := c.Pay(ctx, client.NewKey(), id, client.PayRequest{Method: "cash", Amount: "0.001"})
			return err
		}, 400, "amount_sub_fen"},
		{"unknown sale", func() error { _, err := c.Sale(ctx, "NOPE"); return err }, 404, "sale_not_found"},
		{"unknown event", func() error { _, err := c.Event(ctx, 999); return err }, 404, "event_not_found"},
		{"bad date", func() error { _, err := c.DayTotals(ctx, "29.11.2026"); return err }, 400, "business_date_invalid"},
	} {
		t.Run(x.name, func(t *testing.T) {
			err := x.call()
			var e *client.Error
			if !errors.As(err, &e) {
				t.Fatalf("error %v (%T), want a *client.Error", err, err)
			}
			if e.Status != x.status || e.Code != x.code || e.Message == "" {
				t.Fatalf("error %+v, want %d %s with a message", e, x.status, x.code)
			}
			if !strings.Contains(err.Error(), x.code) {
				t.Errorf("error text %q does not name the code", err)
			}
		})
	}
	if s := must[client.SaleAnswer](t, "read the sale")(c.Sale(ctx, id)); len(s.Sale.Lines) != 0 || len(s.Sale.Payments) != 0 {
		t.Fatalf("refused requests changed the sale: %+v", s.Sale)
	}
}

// TestSameKeySameAnswer: a request sent again with the same Idempotency-Key (the POS app
// retrying after a timeout) gets the first answer, and the payment is taken once; the same
// key with another request is refused, and the first stands.
func TestSameKeySameAnswer(t *testing.T) {
	url, _ := runAgent(t)
	c := &client.Client{BaseURL: url, Token: "install-token"}
	ctx := context.Background()
	id := must[client.SaleAnswer](t, "open a sale")(c.OpenSale(ctx, client.NewKey())).Sale.ID
	must[client.SaleAnswer](t, "add a line")(c.AddLine(ctx, client.NewKey(), id, client.AddLineRequest{SKU: "MILK", Qty: 2}))
	key := client.NewKey()
	pay := client.PayRequest{Method: "card", Amount: "25.00", Reference: "AUTH-778"}
	first := must[client.SaleAnswer](t, "pay")(c.Pay(ctx, key, id, pay))
	again := must[client.SaleAnswer](t, "pay again with the same key")(c.Pay(ctx, key, id, pay))
	if !reflect.DeepEqual(again, first) || first.Event == nil {
		t.Fatalf("the retry answered %+v\nthe first answer was %+v", again, first)
	}
	if s := must[client.SaleAnswer](t, "read the sale")(c.Sale(ctx, id)); len(s.Sale.Payments) != 1 || s.Sale.Paid != 2500 {
		t.Fatalf("after a retry the sale has %d payments, %s paid; want one of 25.00", len(s.Sale.Payments), s.Sale.Paid)
	}
	_, err := c.Pay(ctx, key, id, client.PayRequest{Method: "cash", Amount: "1.00"})
	var e *client.Error
	if !errors.As(err, &e) || e.Status != http.StatusUnprocessableEntity || e.Code != "idempotency_key_reused" {
		t.Fatalf("the same key with another payment: %v, want 422 idempotency_key_reused", err)
	}
}

// TestTransportError: no answer is not an *Error: the caller cannot tell whether the agent
// committed the request, and must not read it as a refusal.
func TestTransportError(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	_, err := (&client.Client{BaseURL: url}).OpenSale(context.Background(), client.NewKey())
	var e *client.Error
	if err == nil || errors.As(err, &e) {
		t.Fatalf("no agent listening: %v (%T), want a transport error", err, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := (&client.Client{BaseURL: url}).Status(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled context: %v, want context.Canceled", err)
	}
}

// TestAnswerNotFromTheAgent: a non-2xx answer without the agent's error body (a proxy's) is
// an *Error with its status, no code, and the start of the body as its message.
func TestAnswerNotFromTheAgent(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "upstream connect error", http.StatusBadGateway)
	}))
	defer srv.Close()
	_, err := (&client.Client{BaseURL: srv.URL}).Status(context.Background())
	var e *client.Error
	if !errors.As(err, &e) || e.Status != http.StatusBadGateway || e.Code != "" || !strings.Contains(e.Message, "upstream connect error") {
		t.Fatalf("a proxy's 502: %#v", err)
	}
}

// TestNewKey: keys are fresh random UUIDs.
func TestNewKey(t *testing.T) {
	uuid := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	seen := map[client.Key]bool{}
	for range 1000 {
		k := client.NewKey()
		if !uuid.MatchString(string(k)) || seen[k] {
			t.Fatalf("key %q: not a fresh UUID v4", k)
		}
		seen[k] = true
	}
}

// TestImportsStaySmall: the client, which a POS app imports, brings in none of the agent's
// own packages, SQLite or MQTT.
func TestImportsStaySmall(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: this test runs go list")
	}
	out, err := exec.Command("go", "list", "-deps", "github.com/posgate/posgate/terminal-agent/client").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, bad := range []string{"/terminal-agent/outbox", "/terminal-agent/uplink", "/terminal-agent/api",
			"sqlite", "mqtt", "/store-server", "/hq-sync"} {
			if strings.Contains(dep, bad) {
				t.Errorf("the client imports %s", dep)
			}
		}
	}
}
