package api_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/mattn/go-sqlite3"

	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/terminal-agent/api"
	"github.com/posgate/posgate/terminal-agent/client"
	"github.com/posgate/posgate/terminal-agent/outbox"
	"github.com/posgate/posgate/terminal-agent/uplink"
)

// clock is a settable test clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

type agent struct {
	t     *testing.T
	srv   *httptest.Server
	c     *client.Client // over srv
	store *outbox.Store
	up    *uplink.Uplink // set by newOfflineAgent
	path  string
	clock *clock
}

// testToken is the API token of the agents the tests run.
const testToken = "test-token-0123456789abcdefghijklmnop"

// testAccess is the Access of the agents the tests run.
var testAccess = api.Access{Token: testToken}

// newAgent is the agent whose API srv serves.
func newAgent(t *testing.T, srv *httptest.Server, store *outbox.Store, path string, clk *clock) *agent {
	setSettings(t, store, nil)
	return &agent{t: t, srv: srv, c: &client.Client{BaseURL: srv.URL, Token: testToken}, store: store, path: path, clock: clk}
}

var shanghai = func() *time.Location {
	l, err := time.LoadLocation("Asia/Shanghai")
	if err != nil {
		panic(err)
	}
	return l
}()

// newOfflineAgent starts the API over a real SQLite outbox with an uplink that can never
// reach its broker: every request is decided offline.
func newOfflineAgent(t *testing.T, caps outbox.Caps) *agent {
	t.Helper()
	clk := &clock{t: time.Date(2026, 11, 29, 10, 0, 0, 0, shanghai)}
	path := filepath.Join(t.TempDir(), "outbox.db")
	ctx, cancel := context.WithCancel(context.Background())
	store, err := outbox.Open(ctx, path, outbox.Config{Store: "S1", Terminal: "T1", Location: shanghai, Now: clk.Now, Caps: caps})
	if err != nil {
		t.Fatal(err)
	}
	up := uplink.New(uplink.Config{BrokerURL: "tcp://127.0.0.1:1", Store: "S1", Terminal: "T1", Now: clk.Now}, store)
	done := make(chan struct{})
	go func() { defer close(done); up.Run(ctx) }()
	srv := httptest.NewServer(api.New(store, up, nil, testAccess))
	t.Cleanup(func() { srv.Close(); cancel(); <-done; store.Close() })
	_, err = store.ReplaceCatalog(ctx, wire.Catalog{V: 1, Store: "S1", Version: 3, Items: []wire.CatalogItem{
		{SKU: "MILK", Barcode: "6901234567890", Name: "Milk 1L", Price: 1250},
		{SKU: "BREAD", Name: "Bread", Price: 899},
		{SKU: "TV", Name: "Television", Price: 399900},
		{SKU: "FREE", Name: "Bag", Price: 0},
	}})
	if err != nil {
		t.Fatal(err)
	}
	// Wait until the uplink has recorded that it is offline.
	for i := 0; i < 100 && up.Status().OfflineSince.IsZero(); i++ {
		time.Sleep(10 * time.Millisecond)
	}
	a := newAgent(t, srv, store, path, clk)
	a.up = up
	return a
}

type resp struct {
	Status int
	Body   []byte
}

func (r resp) json(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.Body, v); err != nil {
		t.Fatalf("decode %s: %v", r.Body, err)
	}
}

func (r resp) code(t *testing.T) string {
	var e client.ErrorBody
	r.json(t, &e)
	return e.Code
}

func (a *agent) do(method, path, body string, hdr ...string) resp {
	a.t.Helper()
	req, err := http.NewRequest(method, a.srv.URL+path, strings.NewReader(body))
	if err != nil {
		a.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testToken)
	if method != "GET" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return resp{res.StatusCode, b}
}

func (a *agent) must(method, path, body string, want int, hdr ...string) resp {
	a.t.Helper()
	r := a.do(method, path, body, hdr...)
	if r.Status != want {
		a.t.Fatalf("%s %s %s: status %d, want %d: %s", method, path, body, r.Status, want, r.Body)
	}
	return r
}

// The helpers below drive a flow through the API's Go client, with a fresh Idempotency-Key
// for each step, and fail the test on any error; do and must test the wire itself.

// ok fails the test if a step of a flow failed.
func (a *agent) ok(what string, err error) {
	a.t.Helper()
	if err != nil {
		a.t.Fatalf("%s: %v", what, err)
	}
}

func (a *agent) openSale() string {
	a.t.Helper()
	s, err := a.c.OpenSale(context.Background(), client.NewKey())
	a.ok("open a sale", err)
	return s.Sale.ID
}

func (a *agent) addLine(id, sku string, qty int64) client.SaleAnswer {
	a.t.Helper()
	s, err := a.c.AddLine(context.Background(), client.NewKey(), id, client.AddLineRequest{SKU: sku, Qty: qty})
	a.ok(fmt.Sprintf("add %d %s to %s", qty, sku, id), err)
	return s
}

