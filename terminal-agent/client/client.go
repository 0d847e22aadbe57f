// Package client is the Go client of the terminal-agent's local HTTP API
// (docs/terminal-api.md): the request and answer types of every route, and a Client with one
// method per route. The agent serves the API with these same types, so a POS app written in
// Go, posgate's end-to-end harness and the demo speak it exactly as the agent does.
//
// It must never import the agent's own packages (outbox, uplink, api), SQLite or MQTT: a
// POS app that imports it gets net/http and posgate's small shared packages (money, wire)
// only. And it never sends a request again on its own: whether the agent committed a
// state-changing request is known only from its answer, and only the caller can decide to
// send it again, with the same Idempotency-Key.
//
// Errors: an answer other than 2xx is an *Error carrying the HTTP status and the agent's
// stable code (use errors.As). Any other error means no answer arrived, or none the client
// could read: for a state-changing request the agent may or may not have committed it.
// Sending it again with the same key is safe: the agent answers a request it has committed
// with its first answer and changes nothing.
package client

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

// DefaultBaseURL is where the agent serves the API unless told otherwise (--listen).
const DefaultBaseURL = "http://127.0.0.1:8181"

// maxAnswer bounds the answer body the client reads.
const maxAnswer = 16 << 20

// Client calls one terminal-agent's local API. The zero value is not usable: set BaseURL.
// A Client is safe for concurrent use.
type Client struct {
	// BaseURL is the agent's API, such as DefaultBaseURL, without a trailing path.
	BaseURL string
	// HTTPClient sends the requests; nil uses http.DefaultClient. Give it a timeout: a
	// state-changing request may wait for the store's verdict (300 ms by default).
	HTTPClient *http.Client
	// Token is sent with every request as "Authorization: Bearer <Token>": the agent's
	// per-install API token (ReadToken), without which it answers only Health.
	Token string
}

// Key is an Idempotency-Key. Send a fresh one (NewKey) with every state-changing request,
// and the same one with each retry of it: the agent then answers the retry with the first
// answer and changes nothing. An empty key sends none, and the agent cannot tell a retry
// from a second request.
type Key string

// NewKey returns a fresh Idempotency-Key: a random UUID (version 4).
func NewKey() Key {
	var b [16]byte
	rand.Read(b[:]) // never returns an error (crypto/rand)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return Key(fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16]))
}

// Error is an answer other than 2xx: its HTTP status and the agent's error body. The code
// is stable (docs/terminal-api.md lists them); the message is for the cashier. An answer
// that carried no error body (not from the agent, say a proxy's) has no code, and its
// message is the start of the body.
type Error struct {
	Status int
	ErrorBody
}

// Error implements error.
func (e *Error) Error() string {
	if e.Code == "" {
		return fmt.Sprintf("terminal-agent: %d %s", e.Status, e.Message)
	}
	return fmt.Sprintf("terminal-agent: %d %s: %s", e.Status, e.Code, e.Message)
}

// RetryAfter is how long to wait before the same request (with the same key) is sent again
// after a 429: zero when the answer did not say.
func (e *Error) RetryAfter() time.Duration {
	return time.Duration(e.RetryAfterMs) * time.Millisecond
}

// OpenSale opens a sale (POST /v1/sales). The answer is a 201 with the empty sale. An error
// other than *Error leaves it unknown whether the sale was opened: send the request again
// with the same key.
func (c *Client) OpenSale(ctx context.Context, key Key) (SaleAnswer, error) {
	var a SaleAnswer
	return a, c.do(ctx, http.MethodPost, "/v1/sales", key, nil, &a)
}

// Sale returns a sale as it stands (GET /v1/sales/{id}).
func (c *Client) Sale(ctx context.Context, saleID string) (SaleAnswer, error) {
	var a SaleAnswer
	return a, c.do(ctx, http.MethodGet, "/v1/sales/"+url.PathEscape(saleID), "", nil, &a)
}

// AddLine adds an item to an open sale (POST /v1/sales/{id}/lines); the answer names the
// line (Line) and carries the scan's event. Online it waits for the store's verdict, which
// may refuse the line (*Error, 409 out_of_stock, 429 rate_limited). An error other than
// *Error leaves it unknown whether the line was added: send it again with the same key.
func (c *Client) AddLine(ctx context.Context, key Key, saleID string, req AddLineRequest) (SaleAnswer, error) {
	var a SaleAnswer
	return a, c.do(ctx, http.MethodPost, "/v1/sales/"+url.PathEscape(saleID)+"/lines", key, req, &a)
}

// RemoveLine removes a line from an open sale before any payment (DELETE
// /v1/sales/{id}/lines/{line}). An error other than *Error leaves it unknown whether the
// line was removed: send it again with the same key.
func (c *Client) RemoveLine(ctx context.Context, key Key, saleID string, line int) (SaleAnswer, error) {
	var a SaleAnswer
	path := "/v1/sales/" + url.PathEscape(saleID) + "/lines/" + strconv.Itoa(line)
	return a, c.do(ctx, http.MethodDelete, path, key, nil, &a)
}

// Pay takes one payment on an open sale (POST /v1/sales/{id}/payments). When the payments
// cover the total the sale completes and the answer carries its sale event. An error other
// than *Error leaves it unknown whether the payment was taken: send it again with the same
// key, never with a new one, or the payment may be taken twice.
func (c *Client) Pay(ctx context.Context, key Key, saleID string, req PayRequest) (SaleAnswer, error) {
	var a SaleAnswer
	return a, c.do(ctx, http.MethodPost, "/v1/sales/"+url.PathEscape(saleID)+"/payments", key, req, &a)
}

