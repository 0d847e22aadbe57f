// Package client is the Go client of the store-server's manager API (docs/store-server.md,
// "Manager API"): the request and answer types of every route, and a Client with one method
// per route. The store-server serves the API with these same types, so a back-office
// program written in Go, posgate's end-to-end harness and the demo speak it exactly as the
// store does.
//
// It must never import the store's own packages (ledger, gate, ingest, api), SQLite, Redis
// or MQTT: a program that imports it gets net/http and posgate's small shared packages
// (money, wire) only.
//
// Errors: an answer other than 2xx is an *Error carrying the HTTP status and the store's
// stable code (use errors.As). Any other error means no answer arrived, or none the client
// could read: a change may or may not have been made. Each can be sent again as it was:
// adjustments and counts are idempotent by their ID, a resolution sent again is answered
// with the first and Applied false, and limits set again are the same limits (a promo set
// again runs from then). A catalog import is the exception, each a new version: read the
// catalog's version (Catalog) before importing again.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/posgate/posgate/internal/wire"
)

// DefaultBaseURL is where the store-server serves the API unless told otherwise
// (--api-listen).
const DefaultBaseURL = "http://127.0.0.1:8282"

// maxAnswer bounds the answer body the client reads (a backup is streamed, not read).
const maxAnswer = 64 << 20

// Client calls one store-server's manager API. The zero value is not usable: set BaseURL
// and Token. A Client is safe for concurrent use.
type Client struct {
	// BaseURL is the API, such as DefaultBaseURL or https://store-17.example:8282, without a
	// trailing path.
	BaseURL string
	// HTTPClient sends the requests; nil uses http.DefaultClient. Give it a timeout, or
	// give each call a context with a deadline (Backup's download can take a while).
	HTTPClient *http.Client
	// Token is the manager token (--api-token), sent with every request as
	// "Authorization: Bearer <Token>".
	Token string
}

// Error is an answer other than 2xx: its HTTP status and the store's problem. The code is
// stable (docs/store-server.md names them); the message is for the manager. An answer that
// was not a problem (not from the store-server, say a proxy's) has no code, and its message
// is the start of the body.
type Error struct {
	Status  int    // the HTTP status
	Code    string // the store's stable code, such as "unauthorized" or "unknown_sku"
	Message string // the problem's detail
}

// Error implements error.
func (e *Error) Error() string {
	if e.Code == "" {
		return fmt.Sprintf("store-server: %d %s", e.Status, e.Message)
	}
	return fmt.Sprintf("store-server: %d %s: %s", e.Status, e.Code, e.Message)
}

// Health says whether the store-server is up, and its gate's mode (GET /healthz, which
// needs no token).
func (c *Client) Health(ctx context.Context) (HealthAnswer, error) {
	var a HealthAnswer
	return a, c.do(ctx, http.MethodGet, "/healthz", nil, &a)
}

// Mode returns the store, the gate's mode, ingest's counters and the room on the ledger's
// disk (GET /v1/mode).
func (c *Client) Mode(ctx context.Context) (ModeAnswer, error) {
	var a ModeAnswer
	return a, c.do(ctx, http.MethodGet, "/v1/mode", nil, &a)
}

// Stock returns every SKU's stock in the ledger and in Redis (GET /v1/stock); with proof,
// each also proven from the ledger's stock moves, which reads the store's whole history.
func (c *Client) Stock(ctx context.Context, proof bool) (StockAnswer, error) {
	var a StockAnswer
	path := "/v1/stock"
	if !proof {
		path += "?proof=0"
	}
	return a, c.do(ctx, http.MethodGet, path, nil, &a)
}

// Adjust changes a SKU's stock (POST /v1/stock/adjust). The same ID with other content is a
// 422 *Error (adjustment_conflict), and the first adjustment stands.
func (c *Client) Adjust(ctx context.Context, req AdjustRequest) (AdjustAnswer, error) {
	var a AdjustAnswer
	return a, c.do(ctx, http.MethodPost, "/v1/stock/adjust", jsonBody(req), &a)
}

