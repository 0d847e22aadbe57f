package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/terminal-agent/client"
)

// Cashier drives a terminal-agent's local API like a POS app and remembers every event that
// was answered 2xx, to check later that each reached the store exactly once.
type Cashier struct {
	Base   string
	client *http.Client
	n      atomic.Int64

	mu     sync.Mutex
	ok     map[string]bool // event keys answered 2xx
	sales  []string        // completed sale ids
	counts map[int]int     // answers by status
}

// NewCashier returns a cashier for the agent API at addr (host:port).
func NewCashier(addr string) *Cashier {
	return &Cashier{Base: "http://" + addr, client: &http.Client{Timeout: 10 * time.Second},
		ok: map[string]bool{}, counts: map[int]int{}}
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

// Call sends one request with a fresh Idempotency-Key. err is set when no answer arrived
// (the agent may or may not have committed the request).
func (c *Cashier) Call(method, path, body string) (int, []byte, error) {
	token := fmt.Sprintf("tok-%d-%d", time.Now().UnixNano(), c.n.Add(1))
	req, err := http.NewRequest(method, c.Base+path, strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Idempotency-Key", token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := c.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return 0, nil, err
	}
	c.mu.Lock()
	c.counts[res.StatusCode]++
	c.mu.Unlock()
	if res.StatusCode < 300 {
		var a struct {
			Event *client.EventRef `json:"event"`
		}
		json.Unmarshal(b, &a)
		if a.Event != nil {
			c.mu.Lock()
			c.ok[a.Event.Key] = true
			c.mu.Unlock()
		}
	}
	return res.StatusCode, b, nil
}

// Sale runs one whole sale of the given SKUs (quantity 1 + len(sku)%3 each) paid by method
// (cash pays 10.00 over the total, so there is change). It returns an error only when the
// agent did not answer or failed; a 4xx (a live refusal, a cap) is a normal outcome.
func (c *Cashier) Sale(skus []string, method string) error {
	st, b, err := c.Call("POST", "/v1/sales", "")
	if err != nil {
		return err
	}
	if st != http.StatusCreated {
		return fmt.Errorf("open sale: %d %s", st, b)
	}
	var s client.SaleAnswer
	json.Unmarshal(b, &s)
	id := s.Sale.ID
	for _, sku := range skus {
		st, b, err = c.Call("POST", "/v1/sales/"+id+"/lines", fmt.Sprintf(`{"sku":%q,"qty":%d}`, sku, 1+len(sku)%3))
		if err != nil {
			return err
		}
		if st >= 500 {
			return fmt.Errorf("add line: %d %s", st, b)
		}
	}
	if _, b, err = c.Call("GET", "/v1/sales/"+id, ""); err != nil {
		return err
	}
	json.Unmarshal(b, &s)
	if s.Sale.Total == 0 {
		_, _, err = c.Call("POST", "/v1/sales/"+id+"/cancel", "")
		return err
	}
	body := fmt.Sprintf(`{"method":%q,"amount":%q,"reference":"REF-%s"}`, method, s.Sale.Total.String(), id)
	if method == wire.MethodCash {
		body = fmt.Sprintf(`{"method":"cash","amount":%q}`, (s.Sale.Total + 1000).String())
	}
	st, b, err = c.Call("POST", "/v1/sales/"+id+"/payments", body)
	if err != nil {
		return err
	}
	if st >= 500 {
		return fmt.Errorf("pay: %d %s", st, b)
	}
	if st < 300 {
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
	st, b, err := c.Call("POST", "/v1/refunds", fmt.Sprintf(`{"sale_id":%q,"lines":[{"line":1,"qty":1}],"method":"cash"}`, id))
	if err != nil {
		return err
	}
	if st >= 500 {
		return fmt.Errorf("refund: %d %s", st, b)
	}
	return nil
}

// Status returns the agent's status.
func (c *Cashier) Status() (client.StatusAnswer, error) {
	var s client.StatusAnswer
	_, b, err := c.Call("GET", "/v1/status", "")
	if err != nil {
		return s, err
	}
	return s, json.Unmarshal(b, &s)
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

// ReadyCashier returns a cashier of the agent whose API is at addr once the agent holds a
// catalog, waiting at most within for it.
func ReadyCashier(ctx context.Context, addr string, within time.Duration) (*Cashier, error) {
	c := NewCashier(addr)
	wctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	return c, c.WaitCatalog(wctx)
}

// DayTotals returns the agent's own totals for a business date.
func (c *Cashier) DayTotals(date string) (wire.DayClosePayload, error) {
	var t wire.DayClosePayload
	_, b, err := c.Call("GET", "/v1/day-totals?date="+date, "")
	if err != nil {
		return t, err
	}
	return t, json.Unmarshal(b, &t)
}

// Sales returns the ids of the sales this cashier completed (their payment answered 2xx).
func (c *Cashier) Sales() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.sales...)
}