func (a *agent) pay(id string, p client.PayRequest) client.SaleAnswer {
	a.t.Helper()
	s, err := a.c.Pay(context.Background(), client.NewKey(), id, p)
	a.ok(fmt.Sprintf("pay %s %s on %s", p.Amount, p.Method, id), err)
	return s
}

// cash is a cash payment of amount.
func cash(amount string) client.PayRequest { return client.PayRequest{Method: "cash", Amount: amount} }

func (a *agent) sale(id string) client.SaleAnswer {
	a.t.Helper()
	s, err := a.c.Sale(context.Background(), id)
	a.ok("read sale "+id, err)
	return s
}

func (a *agent) status() client.StatusAnswer {
	a.t.Helper()
	st, err := a.c.Status(context.Background())
	a.ok("status", err)
	return st
}

func (a *agent) dayTotals(date string) client.DayTotalsAnswer {
	a.t.Helper()
	tot, err := a.c.DayTotals(context.Background(), date)
	a.ok("day totals "+date, err)
	return tot
}

// dayClose closes date ("": the day a close naming no day closes).
func (a *agent) dayClose(date string) client.DayCloseAnswer {
	a.t.Helper()
	c, err := a.c.DayClose(context.Background(), client.NewKey(), client.DayCloseRequest{BusinessDate: date})
	a.ok("close the day "+date, err)
	return c
}

// sellMilk sells one MILK (12.50) for cash.
func (a *agent) sellMilk() {
	a.t.Helper()
	id := a.openSale()
	a.addLine(id, "MILK", 1)
	a.pay(id, cash("12.50"))
}

// dump returns every row of every table, to show that a request changed nothing.
func (a *agent) dump() string {
	a.t.Helper()
	db, err := sql.Open("sqlite3", "file:"+a.path+"?mode=ro")
	if err != nil {
		a.t.Fatal(err)
	}
	defer db.Close()
	var out bytes.Buffer
	for _, table := range []string{"events", "sales", "sale_lines", "payments", "refunds", "refund_lines", "day_closes", "day_reopens", "requests", "catalog"} {
		rows, err := db.Query("SELECT * FROM " + table + " ORDER BY rowid")
		if err != nil {
			a.t.Fatal(err)
		}
		cols, _ := rows.Columns()
		for rows.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			rows.Scan(ptrs...)
			fmt.Fprintf(&out, "%s %v\n", table, vals)
		}
		rows.Close()
	}
	return out.String()
}