// Count books a shelf count (POST /v1/stock/count): the ledger books the difference from its
// own quantity as an adjustment. Use it rather than an Adjust by a delta worked out from
// the stock shown, which counts twice what sold in between.
func (c *Client) Count(ctx context.Context, req CountRequest) (CountAnswer, error) {
	var a CountAnswer
	return a, c.do(ctx, http.MethodPost, "/v1/stock/count", jsonBody(req), &a)
}

// Catalog returns the store's current catalog (GET /v1/catalog).
func (c *Client) Catalog(ctx context.Context) (wire.Catalog, error) {
	var a wire.Catalog
	return a, c.do(ctx, http.MethodGet, "/v1/catalog", nil, &a)
}

// ImportCatalog replaces the store's catalog with items, as a new version published to the
// terminals (POST /v1/catalog, JSON). A refused catalog is a 400 *Error, and the current
// one stays.
func (c *Client) ImportCatalog(ctx context.Context, items []wire.CatalogItem) (ImportAnswer, error) {
	if items == nil {
		items = []wire.CatalogItem{}
	}
	return c.importCatalog(ctx, jsonBody(struct {
		Items []wire.CatalogItem `json:"items"`
	}{items}))
}

// ImportCatalogCSV replaces the store's catalog with a CSV file's (columns sku, name,
// price and optionally barcode, in any order, under a header line), as ImportCatalog does.
func (c *Client) ImportCatalogCSV(ctx context.Context, csv io.Reader) (ImportAnswer, error) {
	return c.importCatalog(ctx, &body{ctype: "text/csv", r: csv})
}

func (c *Client) importCatalog(ctx context.Context, b *body) (ImportAnswer, error) {
	var a ImportAnswer
	return a, c.do(ctx, http.MethodPost, "/v1/catalog", b, &a)
}

// Totals returns a business day of the store and of each terminal, from the ledger, from
// Redis and as the terminals declared it (GET /v1/totals); date is YYYY-MM-DD, or empty for
// today in the store's zone.
func (c *Client) Totals(ctx context.Context, date string) (TotalsAnswer, error) {
	var a TotalsAnswer
	return a, c.do(ctx, http.MethodGet, "/v1/totals"+query(date, false), nil, &a)
}

// Oversells lists the oversell exceptions of a business date (YYYY-MM-DD; empty: every
// date), the open ones, or with all the resolved ones too (GET /v1/oversells).
func (c *Client) Oversells(ctx context.Context, date string, all bool) (OversellsAnswer, error) {
	var a OversellsAnswer
	return a, c.do(ctx, http.MethodGet, "/v1/oversells"+query(date, all), nil, &a)
}

// ResolveOversell closes one oversell exception with what explained it (POST
// /v1/oversells/resolve).
func (c *Client) ResolveOversell(ctx context.Context, req ResolveOversellRequest) (ResolveOversellAnswer, error) {
	var a ResolveOversellAnswer
	return a, c.do(ctx, http.MethodPost, "/v1/oversells/resolve", jsonBody(req), &a)
}

// RefundExceptions lists the refund exceptions of a business date (empty: every date), the
// open ones, or with all the resolved ones too (GET /v1/refund-exceptions).
func (c *Client) RefundExceptions(ctx context.Context, date string, all bool) (RefundExceptionsAnswer, error) {
	var a RefundExceptionsAnswer
	return a, c.do(ctx, http.MethodGet, "/v1/refund-exceptions"+query(date, all), nil, &a)
}

// ResolveRefundException closes the refund exception of one refund with what explained it
// (POST /v1/refund-exceptions/resolve).
func (c *Client) ResolveRefundException(ctx context.Context, req ResolveRefundRequest) (ResolveRefundAnswer, error) {
	var a ResolveRefundAnswer
	return a, c.do(ctx, http.MethodPost, "/v1/refund-exceptions/resolve", jsonBody(req), &a)
}

