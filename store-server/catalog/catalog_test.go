package catalog

import (
	"fmt"
	"path/filepath"
	"sync"
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

type noPub struct{}

func (noPub) PublishRetained(string, []byte) error { return nil }

// TestConcurrentImports: two imports at once (a retry after a timeout, two managers) take
// two versions, one after the other, and the saved catalog opens again.
func TestConcurrentImports(t *testing.T) {
	big := make([]string, 2000)
	for i := range big {
		big[i] = fmt.Sprintf("SKU%05d", i)
	}
	for round := range 30 {
		path := filepath.Join(t.TempDir(), "catalog.json")
		c, err := Open(path, "S1")
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		vers := make([]int64, 2)
		for i, skus := range [][]string{big[:1000], big[1000:]} {
			wg.Go(func() {
				cat, err := c.Replace(items(skus...), noPub{})
				if err != nil {
					t.Error(err)
				}
				vers[i] = cat.Version
			})
		}
		wg.Wait()
		if vers[0] == vers[1] {
			t.Fatalf("round %d: both imports became version %d", round, vers[0])
		}
		reopened, err := Open(path, "S1")
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if reopened.Current().Version != 2 || !reopened.Known(big[0]) || !reopened.Known(big[1999]) {
			t.Fatalf("round %d: reopened at version %d", round, reopened.Current().Version)
		}
	}
}
