package catalog

import (
	"path/filepath"
	"testing"

	"github.com/posgate/posgate/internal/wire"
)

func items(skus ...string) []wire.CatalogItem {
	out := make([]wire.CatalogItem, len(skus))
	for i, s := range skus {
		out[i] = wire.CatalogItem{SKU: s, Name: s, Price: 100}
	}
	return out
}

// TestKnownAcrossVersions: a SKU dropped from the catalog is no longer sold (Has) but stays
// known (Known), also after a restart; a SKU never in any version is neither.
func TestKnownAcrossVersions(t *testing.T) {
	path := filepath.Join(t.TempDir(), "catalog.json")
	c, err := Open(path, "S1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Replace(items("A", "B"), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Replace(items("B", "C"), nil); err != nil {
		t.Fatal(err)
	}
	check := func(c *Catalog) {
		t.Helper()
		for _, tc := range []struct {
			sku        string
			has, known bool
		}{{"A", false, true}, {"B", true, true}, {"C", true, true}, {"Z", false, false}} {
			if c.Has(tc.sku) != tc.has || c.Known(tc.sku) != tc.known {
				t.Errorf("%s: has %v known %v, want %v %v", tc.sku, c.Has(tc.sku), c.Known(tc.sku), tc.has, tc.known)
			}
		}
	}
	check(c)
	if c.Current().Version != 2 {
		t.Fatalf("version %d, want 2", c.Current().Version)
	}
	reopened, err := Open(path, "S1")
	if err != nil {
		t.Fatal(err)
	}
	check(reopened)
}
