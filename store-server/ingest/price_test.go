package ingest

import (
	"strings"
	"testing"

	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/perr"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/ledger"
)

// priced is a catalog of version 7 selling MILK at 12.50 and BREAD at 5.00.
type priced struct{}

func (priced) Has(sku string) bool   { return sku == "MILK" || sku == "BREAD" }
func (priced) Known(sku string) bool { return sku == "MILK" || sku == "BREAD" || sku == "OLD" }
func (priced) PriceList() (int64, map[string]money.Fen) {
	return 7, map[string]money.Fen{"MILK": 1250, "BREAD": 500}
}

func sale(version int64, lines ...wire.Line) *wire.SalePayload {
	p := &wire.SalePayload{SaleID: "s", CatalogVersion: version}
	for i, l := range lines {
		l.Line, l.Amount = i+1, l.UnitPrice*money.Fen(l.Qty)
		p.Lines = append(p.Lines, l)
		p.Total += l.Amount
	}
	return p
}

// TestPrices: live, a scan or a sale with a unit price the store's catalog does not hold is
// refused price_mismatch (naming the line, the SKU and both prices) and counted; at the
// catalog's prices it passes. Offline, nothing is refused: each SKU sold at another price is
// a price exception, price_changed when the sale names an older catalog version, else
// price_mismatch; a SKU the catalog no longer lists has no price to hold it to.
func TestPrices(t *testing.T) {
	in := New(Config{Store: "S1", Catalog: priced{}})
	milk := func(qty int64, price money.Fen) wire.Line { return wire.Line{SKU: "MILK", Qty: qty, UnitPrice: price} }
	bread := wire.Line{SKU: "BREAD", Qty: 1, UnitPrice: 500}

	for _, tc := range []struct {
		name string
		p    wire.Payload
		bad  bool
	}{
		{"scan at the catalog's price", &wire.ScanPayload{SaleID: "s", Line: 1, SKU: "MILK", Qty: 1, UnitPrice: 1250}, false},
		{"scan underpriced", &wire.ScanPayload{SaleID: "s", Line: 3, SKU: "MILK", Qty: 1, UnitPrice: 1}, true},
		{"sale at the catalog's prices", sale(7, bread, milk(1, 1250)), false},
		{"sale underpriced", sale(7, bread, milk(1, 1)), true},
		{"sale overpriced, older catalog", sale(6, milk(1, 1300)), true},
	} {
		xs, err := in.checkPrices("T1", tc.p, true)
		if len(xs) != 0 {
			t.Errorf("%s: live, price exceptions %+v", tc.name, xs)
		}
		if !tc.bad {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		if perr.CodeOf(err) != CodePriceMismatch || !strings.Contains(err.Error(), `"MILK"`) ||
			!strings.Contains(err.Error(), "12.50") {
			t.Errorf("%s: %v, want %s naming MILK and 12.50", tc.name, err, CodePriceMismatch)
		}
	}
	if n := in.Stats().PriceMismatch; n != 3 {
		t.Errorf("price_mismatch counted %d times, want 3", n)
	}

	for _, tc := range []struct {
		name string
		p    *wire.SalePayload
		want []ledger.PriceException
	}{
		{"at the catalog's prices", sale(6, bread, milk(2, 1250)), nil},
		{"older catalog", sale(6, milk(2, 1100), bread, milk(1, 1000)), []ledger.PriceException{{SKU: "MILK",
			Code: ledger.CodePriceChanged, Qty: 3, SoldPrice: 1100, CatalogPrice: 1250, Difference: 550, SaleVersion: 6, StoreVersion: 7}}},
		{"the store's catalog, another price", sale(7, milk(1, 1)), []ledger.PriceException{{SKU: "MILK",
			Code: ledger.CodePriceMismatch, Qty: 1, SoldPrice: 1, CatalogPrice: 1250, Difference: 1249, SaleVersion: 7, StoreVersion: 7}}},
		{"no catalog named", sale(0, milk(1, 1300)), []ledger.PriceException{{SKU: "MILK",
			Code: ledger.CodePriceMismatch, Qty: 1, SoldPrice: 1300, CatalogPrice: 1250, Difference: -50, StoreVersion: 7}}},
		{"a SKU no longer sold", sale(5, wire.Line{SKU: "OLD", Qty: 1, UnitPrice: 999}), nil},
	} {
		xs, err := in.checkPrices("T1", tc.p, false)
		if err != nil {
			t.Errorf("offline %s: refused: %v", tc.name, err)
		}
		if len(xs) != len(tc.want) || (len(xs) == 1 && xs[0] != tc.want[0]) {
			t.Errorf("offline %s: %+v, want %+v", tc.name, xs, tc.want)
		}
	}
	if n := in.Stats().PriceMismatch; n != 3 {
		t.Errorf("offline sales counted as live refusals: %d", n)
	}
}