func TestBadInputStoresNothing(t *testing.T) {
	t.Parallel()
	a := newOfflineAgent(t, outbox.Caps{MaxCardPayment: 100000, MaxStoredCard: 1000000})
	open := a.openSale()
	a.addLine(open, "MILK", 2)
	paid := a.openSale()
	a.addLine(paid, "BREAD", 1)
	a.pay(paid, cash("10.00"))
	a.must("POST", "/v1/sales", "", 201, "Idempotency-Key", "k-used")
	big := `{"sku":"MILK","qty":1,"pad":"` + strings.Repeat("x", api.MaxBody) + `"}`

	cases := []struct {
		name, method, path, body, ctype string
		status                          int
		code                            string
	}{
		{"malformed json", "POST", "/v1/sales/" + open + "/lines", `{"sku":"MILK",`, "", 400, "json_syntax"},
		{"not an object", "POST", "/v1/sales/" + open + "/lines", `[1,2]`, "", 400, "json_type"},
		{"trailing data", "POST", "/v1/sales/" + open + "/lines", `{"sku":"MILK","qty":1} {}`, "", 400, "json_syntax"},
		{"unknown field", "POST", "/v1/sales/" + open + "/lines", `{"sku":"MILK","qty":1,"price":"0.01"}`, "", 400, "json_unknown_field"},
		{"qty as string", "POST", "/v1/sales/" + open + "/lines", `{"sku":"MILK","qty":"2"}`, "", 400, "json_type"},
		{"zero quantity", "POST", "/v1/sales/" + open + "/lines", `{"sku":"MILK","qty":0}`, "", 400, "quantity_invalid"},
		{"negative quantity", "POST", "/v1/sales/" + open + "/lines", `{"sku":"MILK","qty":-3}`, "", 400, "quantity_invalid"},
		{"huge quantity", "POST", "/v1/sales/" + open + "/lines", `{"sku":"MILK","qty":1000000000}`, "", 400, "quantity_invalid"},
		{"fractional quantity", "POST", "/v1/sales/" + open + "/lines", `{"sku":"MILK","qty":1.5}`, "", 400, "json_type"},
		{"unknown sku", "POST", "/v1/sales/" + open + "/lines", `{"sku":"NOPE","qty":1}`, "", 404, "unknown_sku"},
		{"unknown barcode", "POST", "/v1/sales/" + open + "/lines", `{"barcode":"000","qty":1}`, "", 404, "unknown_barcode"},
		{"sku and barcode", "POST", "/v1/sales/" + open + "/lines", `{"sku":"MILK","barcode":"6901234567890","qty":1}`, "", 400, "item_required"},
		{"unknown sale", "POST", "/v1/sales/NOPE/lines", `{"sku":"MILK","qty":1}`, "", 404, "sale_not_found"},
		{"oversize body", "POST", "/v1/sales/" + open + "/lines", big, "", 400, "body_too_large"},
		{"wrong content type", "POST", "/v1/sales/" + open + "/lines", `{"sku":"MILK","qty":1}`, "text/plain", 415, "content_type"},
		{"sub-fen amount", "POST", "/v1/sales/" + open + "/payments", `{"method":"cash","amount":"0.001"}`, "", 400, "amount_sub_fen"},
		{"huge amount", "POST", "/v1/sales/" + open + "/payments", `{"method":"cash","amount":"999999999999999999999.00"}`, "", 400, "amount_overflow"},
		{"negative amount", "POST", "/v1/sales/" + open + "/payments", `{"method":"cash","amount":"-5.00"}`, "", 400, "amount_not_positive"},
		{"zero amount", "POST", "/v1/sales/" + open + "/payments", `{"method":"cash","amount":"0"}`, "", 400, "amount_not_positive"},
		{"amount as number", "POST", "/v1/sales/" + open + "/payments", `{"method":"cash","amount":25}`, "", 400, "json_type"},
		{"exponent amount", "POST", "/v1/sales/" + open + "/payments", `{"method":"cash","amount":"1e3"}`, "", 400, "amount_syntax"},
		{"empty amount", "POST", "/v1/sales/" + open + "/payments", `{"method":"cash","amount":""}`, "", 400, "amount_empty"},
		{"unknown method", "POST", "/v1/sales/" + open + "/payments", `{"method":"bitcoin","amount":"1.00"}`, "", 400, "payment_method_invalid"},
		{"card without reference", "POST", "/v1/sales/" + open + "/payments", `{"method":"card","amount":"1.00"}`, "", 400, "reference_required"},
		{"card overpayment", "POST", "/v1/sales/" + open + "/payments", `{"method":"card","amount":"99.00","reference":"r1"}`, "", 409, "overpayment"},
		{"pay completed sale", "POST", "/v1/sales/" + paid + "/payments", `{"method":"cash","amount":"1.00"}`, "", 409, "sale_not_open"},
		{"remove unknown line", "DELETE", "/v1/sales/" + open + "/lines/9", "", "", 404, "line_not_found"},
		{"remove bad line", "DELETE", "/v1/sales/" + open + "/lines/x", "", "", 400, "line_invalid"},
		{"refund open sale", "POST", "/v1/refunds", `{"sale_id":"` + open + `"}`, "", 409, "sale_not_completed"},
		{"refund without sale", "POST", "/v1/refunds", `{}`, "", 400, "sale_id_required"},
		{"bad business date", "POST", "/v1/day-close", `{"business_date":"2026-13-45"}`, "", 400, "business_date_invalid"},
		{"token reused", "POST", "/v1/sales/" + open + "/cancel", "", "", 422, "idempotency_key_reused"},
		{"unknown route", "GET", "/v1/nothing", "", "", 404, "route_not_found"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := a.dump()
			req, _ := http.NewRequest(c.method, a.srv.URL+c.path, strings.NewReader(c.body))
			ct := c.ctype
			if ct == "" && c.method != "GET" {
				ct = "application/json"
			}
			if ct != "" {
				req.Header.Set("Content-Type", ct)
			}
			req.Header.Set("Authorization", "Bearer "+testToken)
			if c.name == "token reused" {
				req.Header.Set("Idempotency-Key", "k-used")
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			r := resp{res.StatusCode, b}
			if r.Status != c.status || r.code(t) != c.code {
				t.Errorf("got %d %s, want %d %s", r.Status, b, c.status, c.code)
			}
			var e client.ErrorBody
			r.json(t, &e)
			if e.Message == "" {
				t.Errorf("no message for the cashier: %s", b)
			}
			if after := a.dump(); after != before {
				t.Errorf("database changed:\nbefore:\n%s\nafter:\n%s", before, after)
			}
		})
	}
	// The next good request still flows.
	a.pay(open, cash("30.00"))
}

