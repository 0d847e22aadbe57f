package client

import (
	"context"
	"net/http"
	"time"

	"github.com/posgate/posgate/internal/money"
)

// PriceException is an offline sale that charged, for one SKU, another unit price than the
// store's catalog held when the ledger recorded it: the customer paid what the till asked,
// and the sale stands. Code is price_changed (the till priced from an older catalog version:
// the price changed while it was offline) or price_mismatch (it names the store's version, or
// none: a price the store never set at that version).
type PriceException struct {
	Terminal string `json:"terminal"`
	Seq      int64  `json:"seq"` // the sale's event
	SKU      string `json:"sku"`
	Code     string `json:"code"`
	// Qty units of the SKU were sold at another price; SoldPrice is the first such line's
	// unit price, CatalogPrice the store's; Difference is Σ (catalog − sold) × qty over
	// them (positive: the till charged less than the catalog).
	Qty          int64     `json:"qty"`
	SoldPrice    money.Fen `json:"sold_price"`
	CatalogPrice money.Fen `json:"catalog_price"`
	Difference   money.Fen `json:"difference"`
	// SaleVersion is the catalog version the sale names, StoreVersion the store's it was
	// held to.
	SaleVersion  int64     `json:"sale_catalog_version"`
	StoreVersion int64     `json:"store_catalog_version"`
	At           time.Time `json:"at"`
	BusinessDate string    `json:"business_date"`
	// Resolved says a manager explained the difference: when, and how.
	Resolved   bool      `json:"resolved"`
	ResolvedAt time.Time `json:"resolved_at,omitzero"`
	Resolution string    `json:"resolution,omitempty"`
}

// PriceExceptionsAnswer is the answer of GET /v1/price-exceptions, by date, terminal, seq and
// SKU.
type PriceExceptionsAnswer struct {
	Prices []PriceException `json:"price_exceptions"`
}

// ResolvePriceRequest resolves one price exception with what explained it (POST
// /v1/price-exceptions/resolve).
type ResolvePriceRequest struct {
	Terminal string `json:"terminal"`
	Seq      int64  `json:"seq"`
	SKU      string `json:"sku"`
	Note     string `json:"note"`
}

// ResolvePriceAnswer is the exception as resolved, and whether this request resolved it
// (false: an earlier one did, and its resolution stands).
type ResolvePriceAnswer struct {
	Price   PriceException `json:"price_exception"`
	Applied bool           `json:"applied"`
}

// PriceExceptions lists the price exceptions of a business date (YYYY-MM-DD; empty: every
// date), the open ones, or with all the resolved ones too (GET /v1/price-exceptions).
func (c *Client) PriceExceptions(ctx context.Context, date string, all bool) (PriceExceptionsAnswer, error) {
	var a PriceExceptionsAnswer
	return a, c.do(ctx, http.MethodGet, "/v1/price-exceptions"+query(date, all), nil, &a)
}

// ResolvePrice closes one price exception with what explained it (POST
// /v1/price-exceptions/resolve).
func (c *Client) ResolvePrice(ctx context.Context, req ResolvePriceRequest) (ResolvePriceAnswer, error) {
	var a ResolvePriceAnswer
	return a, c.do(ctx, http.MethodPost, "/v1/price-exceptions/resolve", jsonBody(req), &a)
}