// Parked lists the events the store refused for good, the most recently parked first: the
// open ones, or with all the resolved ones too (GET /v1/parked).
func (c *Client) Parked(ctx context.Context, all bool) (ParkedAnswer, error) {
	var a ParkedAnswer
	return a, c.do(ctx, http.MethodGet, "/v1/parked"+query("", all), nil, &a)
}

// ResolveParked closes one parked event with what explained it (POST /v1/parked/resolve).
func (c *Client) ResolveParked(ctx context.Context, req ResolveParkedRequest) (ResolveParkedAnswer, error) {
	var a ResolveParkedAnswer
	return a, c.do(ctx, http.MethodPost, "/v1/parked/resolve", jsonBody(req), &a)
}

// Terminals returns every terminal the store knows: presence, last event, reported backlog
// and clock against the store's (GET /v1/terminals).
func (c *Client) Terminals(ctx context.Context) (TerminalsAnswer, error) {
	var a TerminalsAnswer
	return a, c.do(ctx, http.MethodGet, "/v1/terminals", nil, &a)
}

// History returns the store's samples of the last hour (GET /v1/charts/history).
func (c *Client) History(ctx context.Context) (HistoryAnswer, error) {
	var a HistoryAnswer
	return a, c.do(ctx, http.MethodGet, "/v1/charts/history", nil, &a)
}

// SalesChart returns sales and takings per minute of a business date ("": today), beside
// the last trading day before it (GET /v1/charts/sales).
func (c *Client) SalesChart(ctx context.Context, date string) (SalesChart, error) {
	var a SalesChart
	path := "/v1/charts/sales"
	if date != "" {
		path += "?date=" + url.QueryEscape(date)
	}
	return a, c.do(ctx, http.MethodGet, path, nil, &a)
}

// HQ returns how far headquarters has the store's rows, from the state of the store's
// uploader (GET /v1/hq).
func (c *Client) HQ(ctx context.Context) (HQAnswer, error) {
	var a HQAnswer
	return a, c.do(ctx, http.MethodGet, "/v1/hq", nil, &a)
}

// Limits returns the live limits and the promo running now (GET /v1/limits).
func (c *Client) Limits(ctx context.Context) (LimitsAnswer, error) {
	var a LimitsAnswer
	return a, c.do(ctx, http.MethodGet, "/v1/limits", nil, &a)
}

// SetLimits sets the live limits (PUT /v1/limits); every field must be positive.
func (c *Client) SetLimits(ctx context.Context, l Limits) (LimitsAnswer, error) {
	var a LimitsAnswer
	return a, c.do(ctx, http.MethodPut, "/v1/limits", jsonBody(l), &a)
}

// Settings returns the store's settings for its terminals: its supervisors (names only) and
// refund rules (GET /v1/settings).
func (c *Client) Settings(ctx context.Context) (SettingsAnswer, error) {
	var a SettingsAnswer
	return a, c.do(ctx, http.MethodGet, "/v1/settings", nil, &a)
}

// SetSupervisor adds a supervisor, or gives one a new PIN (PUT /v1/settings/supervisors/{name}).
// The store keeps and publishes only the PIN's hash.
func (c *Client) SetSupervisor(ctx context.Context, name, pin string) (SettingsAnswer, error) {
	var a SettingsAnswer
	return a, c.do(ctx, http.MethodPut, "/v1/settings/supervisors/"+url.PathEscape(name), jsonBody(SupervisorRequest{PIN: pin}), &a)
}

// RemoveSupervisor removes a supervisor (DELETE /v1/settings/supervisors/{name}).
func (c *Client) RemoveSupervisor(ctx context.Context, name string) (SettingsAnswer, error) {
	var a SettingsAnswer
	return a, c.do(ctx, http.MethodDelete, "/v1/settings/supervisors/"+url.PathEscape(name), nil, &a)
}