func TestDoubleClickIsOnePayment(t *testing.T) {
	t.Parallel()
	a := newOfflineAgent(t, outbox.Caps{})
	id := a.openSale()
	a.addLine(id, "MILK", 2)
	body := `{"method":"card","amount":"25.00","reference":"AUTH-778"}`
	first := a.must("POST", "/v1/sales/"+id+"/payments", body, 200, "Idempotency-Key", "pay-1")
	// The cashier clicks again, and the POS app retries concurrently as well.
	var wg sync.WaitGroup
	answers := make([]resp, 5)
	for i := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i] = a.do("POST", "/v1/sales/"+id+"/payments", body, "Idempotency-Key", "pay-1")
		}()
	}
	wg.Wait()
	for _, r := range answers {
		if r.Status != first.Status || !bytes.Equal(r.Body, first.Body) {
			t.Fatalf("retry answered %d %s, first answer was %d %s", r.Status, r.Body, first.Status, first.Body)
		}
	}
	s := a.sale(id)
	if len(s.Sale.Payments) != 1 || s.Sale.State != "completed" || s.Sale.Paid != 2500 {
		t.Fatalf("want one payment of 25.00 and a completed sale, got %+v", s.Sale)
	}
	b, _ := a.store.Backlog(context.Background())
	if b.Count != 2 { // one scan, one sale
		t.Fatalf("backlog %d events, want 2", b.Count)
	}
	// Same key, other content: a conflict, and the original stands.
	r := a.do("POST", "/v1/sales/"+id+"/payments", `{"method":"card","amount":"1.00","reference":"X"}`, "Idempotency-Key", "pay-1")
	if r.Status != 422 || r.code(t) != "idempotency_key_reused" {
		t.Fatalf("reused key: %d %s", r.Status, r.Body)
	}
	// Without a key, a second click is a second request (and here: refused, sale completed).
	if r := a.do("POST", "/v1/sales/"+id+"/payments", body); r.Status != 409 {
		t.Fatalf("pay on completed sale: %d %s", r.Status, r.Body)
	}
}

func TestOfflineCaps(t *testing.T) {
	t.Parallel()
	a := newOfflineAgent(t, outbox.Caps{MaxCardPayment: 50000, MaxStoredCard: 80000, MaxOffline: 24 * time.Hour})
	sale := func(sku string, qty int64) string {
		id := a.openSale()
		a.addLine(id, sku, qty)
		return id
	}
	// A 3999.00 television by card is over the 500.00 single-payment cap.
	tv := sale("TV", 1)
	if r := a.do("POST", "/v1/sales/"+tv+"/payments", `{"method":"card","amount":"3999.00","reference":"A"}`); r.Status != 409 || r.code(t) != "offline_cap_payment" {
		t.Fatalf("single cap: %d %s", r.Status, r.Body)
	}
	// Cash is never capped.
	a.pay(tv, cash("4000.00"))
	// Two QR payments of 400.00 fill the 800.00 stored cap; a third is refused.
	for i := 0; i < 2; i++ {
		id := sale("MILK", 32) // 400.00
		a.pay(id, client.PayRequest{Method: "qr", Amount: "400.00", Reference: "Q"})
	}
	id := sale("MILK", 1)
	if r := a.do("POST", "/v1/sales/"+id+"/payments", `{"method":"qr","amount":"12.50","reference":"Q"}`); r.Status != 409 || r.code(t) != "offline_cap_total" {
		t.Fatalf("total cap: %d %s", r.Status, r.Body)
	}
	st := a.status()
	if st.StoredCard != 80000 || st.Online {
		t.Fatalf("status: %+v", st)
	}
	// The room on the outbox's disk, for the till to warn before a full disk refuses sales.
	if st.DiskFree == nil || *st.DiskFree <= 0 {
		t.Errorf("status disk_free_bytes: %v", st.DiskFree)
	}
	// Past the longest time offline, card is refused even when small; cash still works.
	a.clock.Add(25 * time.Hour)
	if r := a.do("POST", "/v1/sales/"+id+"/payments", `{"method":"card","amount":"1.00","reference":"C"}`); r.Status != 409 || r.code(t) != "offline_too_long" {
		t.Fatalf("offline duration cap: %d %s", r.Status, r.Body)
	}
	a.pay(id, cash("12.50"))
	// Refunds are off offline by default.
	if r := a.do("POST", "/v1/refunds", `{"sale_id":"`+tv+`"}`); r.Status != 409 || r.code(t) != "refund_offline_disabled" {
		t.Fatalf("offline refund: %d %s", r.Status, r.Body)
	}
}

func TestOfflineRefundsWhenAllowed(t *testing.T) {
	t.Parallel()
	a := newOfflineAgent(t, outbox.Caps{})
	setSettings(t, a.store, func(s *wire.Settings) { s.OfflineRefunds = true })
	id := a.openSale()
	a.addLine(id, "MILK", 3)
	a.addLine(id, "BREAD", 1)
	a.pay(id, cash("50.00"))
	ra, err := a.c.Refund(context.Background(), client.NewKey(), client.RefundRequest{SaleID: id,
		Lines: []client.RefundLine{{Line: 1, Qty: 2}}, Supervisor: &wang})
	a.ok("refund", err)
	if ra.Refund.Amount != 2500 || ra.Refund.Method != "cash" || ra.Event == nil || !ra.Event.Offline ||
		ra.Refund.ApprovedBy != "Wang" {
		t.Fatalf("refund: %+v", ra)
	}
	if r := a.do("POST", "/v1/refunds", `{"sale_id":"`+id+`","lines":[{"line":1,"qty":2}],"supervisor":`+svJSON(wang)+`}`); r.Code(t) != "refund_exceeds_sale" {
		t.Fatalf("over-refund: %d %s", r.Status, r.Body)
	}
	totals := a.dayTotals("2026-11-29")
	// 3 × 12.50 + 8.99 = 46.49 sold for 50.00 cash (3.51 change); 25.00 refunded.
	if totals.SaleCount != 1 || totals.SaleAmount != 4649 || totals.RefundAmount != 2500 ||
		len(totals.Methods) != 1 || totals.Methods[0].SaleAmount != 4649 {
		t.Fatalf("day totals: %+v", totals)
	}
}

