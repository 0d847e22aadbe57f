package catalog

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/posgate/posgate/internal/perr"
	"github.com/posgate/posgate/internal/wire"
)

// TestPriceAboveOneEvent: a price above what one event may carry (wire.MaxAmount) is refused
// at import with amount_above_limit naming the row, in CSV, in JSON and through Replace; a
// price of exactly the limit is taken. Such a catalog was installed, and every scan of the
// item failed at the till.
func TestPriceAboveOneEvent(t *testing.T) {
	limit := wire.MaxAmount.String()
	over := "1000000000.01"
	for _, tc := range []struct {
		name, ctype, body, row string
	}{
		{"csv", "text/csv", "sku,name,price\nMILK,Milk,12.50\nGOLD,Gold bar," + over + "\n", `line 3 (sku "GOLD")`},
		{"json", "application/json", `{"items":[{"sku":"MILK","name":"Milk","price":"12.50"},{"sku":"GOLD","name":"Gold bar","price":"` +
			over + `"}]}`, `item 2 (sku "GOLD")`},
		{"int64 fen", "text/csv", "sku,name,price\nGOLD,Gold bar,92233720368547758.07\n", `line 2 (sku "GOLD")`},
	} {
		_, err := Parse(tc.ctype, strings.NewReader(tc.body))
		if perr.CodeOf(err) != wire.CodeTooLarge || !strings.Contains(err.Error(), tc.row) {
			t.Errorf("%s: %v, want %s naming %s", tc.name, err, wire.CodeTooLarge, tc.row)
		}
	}
	got, err := Parse("text/csv", strings.NewReader("sku,name,price\nGOLD,Gold bar,"+limit+"\n"))
	if err != nil || len(got) != 1 || got[0].Price != wire.MaxAmount {
		t.Fatalf("a price of the limit %s: %+v, %v", limit, got, err)
	}
	c, err := Open(filepath.Join(t.TempDir(), "catalog.json"), "S1")
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Replace([]wire.CatalogItem{{SKU: "GOLD", Name: "Gold bar", Price: wire.MaxAmount + 1}}, noPub{})
	if perr.CodeOf(err) != wire.CodeTooLarge || !strings.Contains(err.Error(), `"GOLD"`) {
		t.Fatalf("Replace over the limit: %v, want %s naming GOLD", err, wire.CodeTooLarge)
	}
	if v := c.Current().Version; v != 0 {
		t.Fatalf("a refused import installed version %d", v)
	}
}
