package ledger

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/posgate/posgate/internal/perr"
)

// TestPriceExceptions: an accepted offline sale with prices the store's catalog held
// otherwise is recorded as the customer paid it, with a price exception per SKU that the
// manager's API lists, counts open, resolves like an oversell (a second resolution changes
// nothing), and that goes to HQ flagged and then resolved; a replay of the sale adds none.
// Both ways of committing write it.
func TestPriceExceptions(t *testing.T) {
	for _, staged := range []bool{true, false} {
		withStaged(staged, func() { testPriceExceptions(t) })
	}
}

func testPriceExceptions(t *testing.T) {
	ctx := context.Background()
	l := MustOpen(t, day)
	MustAdjust(t, l, "open-MILK", "MILK", 10)
	MustAdjust(t, l, "open-BREAD", "BREAD", 10)
	p := salePayload("s1", []item{{"MILK", 2, 1100}, {"BREAD", 1, 500}})
	p.CatalogVersion = 6
	rec := offline(accepted("T1", 1, day, p))
	rec.Prices = []PriceException{{SKU: "MILK", Code: CodePriceChanged, Qty: 2, SoldPrice: 1100, CatalogPrice: 1250,
		Difference: 300, SaleVersion: 6, StoreVersion: 7}}
	if o := MustCommit(t, l, rec)[0]; o.Status != "accepted" || o.Err != nil {
		t.Fatalf("the offline sale: %+v", o)
	}
	MustCommit(t, l, rec) // a replay
	xs, err := l.PriceExceptions(ctx, dayDate, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(xs) != 1 || xs[0].SKU != "MILK" || xs[0].Qty != 2 || xs[0].SoldPrice != 1100 || xs[0].CatalogPrice != 1250 ||
		xs[0].Difference != 300 || xs[0].Code != CodePriceChanged || xs[0].SaleVersion != 6 || xs[0].StoreVersion != 7 ||
		!xs[0].At.Equal(day) || xs[0].Resolved {
		t.Fatalf("price exceptions: %+v, want MILK ×2 at 11.00 against 12.50 (versions 6, 7)", xs)
	}
	if n, err := l.OpenPriceExceptions(ctx); err != nil || n != 1 {
		t.Fatalf("open price exceptions: %d, %v", n, err)
	}
	hq, last := exceptionsAfter(t, l, 0, 100)
	if got, want := briefs(hq), []string{"price T1:1 MILK " + dayDate + " " + CodePriceChanged}; !slices.Equal(got, want) {
		t.Fatalf("to HQ: %q, want %q", got, want)
	}
	if d := hq[0].Detail; !strings.Contains(d, "2 sold at 11.00, catalog 12.50 (difference 3.00)") ||
		!strings.Contains(d, "version 6, the store's was 7") {
		t.Errorf("HQ's detail: %q", d)
	}
	if _, _, err := l.ResolvePrice(ctx, "T1", 1, "MILK", " "); perr.CodeOf(err) != CodePriceResolutionRequired {
		t.Errorf("a resolution without a note: %v", err)
	}
	if _, _, err := l.ResolvePrice(ctx, "T1", 1, "BREAD", "x"); perr.CodeOf(err) != CodePriceNotFound {
		t.Errorf("resolving a SKU sold at its price: %v", err)
	}
	x, applied, err := l.ResolvePrice(ctx, "T1", 1, "MILK", "price changed while the till was offline")
	if err != nil || !applied || !x.Resolved {
		t.Fatalf("resolve: %+v, %v, %v", x, applied, err)
	}
	if _, applied, err := l.ResolvePrice(ctx, "T1", 1, "MILK", "again"); err != nil || applied {
		t.Errorf("resolved twice: applied %v, %v", applied, err)
	}
	if n, _ := l.OpenPriceExceptions(ctx); n != 0 {
		t.Errorf("open after the resolution: %d", n)
	}
	if all, _ := l.PriceExceptions(ctx, "", true); len(all) != 1 || all[0].Resolution != "price changed while the till was offline" {
		t.Errorf("with the resolved ones: %+v", all)
	}
	hq, _ = exceptionsAfter(t, l, last, 100)
	if got, want := briefs(hq), []string{"price T1:1 MILK " + dayDate + " " + CodePriceChanged +
		" resolved: price changed while the till was offline"}; !slices.Equal(got, want) {
		t.Fatalf("to HQ after the resolution: %q, want %q", got, want)
	}
	var sold int64
	if err := l.db.R.QueryRowContext(ctx, `SELECT total FROM sales WHERE terminal = 'T1' AND seq = 1`).Scan(&sold); err != nil ||
		sold != 2700 {
		t.Errorf("the sale booked %d, %v; want 27.00 as paid", sold, err)
	}
}