// Code is code with a capital, for readability in one-liners above.
func (r resp) Code(t *testing.T) string { return r.code(t) }

func TestCatalogPricesOffline(t *testing.T) {
	t.Parallel()
	a := newOfflineAgent(t, outbox.Caps{})
	id := a.openSale()
	s, err := a.c.AddLine(context.Background(), client.NewKey(), id, client.AddLineRequest{Barcode: "6901234567890", Qty: 3})
	a.ok("scan a barcode", err)
	if s.Sale.Total != 3750 || s.Sale.Lines[0].SKU != "MILK" || s.Event == nil || !s.Event.Offline {
		t.Fatalf("priced from barcode: %+v", s)
	}
	// A newer catalog reprices new lines; an older one is ignored.
	ctx := context.Background()
	if ok, err := a.store.ReplaceCatalog(ctx, wire.Catalog{V: 1, Store: "S1", Version: 4,
		Items: []wire.CatalogItem{{SKU: "MILK", Name: "Milk 1L", Price: 1300}}}); err != nil || !ok {
		t.Fatal(ok, err)
	}
	if ok, _ := a.store.ReplaceCatalog(ctx, wire.Catalog{V: 1, Store: "S1", Version: 2,
		Items: []wire.CatalogItem{{SKU: "MILK", Name: "Milk 1L", Price: 1}}}); ok {
		t.Fatal("an older catalog replaced a newer one")
	}
	s = a.addLine(id, "MILK", 1)
	if s.Sale.Total != 3750+1300 {
		t.Fatalf("total %s, want 50.50", s.Sale.Total)
	}
	if r := a.do("POST", "/v1/sales/"+id+"/lines", `{"sku":"BREAD","qty":1}`); r.Status != 404 {
		t.Fatalf("BREAD left the catalog but was sold: %d %s", r.Status, r.Body)
	}
	st := a.status()
	if st.CatalogVersion != 4 {
		t.Fatalf("catalog version %d", st.CatalogVersion)
	}
}

func TestStatusBacklog(t *testing.T) {
	t.Parallel()
	a := newOfflineAgent(t, outbox.Caps{})
	st := a.status()
	if st.Backlog != 0 || st.OldestAgeMs != 0 {
		t.Fatalf("empty status: %+v", st)
	}
	id := a.openSale()
	a.addLine(id, "MILK", 1)
	a.clock.Add(90 * time.Second)
	a.pay(id, cash("20"))
	a.clock.Add(30 * time.Second)
	st = a.status()
	if st.Backlog != 2 || st.OldestAgeMs != 120_000 || st.Online || st.OfflineSince == nil {
		t.Fatalf("status: %+v", st)
	}
}

func TestSeqsNeverReused(t *testing.T) {
	t.Parallel()
	a := newOfflineAgent(t, outbox.Caps{})
	ctx := context.Background()
	var last int64
	for i := 0; i < 3; i++ {
		id := a.openSale()
		s := a.addLine(id, "BREAD", 1)
		if s.Event.Seq <= last {
			t.Fatalf("seq %d after %d", s.Event.Seq, last)
		}
		last = s.Event.Seq
	}
	// Ack everything, prune it all (HQ holds its day), and the next seq still moves on.
	var ts []outbox.Transition
	for s := int64(1); s <= last; s++ {
		ts = append(ts, outbox.Transition{Seq: s, Action: outbox.Ack, Ack: wire.Ack{Seq: s, Status: wire.AckAccepted}})
	}
	if _, err := a.store.Apply(ctx, ts); err != nil {
		t.Fatal(err)
	}
	if _, err := a.store.SetHQThrough(ctx, a.store.BusinessDate(a.clock.Now())); err != nil { // HQ holds the day
		t.Fatal(err)
	}
	if n, err := a.store.Prune(ctx, a.clock.Now().Add(time.Hour)); err != nil || n != last {
		t.Fatalf("pruned %d (%v), want %d", n, err, last)
	}
	id := a.openSale()
	s := a.addLine(id, "BREAD", 1)
	if s.Event.Seq != last+1 {
		t.Fatalf("seq after prune %d, want %d", s.Event.Seq, last+1)
	}
}

func TestMoneyNeverFloat(t *testing.T) {
	t.Parallel()
	// 0.1 + 0.2 in float64 is not 0.3; in fen it is.
	a := newOfflineAgent(t, outbox.Caps{})
	if _, err := a.store.ReplaceCatalog(context.Background(), wire.Catalog{V: 1, Store: "S1", Version: 9,
		Items: []wire.CatalogItem{{SKU: "A", Name: "a", Price: 10}, {SKU: "B", Name: "b", Price: 20}}}); err != nil {
		t.Fatal(err)
	}
	id := a.openSale()
	a.addLine(id, "A", 1)
	a.addLine(id, "B", 1)
	s := a.pay(id, cash("0.3"))
	if s.Sale.State != "completed" || s.Sale.Change != 0 || s.Sale.Total != money.Fen(30) {
		t.Fatalf("sale: %+v", s.Sale)
	}
}