// Cancel cancels an open sale (POST /v1/sales/{id}/cancel); payments taken on it are
// listed as voided, to be reversed on the payment device. An error other than *Error leaves
// it unknown whether the sale was cancelled: send it again with the same key.
func (c *Client) Cancel(ctx context.Context, key Key, saleID string) (SaleAnswer, error) {
	var a SaleAnswer
	return a, c.do(ctx, http.MethodPost, "/v1/sales/"+url.PathEscape(saleID)+"/cancel", key, nil, &a)
}

// Refund refunds lines of a completed sale (POST /v1/refunds); the answer is a 201. An
// error other than *Error leaves it unknown whether the refund was made: send it again with
// the same key, never with a new one, or the money may be refunded twice.
func (c *Client) Refund(ctx context.Context, key Key, req RefundRequest) (RefundAnswer, error) {
	var a RefundAnswer
	return a, c.do(ctx, http.MethodPost, "/v1/refunds", key, req, &a)
}

// DayClose closes a business day at this terminal and queues its totals for the store
// (POST /v1/day-close). An error other than *Error leaves it unknown whether the day was
// closed: send it again with the same key.
func (c *Client) DayClose(ctx context.Context, key Key, req DayCloseRequest) (DayCloseAnswer, error) {
	var a DayCloseAnswer
	return a, c.do(ctx, http.MethodPost, "/v1/day-close", key, req, &a)
}

// DayReopen is a supervisor's reopen of a day closed at this terminal (POST
// /v1/day-close/reopen). An error other than *Error leaves it unknown whether the day was
// reopened: send it again with the same key.
func (c *Client) DayReopen(ctx context.Context, key Key, req DayReopenRequest) (DayReopenAnswer, error) {
	var a DayReopenAnswer
	return a, c.do(ctx, http.MethodPost, "/v1/day-close/reopen", key, req, &a)
}

// DayTotals returns a business day's totals at this terminal as they stand, with its close
// and reopens (GET /v1/day-totals); date is YYYY-MM-DD, or empty for today in the
// terminal's zone.
func (c *Client) DayTotals(ctx context.Context, date string) (DayTotalsAnswer, error) {
	var a DayTotalsAnswer
	path := "/v1/day-totals"
	if date != "" {
		path += "?date=" + url.QueryEscape(date)
	}
	return a, c.do(ctx, http.MethodGet, path, "", nil, &a)
}

// Health reports whether the agent is up (GET /v1/health, which needs no token).
func (c *Client) Health(ctx context.Context) error {
	var a struct {
		Status string `json:"status"`
	}
	return c.do(ctx, http.MethodGet, "/v1/health", "", nil, &a)
}

// ReadToken reads the agent's API token from its file: <data-dir>/api-token, or the file
// given to the agent with --api-token-file.
func ReadToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("terminal-agent API token: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("terminal-agent API token: %s is empty", path)
	}
	return tok, nil
}

// Status returns the terminal's sync state (GET /v1/status).
func (c *Client) Status(ctx context.Context) (StatusAnswer, error) {
	var a StatusAnswer
	return a, c.do(ctx, http.MethodGet, "/v1/status", "", nil, &a)
}

// Parked lists the events the store rejected, with its reasons (GET /v1/parked).
func (c *Client) Parked(ctx context.Context) (ParkedAnswer, error) {
	var a ParkedAnswer
	return a, c.do(ctx, http.MethodGet, "/v1/parked", "", nil, &a)
}

// Event returns one event's delivery state (GET /v1/events/{seq}); a pruned or unknown
// event is a 404 *Error (event_not_found).
func (c *Client) Event(ctx context.Context, seq int64) (EventState, error) {
	var a EventState
	return a, c.do(ctx, http.MethodGet, "/v1/events/"+strconv.FormatInt(seq, 10), "", nil, &a)
}

// do sends one request with body (nil: none) as JSON and decodes a 2xx answer into out;
// any other answer is an *Error.
func (c *Client) do(ctx context.Context, method, path string, key Key, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("terminal-agent: %s %s: %w", method, path, err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(c.BaseURL, "/")+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	if method != http.MethodGet {
		// Also with no body: the agent refuses a state-changing request of any other type
		// (a form a web page could post across sites).
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", string(key))
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	hc := c.HTTPClient
	if hc == nil {
		hc = http.DefaultClient
	}
	res, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, maxAnswer))
	if err != nil {
		return fmt.Errorf("terminal-agent: %s %s: read the answer: %w", method, path, err)
	}
	if res.StatusCode < 200 || res.StatusCode > 299 {
		return answerError(res.StatusCode, b)
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("terminal-agent: %s %s: %d answer: %w", method, path, res.StatusCode, err)
	}
	return nil
}

// answerError is the *Error of an answer with status and body.
func answerError(status int, body []byte) *Error {
	e := &Error{Status: status}
	if json.Unmarshal(body, &e.ErrorBody) == nil && e.Code != "" {
		return e
	}
	e.ErrorBody = ErrorBody{Message: http.StatusText(status)}
	if s := strings.TrimSpace(string(body)); s != "" {
		if len(s) > 200 {
			s = s[:200] + "…"
		}
		e.Message += ": " + s
	}
	return e
}
