package hqview

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
)

// Client calls the page's API, for Go programs (the demo, tests) that read what HQ finance
// sees.
type Client struct {
	BaseURL    string // http://host:port of hq-sync serve
	Token      string // the viewer token
	HTTPClient *http.Client
}

// Overview returns GET /v1/view/overview for date ("": the latest date a store declared).
func (c *Client) Overview(ctx context.Context, date string) (Overview, error) {
	var o Overview
	q := url.Values{}
	if date != "" {
		q.Set("date", date)
	}
	return o, c.get(ctx, OverviewPath, q, &o)
}

// Txns returns GET /v1/view/txns: a store's transactions of a date.
func (c *Client) Txns(ctx context.Context, store, date string) (Txns, error) {
	var t Txns
	return t, c.get(ctx, TxnsPath, url.Values{"store": {store}, "date": {date}}, &t)
}

func (c *Client) get(ctx context.Context, path string, q url.Values, out any) error {
	u := c.BaseURL + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.Token)
	hc := c.HTTPClient
	if hc == nil {
		hc = http.DefaultClient
	}
	res, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, 64<<20))
	if err != nil {
		return err
	}
	if res.StatusCode != http.StatusOK {
		var p Problem
		json.Unmarshal(b, &p)
		return fmt.Errorf("GET %s: %d %s: %s", path, res.StatusCode, p.Code, p.Detail)
	}
	return json.Unmarshal(b, out)
}