// SetRefundRules sets the refund amount above which a supervisor is needed and whether
// refunds may be made offline (PUT /v1/settings/refunds).
func (c *Client) SetRefundRules(ctx context.Context, req RefundRules) (SettingsAnswer, error) {
	var a SettingsAnswer
	return a, c.do(ctx, http.MethodPut, "/v1/settings/refunds", jsonBody(req), &a)
}

// SetPromo multiplies every limit for a while (POST /v1/promo).
func (c *Client) SetPromo(ctx context.Context, req PromoRequest) (LimitsAnswer, error) {
	var a LimitsAnswer
	return a, c.do(ctx, http.MethodPost, "/v1/promo", jsonBody(req), &a)
}

// Backup downloads a backup of the store (GET /v1/backup): a tar of the ledger, copied as
// of one commit while the store trades, and the catalog's files, to unpack into an empty
// data directory. The caller reads it to the end and closes it; a download cut short ends
// in an error other than io.EOF (the store sends the length ahead). One backup is made at a
// time (409 backup_running); the store needs room for a copy of the ledger (503
// backup_no_room).
func (c *Client) Backup(ctx context.Context) (io.ReadCloser, error) {
	res, err := c.send(ctx, http.MethodGet, "/v1/backup", nil)
	if err != nil {
		return nil, err
	}
	if res.StatusCode < 200 || res.StatusCode > 299 {
		defer res.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(res.Body, maxAnswer))
		return nil, answerError(res.StatusCode, b)
	}
	return res.Body, nil
}

// body is a request body and its content type.
type body struct {
	ctype string
	r     io.Reader
	err   error // the body could not be made
}

// jsonBody is v as a JSON request body.
func jsonBody(v any) *body {
	b, err := json.Marshal(v)
	return &body{ctype: "application/json", r: bytes.NewReader(b), err: err}
}

// query is the query of a list's date and all.
func query(date string, all bool) string {
	q := url.Values{}
	if date != "" {
		q.Set("date", date)
	}
	if all {
		q.Set("all", "1")
	}
	if len(q) == 0 {
		return ""
	}
	return "?" + q.Encode()
}

// send sends one request with the token and b (nil: none), and returns the answer.
func (c *Client) send(ctx context.Context, method, path string, b *body) (*http.Response, error) {
	var rd io.Reader
	if b != nil {
		if b.err != nil {
			return nil, fmt.Errorf("store-server: %s %s: %w", method, path, b.err)
		}
		rd = b.r
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(c.BaseURL, "/")+path, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	if b != nil {
		req.Header.Set("Content-Type", b.ctype)
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	hc := c.HTTPClient
	if hc == nil {
		hc = http.DefaultClient
	}
	return hc.Do(req)
}

// do sends one request and decodes a 2xx answer into out; any other answer is an *Error.
func (c *Client) do(ctx context.Context, method, path string, b *body, out any) error {
	res, err := c.send(ctx, method, path, b)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	ab, err := io.ReadAll(io.LimitReader(res.Body, maxAnswer))
	if err != nil {
		return fmt.Errorf("store-server: %s %s: read the answer: %w", method, path, err)
	}
	if res.StatusCode < 200 || res.StatusCode > 299 {
		return answerError(res.StatusCode, ab)
	}
	if err := json.Unmarshal(ab, out); err != nil {
		return fmt.Errorf("store-server: %s %s: %d answer: %w", method, path, res.StatusCode, err)
	}
	return nil
}

// answerError is the *Error of an answer with status and body.
func answerError(status int, b []byte) *Error {
	var p Problem
	if json.Unmarshal(b, &p) == nil && p.Code != "" {
		return &Error{Status: status, Code: p.Code, Message: p.Detail}
	}
	e := &Error{Status: status, Message: http.StatusText(status)}
	if s := strings.TrimSpace(string(b)); s != "" {
		if len(s) > 200 {
			s = s[:200] + "…"
		}
		e.Message += ": " + s
	}
	return e
}