// TestStoredCardCapCountsOpenSales: offline, the card money already taken on a sale still
// open counts against the cap on card money held offline, so split payments each under the
// per-payment cap cannot add up past it.
func TestStoredCardCapCountsOpenSales(t *testing.T) {
	t.Parallel()
	a := newOfflineAgent(t, outbox.Caps{MaxCardPayment: 50000, MaxStoredCard: 80000})
	id := a.openSale()
	a.addLine(id, "TV", 1) // 3999.00
	a.pay(id, client.PayRequest{Method: "card", Amount: "500.00", Reference: "A"})
	r := a.do("POST", "/v1/sales/"+id+"/payments", `{"method":"card","amount":"400.00","reference":"B"}`)
	if r.Status != http.StatusConflict || r.code(t) != "offline_cap_total" {
		t.Fatalf("a second card payment taking 900.00 offline past the 800.00 cap: %d %s", r.Status, r.Body)
	}
	a.pay(id, client.PayRequest{Method: "card", Amount: "300.00", Reference: "C"})
	a.pay(id, cash("3199.00"))
	st := a.status()
	if st.StoredCard != 80000 {
		t.Fatalf("card money held offline %s, want 800.00", st.StoredCard)
	}
}

// TestSaleAmountLimit: a line that would take a sale above wire.MaxAmount, and a payment
// above it, are refused with amount_above_limit, so the agent never takes a sale the store
// would refuse.
func TestSaleAmountLimit(t *testing.T) {
	t.Parallel()
	a := newOfflineAgent(t, outbox.Caps{})
	id := a.openSale()
	r := a.do("POST", "/v1/sales/"+id+"/lines", `{"sku":"TV","qty":250063}`) // 1,000,001,937.00
	if r.Status != http.StatusConflict || r.code(t) != wire.CodeTooLarge {
		t.Fatalf("a line taking the sale past the limit: %d %s", r.Status, r.Body)
	}
	a.addLine(id, "TV", 250062) // 999,997,938.00
	r = a.do("POST", "/v1/sales/"+id+"/payments", `{"method":"cash","amount":"1000000000.01"}`)
	if r.Status != http.StatusBadRequest || r.code(t) != wire.CodeTooLarge {
		t.Fatalf("a payment above the limit: %d %s", r.Status, r.Body)
	}
	a.pay(id, cash("999997938.00"))
}

