package outbox

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/posgate/posgate/internal/wire"
)

// TestSaleNamesItsCatalog: a sale's event names the catalog version its lines were priced
// from, the oldest when a catalog came mid-sale (the line scanned before it keeps its
// price), so the store can tell a price it changed since from one it never had.
func TestSaleNamesItsCatalog(t *testing.T) {
	ctx := context.Background()
	s := openWithMilk(t) // version 1: MILK at 12.50
	do := func(f func(tx *Tx) (string, error)) string {
		t.Helper()
		id, _, _, err := s.Do(ctx, "", "", Mode{Disconnected: true}, f)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	sale := do(func(tx *Tx) (string, error) { return tx.OpenSale() })
	do(func(tx *Tx) (string, error) { _, err := tx.AddLine(sale, "MILK", "", 1); return sale, err })
	if _, err := s.ReplaceCatalog(ctx, wire.Catalog{V: 1, Store: "S1", Version: 2,
		Items: []wire.CatalogItem{{SKU: "MILK", Name: "Milk", Price: 1300}}}); err != nil {
		t.Fatal(err)
	}
	do(func(tx *Tx) (string, error) { _, err := tx.AddLine(sale, "MILK", "", 1); return sale, err })
	do(func(tx *Tx) (string, error) { return sale, tx.Pay(sale, wire.MethodCash, 2550, "") })
	evs, err := s.Pending(ctx, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var p wire.SalePayload
	for _, e := range evs {
		if e.Kind == wire.KindSale {
			if err := json.Unmarshal(e.Payload, &p); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(p.Lines) != 2 || p.Lines[0].UnitPrice != 1250 || p.Lines[1].UnitPrice != 1300 || p.CatalogVersion != 1 {
		t.Fatalf("sale priced %+v under catalog version %d, want 12.50 and 13.00 under version 1", p.Lines, p.CatalogVersion)
	}
}
