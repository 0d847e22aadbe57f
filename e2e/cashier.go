package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/terminal-agent/client"
)

// Cashier drives a terminal-agent's local API like a POS app, through the agent's Go client,
// and remembers every event that was answered 2xx, to check later that each reached the
// store exactly once.
type Cashier struct {
	Base string
	// Supervisor, if set, approves each refund RefundOne makes (one made offline needs one).
	Supervisor *client.Supervisor
	token      string
	http       *http.Client   // records every answer (recorder)
	agent      *client.Client // over http

	mu     sync.Mutex
	ok     map[string]bool // event keys answered 2xx
	sales  []string        // completed sale ids
	counts map[int]int     // answers by status
	codes  map[string]int  // error answers by code
}

// NewCashier returns a cashier for the agent API at addr (host:port), with the agent's API
// token (Agent.Token, or client.ReadToken of its file).
func NewCashier(addr, token string) *Cashier {
	c := &Cashier{Base: "http://" + addr, token: token, ok: map[string]bool{}, counts: map[int]int{}, codes: map[string]int{}}
	c.http = &http.Client{Timeout: 10 * time.Second, Transport: recorder{c}}
	c.agent = &client.Client{BaseURL: c.Base, HTTPClient: c.http, Token: token}
	return c
}

// Client returns the cashier's client of the agent. Its answers are counted, and the events
// it gets answered 2xx remembered, as the cashier's own are.
func (c *Cashier) Client() *client.Client { return c.agent }

// recorder is the cashier's transport: it counts every answer by status and remembers the
// event of each 2xx answer, whichever call it answers.
type recorder struct{ c *Cashier }

func (r recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	res, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	b, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		return nil, err
	}
	res.Body = io.NopCloser(bytes.NewReader(b))
	r.c.record(res.StatusCode, b)
	return res, nil
}

// record counts an answer and, for a 2xx one, remembers the event it names.
func (c *Cashier) record(status int, body []byte) {
	var a struct {
		Event *client.EventRef `json:"event"`
	}
	var e client.ErrorBody
	if status < 300 {
		json.Unmarshal(body, &a)
	} else {
		json.Unmarshal(body, &e)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.counts[status]++
	if e.Code != "" {
		c.codes[e.Code]++
	}
	if a.Event != nil {
		c.ok[a.Event.Key] = true
	}
}

// OK returns the keys of the events answered 2xx so far.
func (c *Cashier) OK() map[string]bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]bool, len(c.ok))
	for k := range c.ok {
		out[k] = true
	}
	return out
}

// Counts returns how many answers of each HTTP status the cashier got.
func (c *Cashier) Counts() map[int]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[int]int{}
	for k, v := range c.counts {
		out[k] = v
	}
	return out
}

// Codes returns how many error answers of each code (out_of_stock, rate_limited, …) the
// cashier got.
func (c *Cashier) Codes() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for k, v := range c.codes {
		out[k] = v
	}
	return out
}

