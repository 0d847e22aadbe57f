package ingest

import (
	"sync"
	"time"

	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/perr"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/client"
	"github.com/posgate/posgate/store-server/ledger"
)

// CodePriceMismatch is the live refusal of a scan or sale whose unit price is not the
// store's catalog's for its SKU.
const CodePriceMismatch = ledger.CodePriceMismatch

// Pricer is a Catalog that knows its prices (store-server/catalog): the store holds the
// prices a till charges to it. A Catalog without it is not checked.
type Pricer interface {
	// PriceList returns the current catalog's version and price per SKU; the map is not
	// changed by anyone.
	PriceList() (int64, map[string]money.Fen)
}

// priceLog keeps the log of live price refusals to one line a second: a till priced from
// a forged catalog scans many lines.
type priceLog struct {
	mu    sync.Mutex
	last  time.Time
	quiet int64 // refusals not logged since the last line
}

var pricesLogged priceLog

// checkPrices holds p's unit prices to the store's catalog. A live scan or sale with a line
// whose SKU the catalog prices otherwise is refused price_mismatch (a live verdict: the till
// undoes the step). An offline sale is never refused for it (invariant 5): the customer paid
// what the till asked; each SKU sold at another price is returned as a price exception, for
// the ledger to record with the sale. A SKU the current catalog does not list (an earlier
// catalog's, sold offline) has no price to hold it to.
func (in *Ingest) checkPrices(terminal string, p wire.Payload, live bool) ([]ledger.PriceException, error) {
	pr, ok := in.cfg.Catalog.(Pricer)
	if !ok || pr == nil {
		return nil, nil
	}
	version, prices := pr.PriceList()
	switch v := p.(type) {
	case *wire.ScanPayload:
		if want, ok := prices[v.SKU]; ok && live && v.UnitPrice != want {
			return nil, in.priceRefused(terminal, v.Line, v.SKU, v.UnitPrice, want, version)
		}
	case *wire.SalePayload:
		if live {
			for _, l := range v.Lines {
				if want, ok := prices[l.SKU]; ok && l.UnitPrice != want {
					return nil, in.priceRefused(terminal, l.Line, l.SKU, l.UnitPrice, want, version)
				}
			}
			return nil, nil
		}
		return saleExceptions(v, prices, version), nil
	}
	return nil, nil
}

// saleExceptions returns, per SKU in the order of the sale's lines, the units an offline
// sale sold at another unit price than prices.
func saleExceptions(p *wire.SalePayload, prices map[string]money.Fen, version int64) []ledger.PriceException {
	var out []ledger.PriceException
	at := map[string]int{}
	code := ledger.CodePriceMismatch
	if p.CatalogVersion > 0 && p.CatalogVersion < version {
		code = ledger.CodePriceChanged
	}
	for _, l := range p.Lines {
		want, ok := prices[l.SKU]
		if !ok || l.UnitPrice == want {
			continue
		}
		// Both prices are within wire.MaxAmount and qty within wire.MaxQty, and a sale
		// holds at most wire.MaxLines lines: the sum stays far inside int64.
		diff := (want - l.UnitPrice) * money.Fen(l.Qty)
		if i, ok := at[l.SKU]; ok {
			out[i].Qty += l.Qty
			out[i].Difference += diff
			continue
		}
		at[l.SKU] = len(out)
		out = append(out, ledger.PriceException{SKU: l.SKU, Code: code, Qty: l.Qty, SoldPrice: l.UnitPrice,
			CatalogPrice: want, Difference: diff, SaleVersion: p.CatalogVersion, StoreVersion: version})
	}
	return out
}

// priceRefused counts and logs (at most a line a second) a live price refusal and returns it.
func (in *Ingest) priceRefused(terminal string, line int, sku string, got, want money.Fen, version int64) error {
	in.count(func(s *client.Stats) { s.PriceMismatch++ })
	l := &pricesLogged
	l.mu.Lock()
	now := time.Now()
	say := now.Sub(l.last) >= time.Second
	quiet := l.quiet
	if say {
		l.last, l.quiet = now, 0
	} else {
		l.quiet++
	}
	l.mu.Unlock()
	if say {
		in.log.Warn("live price refused: the till's price is not the catalog's", "code", CodePriceMismatch,
			"terminal", terminal, "sku", sku, "price", got, "catalog_price", want, "catalog_version", version,
			"not_logged_since", quiet)
	}
	return perr.New(perr.Invalid, CodePriceMismatch, "line %d: sku %q at %s, the store's catalog (version %d) sells it at %s",
		line, sku, got, version, want)
}
