package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/posgate/posgate/internal/hqwire"
	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/perr"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/client"
)

// Codes of a price exception (client.PriceException).
const (
	// CodePriceChanged: the sale names an older catalog version than the store's: the price
	// changed while the till was offline.
	CodePriceChanged = "price_changed"
	// CodePriceMismatch: the sale names the store's catalog version, a later one or none,
	// and still charged another price: not a price the store set at that version. Live, the
	// store refuses such a sale or scan with this code (ingest).
	CodePriceMismatch = "price_mismatch"
)

// PriceException is, for one SKU of an offline sale, the units sold at another unit price
// than the store's catalog: Record.Prices, written with the sale when it is accepted (one
// price_exceptions row per sale and SKU).
type PriceException struct {
	SKU          string
	Code         string // CodePriceChanged or CodePriceMismatch
	Qty          int64
	SoldPrice    money.Fen // the first such line's unit price
	CatalogPrice money.Fen
	Difference   money.Fen // Σ (catalog − sold) × qty over the lines sold at another price
	SaleVersion  int64
	StoreVersion int64
}

var insPriceExceptions = newInsert("price_exceptions", `terminal, seq, sku, code, qty, sold_price, catalog_price,
	difference, sale_version, store_version, at, business_date`, "")

// priceRows puts the price exception rows of an accepted sale.
func priceRows(rs *rowSet, r *Record, d *decision) {
	for _, x := range r.Prices {
		rs.add(insPriceExceptions, r.Terminal, r.Seq, x.SKU, x.Code, x.Qty, int64(x.SoldPrice), int64(x.CatalogPrice),
			int64(x.Difference), x.SaleVersion, x.StoreVersion, d.at, d.date)
	}
}

const selPriceExceptions = `SELECT terminal, seq, sku, code, qty, sold_price, catalog_price, difference, sale_version,
	store_version, at, business_date, resolved, resolved_at, resolution FROM price_exceptions`

func (l *Ledger) scanPrice(sc interface{ Scan(...any) error }) (client.PriceException, error) {
	var x client.PriceException
	var at, resolvedAt string
	err := sc.Scan(&x.Terminal, &x.Seq, &x.SKU, &x.Code, &x.Qty, &x.SoldPrice, &x.CatalogPrice, &x.Difference,
		&x.SaleVersion, &x.StoreVersion, &at, &x.BusinessDate, &x.Resolved, &resolvedAt, &x.Resolution)
	x.At, x.ResolvedAt = l.parseTime(at), l.parseTime(resolvedAt)
	return x, err
}

// PriceExceptions returns the price exceptions of a business date ("" for every date), by
// date, terminal, seq and SKU: the open ones, or with resolved also those a manager resolved.
func (l *Ledger) PriceExceptions(ctx context.Context, date string, resolved bool) ([]client.PriceException, error) {
	out, err := exceptions(ctx, l, selPriceExceptions, "terminal, seq, sku", date, resolved, l.scanPrice)
	if err != nil {
		return nil, fmt.Errorf("price exceptions: %w", err)
	}
	return out, nil
}

// OpenPriceExceptions counts the price exceptions no manager has resolved yet.
func (l *Ledger) OpenPriceExceptions(ctx context.Context) (int64, error) {
	var n int64
	if err := l.db.R.QueryRowContext(ctx, `SELECT count(*) FROM price_exceptions WHERE resolved = 0`).Scan(&n); err != nil {
		return 0, fmt.Errorf("open price exceptions: %w", err)
	}
	return n, nil
}

// Codes of ResolvePrice's errors.
const (
	CodePriceNotFound           = "price_exception_not_found"
	CodePriceResolutionRequired = "price_resolution_required"
)

// ResolvePrice marks the price exception of (terminal, seq, sku) resolved with the
// manager's note of what explained it, as ResolveOversell does an oversell: resolving a
// resolved one changes nothing and returns it with its first resolution (applied false).
func (l *Ledger) ResolvePrice(ctx context.Context, terminal string, seq int64, sku, note string) (client.PriceException, bool, error) {
	x, applied, err := resolve(ctx, l, "price_exceptions", selPriceExceptions, "terminal = ? AND seq = ? AND sku = ?",
		[]any{terminal, seq, sku}, note, l.scanPrice)
	switch {
	case errors.Is(err, errNoNote):
		return client.PriceException{}, false, perr.New(perr.Invalid, CodePriceResolutionRequired,
			"say what explained the price (1 to %d bytes of UTF-8)", wire.MaxTextLen)
	case errors.Is(err, sql.ErrNoRows):
		return client.PriceException{}, false, perr.New(perr.NotFound, CodePriceNotFound,
			"no price exception of %s by event %s", sku, wire.Key(terminal, seq))
	case err != nil:
		return client.PriceException{}, false, fmt.Errorf("resolve price %s %s: %w", wire.Key(terminal, seq), sku, err)
	}
	return x, applied, nil
}

// priceState reads a price exception's state for HQ (hqwire.ExceptionPrice).
func (r *HQReader) priceState(ctx context.Context, x *hqwire.Exception, at, resolvedAt *string) error {
	var qty, sold, catalog, diff, saleVersion, storeVersion int64
	err := r.tx.QueryRowContext(ctx, `SELECT code, qty, sold_price, catalog_price, difference, sale_version,
		store_version, at, resolved, resolved_at, resolution FROM price_exceptions WHERE terminal = ? AND seq = ? AND sku = ?`,
		x.Terminal, x.Seq, x.SKU).Scan(&x.Code, &qty, &sold, &catalog, &diff, &saleVersion, &storeVersion, at, &x.Resolved,
		resolvedAt, &x.Resolution)
	if err == nil {
		x.Detail = priceDetail(x.Code, qty, money.Fen(sold), money.Fen(catalog), money.Fen(diff), saleVersion, storeVersion)
	}
	return err
}

// priceDetail says, for HQ, what a price exception is.
func priceDetail(code string, qty int64, sold, catalog, diff money.Fen, saleVersion, storeVersion int64) string {
	return fmt.Sprintf("%d sold at %s, catalog %s (difference %s); sale priced from catalog version %d, the store's was %d (%s)",
		qty, sold, catalog, diff, saleVersion, storeVersion, code)
}