// Call sends one request as written, with a fresh Idempotency-Key, for what the client's
// methods do not send (a raw body, say). err is set when no answer arrived (the agent may or
// may not have committed the request).
func (c *Cashier) Call(method, path, body string) (int, []byte, error) {
	req, err := http.NewRequest(method, c.Base+path, strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Idempotency-Key", string(client.NewKey()))
	req.Header.Set("Authorization", "Bearer "+c.token)
	if method != http.MethodGet {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := c.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return res.StatusCode, b, err
}

// lost reports whether err means that no answer arrived.
func lost(err error) bool {
	var e *client.Error
	return err != nil && !errors.As(err, &e)
}

// failed reports whether err means that no answer arrived or the agent failed (5xx); a 4xx
// (a live refusal, a cap) is a normal outcome of a cashier's step.
func failed(err error) bool {
	var e *client.Error
	return lost(err) || errors.As(err, &e) && e.Status >= 500
}

// Sale runs one whole sale of the given SKUs (quantity 1 + len(sku)%3 each) paid by method
// (cash pays 10.00 over the total, so there is change). It returns an error only when the
// agent did not answer or failed; a 4xx (a live refusal, a cap) is a normal outcome.
func (c *Cashier) Sale(skus []string, method string) error {
	ctx := context.Background()
	open, err := c.agent.OpenSale(ctx, client.NewKey())
	if err != nil {
		return fmt.Errorf("open sale: %w", err)
	}
	id := open.Sale.ID
	for _, sku := range skus {
		line := client.AddLineRequest{SKU: sku, Qty: int64(1 + len(sku)%3)}
		if _, err := c.agent.AddLine(ctx, client.NewKey(), id, line); failed(err) {
			return fmt.Errorf("add line: %w", err)
		}
	}
	s, err := c.agent.Sale(ctx, id)
	if lost(err) {
		return err
	}
	if err != nil {
		s = open // no lines to pay for
	}
	if s.Sale.Total == 0 {
		if _, err := c.agent.Cancel(ctx, client.NewKey(), id); lost(err) {
			return err
		}
		return nil
	}
	pay := client.PayRequest{Method: method, Amount: s.Sale.Total.String(), Reference: "REF-" + id}
	if method == wire.MethodCash {
		pay = client.PayRequest{Method: wire.MethodCash, Amount: (s.Sale.Total + 1000).String()}
	}
	_, err = c.agent.Pay(ctx, client.NewKey(), id, pay)
	if failed(err) {
		return fmt.Errorf("pay: %w", err)
	}
	if err == nil {
		c.mu.Lock()
		c.sales = append(c.sales, id)
		c.mu.Unlock()
	}
	return nil
}

// RefundOne refunds one unit of the first line of a completed sale of this cashier's, if any.
func (c *Cashier) RefundOne(i int) error {
	c.mu.Lock()
	if len(c.sales) == 0 {
		c.mu.Unlock()
		return nil
	}
	id := c.sales[i%len(c.sales)]
	c.mu.Unlock()
	_, err := c.agent.Refund(context.Background(), client.NewKey(), client.RefundRequest{SaleID: id,
		Lines: []client.RefundLine{{Line: 1, Qty: 1}}, Method: wire.MethodCash, Supervisor: c.Supervisor})
	if failed(err) {
		return fmt.Errorf("refund: %w", err)
	}
	return nil
}

// Status returns the agent's status.
func (c *Cashier) Status() (client.StatusAnswer, error) {
	return c.agent.Status(context.Background())
}

// WaitDrained waits until the agent is online with no backlog.
func (c *Cashier) WaitDrained(ctx context.Context) (client.StatusAnswer, error) {
	for {
		st, err := c.Status()
		if err == nil && st.Online && st.Backlog == 0 {
			return st, nil
		}
		select {
		case <-ctx.Done():
			return st, fmt.Errorf("agent %s not drained: %+v (%v)", c.Base, st, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// WaitCatalog waits until the agent has a catalog.
func (c *Cashier) WaitCatalog(ctx context.Context) error {
	for {
		if st, err := c.Status(); err == nil && st.CatalogVersion > 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("agent %s never received the catalog", c.Base)
		case <-time.After(25 * time.Millisecond):
		}
	}
}

// ReadyCashier returns a cashier of the agent whose API is at addr (with its token) once
// the agent holds a catalog, waiting at most within for it.
func ReadyCashier(ctx context.Context, addr, token string, within time.Duration) (*Cashier, error) {
	c := NewCashier(addr, token)
	wctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	return c, c.WaitCatalog(wctx)
}

// DayTotals returns the agent's own totals for a business date.
func (c *Cashier) DayTotals(date string) (wire.DayClosePayload, error) {
	t, err := c.agent.DayTotals(context.Background(), date)
	return t.DayClosePayload, err
}

// Sales returns the ids of the sales this cashier completed (their payment answered 2xx).
func (c *Cashier) Sales() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.sales...)
}