// TestDayCloseRetryShowsQueuedTotals: a day close committed but never answered (the agent
// stopped, or the first click still waited) is answered on its retry with the totals queued
// for the store; and after the close the till takes no more sales on that day.
func TestDayCloseRetryShowsQueuedTotals(t *testing.T) {
	t.Parallel()
	a := newOfflineAgent(t, outbox.Caps{})
	a.sellMilk()
	var first client.DayCloseAnswer
	a.must("POST", "/v1/day-close", `{}`, 200, "Idempotency-Key", "close-1").json(t, &first)
	if first.Totals.SaleCount != 1 {
		t.Fatalf("day close totals %+v, want one sale", first.Totals)
	}
	db, err := sql.Open("sqlite3", "file:"+a.path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// As if the agent had stopped before answering: the request keeps its event's seq only.
	if _, err := db.Exec(`UPDATE requests SET status = 0, body = ? WHERE token = 'close-1'`,
		fmt.Sprint(first.Event.Seq)); err != nil {
		t.Fatal(err)
	}
	// The day is closed at this till: nothing more is sold on it (the close would be short).
	if r := a.do("POST", "/v1/sales", ""); r.Status != http.StatusConflict || r.code(t) != outbox.CodeDayClosed {
		t.Fatalf("a sale after the day's close: %d %s, want 409 %s", r.Status, r.Body, outbox.CodeDayClosed)
	}
	var retry client.DayCloseAnswer
	a.must("POST", "/v1/day-close", `{}`, 200, "Idempotency-Key", "close-1").json(t, &retry)
	if retry.Totals.SaleCount != 1 || retry.Event == nil || retry.Event.Seq != first.Event.Seq {
		t.Fatalf("retry: totals %+v, event %+v; want the queued close (one sale, event %+v)", retry.Totals, retry.Event, first.Event)
	}
}

// TestCloseAfterMidnight: the shop sells until 22:00 and the cashier presses "day close" at
// 00:20 (the POS app sends {}). The agent closes the day sold on, and the till sells the next
// morning. It took today's date by its clock: it closed the new, empty day, left the day sold
// on unclosed, and, a close being final, refused every sale of the new day (day_closed).
func TestCloseAfterMidnight(t *testing.T) {
	t.Parallel()
	a := newOfflineAgent(t, outbox.Caps{})
	if r := a.do("POST", "/v1/day-close", `{}`); r.Status != http.StatusConflict || r.code(t) != outbox.CodeNothingToClose {
		t.Fatalf("a close naming no day, nothing sold: %d %s, want 409 %s", r.Status, r.Body, outbox.CodeNothingToClose)
	}
	a.clock.Add(12 * time.Hour) // 2026-11-29 22:00 Shanghai
	id := a.openSale()
	a.addLine(id, "MILK", 1)
	a.pay(id, cash("12.50"))
	a.clock.Add(2*time.Hour + 20*time.Minute) // 2026-11-30 00:20: the end-of-day close
	closed := a.dayClose("")
	if closed.Totals.BusinessDate != "2026-11-29" || closed.Totals.SaleCount != 1 {
		t.Errorf("close at 00:20 declared %s with %d sales, want 2026-11-29 with 1", closed.Totals.BusinessDate, closed.Totals.SaleCount)
	}
	a.clock.Add(8 * time.Hour) // 2026-11-30 08:20: the shop opens
	if r := a.do("POST", "/v1/sales", ""); r.Status != http.StatusOK && r.Status != http.StatusCreated {
		t.Fatalf("first sale of the business day 2026-11-30 at 08:20, after a close pressed at 00:20 that "+
			"declared %s with %d sales: %d %s", closed.Totals.BusinessDate, closed.Totals.SaleCount, r.Status, r.Body)
	}
}

// ambiguousClose presses "day close" naming no day while several days are open: it is
// refused with day_to_close_ambiguous naming each of them, and nothing is closed.
func ambiguousClose(t *testing.T, a *agent, open ...string) {
	t.Helper()
	r := a.do("POST", "/v1/day-close", `{}`)
	if r.Status != http.StatusConflict || r.code(t) != outbox.CodeDayAmbiguous {
		t.Fatalf("a close naming no day with %v open: %d %s, want 409 %s", open, r.Status, r.Body, outbox.CodeDayAmbiguous)
	}
	for _, d := range open {
		if !strings.Contains(string(r.Body), d) {
			t.Errorf("the refusal does not name open day %s: %s", d, r.Body)
		}
	}
}

// TestCloseAfterASaleAcrossMidnight: the shop's last customer is rung up at 23:55 and pays at
// 00:01 (the sale completes on the new business day, as it must); the cashier presses "day
// close" at 00:05. With two days open the close asks which (day_to_close_ambiguous); the
// cashier names 2026-11-29, and the till sells the next morning. A close naming no day took
// the latest day with a sale, the new one, closed for good: the till refused its every sale.
func TestCloseAfterASaleAcrossMidnight(t *testing.T) {
	t.Parallel()
	a := newOfflineAgent(t, outbox.Caps{})
	a.clock.Add(12 * time.Hour) // 2026-11-29 22:00 Shanghai
	id := a.openSale()
	a.addLine(id, "MILK", 1)
	a.pay(id, cash("12.50"))
	a.clock.Add(time.Hour + 55*time.Minute) // 23:55: the last customer
	id = a.openSale()
	a.addLine(id, "BREAD", 1)
	a.clock.Add(6 * time.Minute) // 2026-11-30 00:01: pays
	a.pay(id, cash("10.00"))
	a.clock.Add(4 * time.Minute) // 00:05: the end-of-day close
	ambiguousClose(t, a, "2026-11-29", "2026-11-30")
	closed := a.dayClose("2026-11-29")
	if closed.Totals.SaleCount != 1 {
		t.Errorf("close of 2026-11-29: %d sales, want 1", closed.Totals.SaleCount)
	}
	a.clock.Add(8 * time.Hour) // 2026-11-30 08:05: the shop opens
	if r := a.do("POST", "/v1/sales", ""); r.Status != http.StatusCreated {
		t.Errorf("first sale of the business day 2026-11-30 at 08:05: %d %s", r.Status, r.Body)
	}
}

// TestNightShiftClose: a shop trading through the night (sales at 22:00 and at 03:00) closes
// at 07:05, naming no day: it is asked which of the two open days, not locked out of the
// morning. A default of today from 06:00 closed 2026-11-30 and refused the 08:00 sale.
func TestNightShiftClose(t *testing.T) {
	t.Parallel()
	a := newOfflineAgent(t, outbox.Caps{})
	a.clock.Add(12 * time.Hour) // 2026-11-29 22:00
	a.sellMilk()
	a.clock.Add(5 * time.Hour) // 2026-11-30 03:00
	a.sellMilk()
	a.clock.Add(4*time.Hour + 5*time.Minute) // 07:05
	ambiguousClose(t, a, "2026-11-29", "2026-11-30")
	a.dayClose("2026-11-29")
	a.clock.Add(55 * time.Minute) // 08:00
	if r := a.do("POST", "/v1/sales", ""); r.Status != http.StatusCreated {
		t.Errorf("a sale at 08:00 on 2026-11-30: %d %s", r.Status, r.Body)
	}
}

// TestForgottenClose: the shop trades 10:00-22:00 and the cashier presses "day close" ({})
// at 22:05. One evening (2026-11-29) the close is forgotten: the next evening's close naming
// no day asks which; after the cashier closes both, the evening after closes its own day.
// Taking the oldest open day, every evening's close declared the day before, for good.
func TestForgottenClose(t *testing.T) {
	t.Parallel()
	a := newOfflineAgent(t, outbox.Caps{})
	a.sellMilk()                // 2026-11-29 10:00; no close that evening
	a.clock.Add(24 * time.Hour) // 2026-11-30 10:00
	a.sellMilk()
	a.clock.Add(12*time.Hour + 5*time.Minute) // 22:05
	ambiguousClose(t, a, "2026-11-29", "2026-11-30")
	a.dayClose("2026-11-29")
	closed := a.dayClose("")
	if closed.Totals.BusinessDate != "2026-11-30" {
		t.Fatalf("the evening's close declared %s, want 2026-11-30", closed.Totals.BusinessDate)
	}
	a.clock.Add(12 * time.Hour) // 2026-12-01 10:05
	a.sellMilk()
	a.clock.Add(12 * time.Hour) // 22:05
	closed = a.dayClose("")
	if closed.Totals.BusinessDate != "2026-12-01" {
		t.Errorf("the next evening's close declared %s, want 2026-12-01", closed.Totals.BusinessDate)
	}
}

// TestRetryAfterClockJump: a card payment is committed and answered, and the answer is lost
// on the way to the POS app. The device's clock then jumps eight days forward (NTP correcting
// a dead RTC), the hourly prune runs with its seven days' retention, and the app retries a
// minute later with the same Idempotency-Key. The retry gets the first answer and takes no
// second payment. Pruning by the clock alone dropped the request's record, and the retry
// charged the card again.
func TestRetryAfterClockJump(t *testing.T) {
	t.Parallel()
	a := newOfflineAgent(t, outbox.Caps{})
	ctx := context.Background()
	id := a.openSale()
	a.addLine(id, "TV", 1) // 3999.00
	pay := `{"method":"card","amount":"1000.00","reference":"AUTH-778"}`
	first := a.must("POST", "/v1/sales/"+id+"/payments", pay, 200, "Idempotency-Key", "pay-1")
	a.clock.Add(8 * 24 * time.Hour)
	if _, err := a.store.Prune(ctx, a.clock.Now().Add(-7*24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	a.clock.Add(time.Minute)
	retry := a.must("POST", "/v1/sales/"+id+"/payments", pay, 200, "Idempotency-Key", "pay-1")
	s := a.sale(id)
	if !bytes.Equal(retry.Body, first.Body) || s.Sale.Paid != 100000 || len(s.Sale.Payments) != 1 {
		t.Fatalf("a retry after the clock jumped: %s\nwant the first answer %s\nthe sale has %d payments, %s paid (want 1, 1000.00)",
			retry.Body, first.Body, len(s.Sale.Payments), s.Sale.Paid)
	}
}

// TestCloseWithADayLongPast: the till boots with a dead RTC reading 2000-01-01 and sells
// offline on that business day until NTP puts the clock right. That evening the cashier's
// close naming no day closes 2026-11-29, the day sold on; the old day is listed in status
// (old_open_days) for the supervisor, who closes it by name. It made every close naming no
// day day_to_close_ambiguous until someone named 2000-01-01.
func TestCloseWithADayLongPast(t *testing.T) {
	t.Parallel()
	a := newOfflineAgent(t, outbox.Caps{})
	right := a.clock.Now() // 2026-11-29 10:00 Shanghai
	a.clock.Add(time.Date(2000, 1, 1, 8, 0, 0, 0, shanghai).Sub(right))
	a.sellMilk()                                        // on business day 2000-01-01, by the till's clock
	a.clock.Add(right.Sub(a.clock.Now()) + time.Minute) // NTP: 2026-11-29 10:01
	a.sellMilk()
	a.clock.Add(12 * time.Hour) // 22:01: the end-of-day close
	closed := a.dayClose("")    // 2026-11-29 and 2000-01-01 open
	if closed.Totals.BusinessDate != "2026-11-29" || closed.Totals.SaleCount != 1 {
		t.Fatalf("the close declared %s with %d sales, want 2026-11-29 with 1", closed.Totals.BusinessDate, closed.Totals.SaleCount)
	}
	st := a.status()
	if len(st.OldOpenDays) != 1 || st.OldOpenDays[0] != "2000-01-01" {
		t.Fatalf("status lists old open days %v, want [2000-01-01]", st.OldOpenDays)
	}
	closed = a.dayClose("2000-01-01")
	if closed.Totals.SaleCount != 1 {
		t.Errorf("the supervisor's close of 2000-01-01: %d sales, want 1", closed.Totals.SaleCount)
	}
	st = a.status()
	if len(st.OldOpenDays) != 0 {
		t.Errorf("status lists old open days %v once they are closed", st.OldOpenDays)
	}
}
