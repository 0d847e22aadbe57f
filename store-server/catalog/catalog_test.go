package catalog

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"testing"

	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/perr"
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

// TestImportsTheTerminalsCannotTake: an import under the import limit whose catalog, as the
// terminals get it (field names per item, & escaped in six bytes), is over
// wire.MaxCatalogBytes is refused; so is an empty one. Both were installed: every terminal
// dropped the first, and the store-server could not open its own catalog at the next start;
// the second refused every scan in the store.
func TestImportsTheTerminalsCannotTake(t *testing.T) {
	// The terminals' form of the large import is some 40 MB; the collector, run again and
	// again as the buffers grow to it, took two thirds of the test's CPU. Without it the
	// test holds some 300 MB at most (200 with it). Under the race detector, whose shadow
	// memory grows with the heap (1.5 GB instead of 0.85), it saves nothing: it runs there.
	if !raceEnabled {
		defer debug.SetGCPercent(debug.SetGCPercent(-1))
	}
	path := filepath.Join(t.TempDir(), "catalog.json")
	c, err := Open(path, "S1")
	if err != nil {
		t.Fatal(err)
	}
	var csv bytes.Buffer
	csv.WriteString("sku,name,price\n")
	name := strings.Repeat("&", wire.MaxTextLen)
	for i := 0; csv.Len() < 7<<20; i++ {
		fmt.Fprintf(&csv, "S%06d,%s,1.00\n", i, name)
	}
	big, err := Parse("text/csv", &csv)
	if err != nil {
		t.Fatalf("parse %d items: %v", len(big), err)
	}
	for _, tc := range []struct {
		name  string
		items []wire.CatalogItem
		code  string
	}{
		{"over the terminals' limit", big, CodeTooLarge},
		{"empty", nil, CodeEmpty},
	} {
		if _, err := c.Replace(tc.items, noPub{}); perr.CodeOf(err) != tc.code {
			t.Errorf("%s: %v, want %s", tc.name, err, tc.code)
		}
	}
	if v := c.Current().Version; v != 0 {
		t.Fatalf("refused imports installed version %d", v)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("refused imports saved a catalog: %v", err)
	}
}

// TestParseWhatExportsLookLike: an item of a JSON import without a price is refused (it was
// sold for 0.00), and a CSV saved with a byte order mark (Excel's "CSV UTF-8") is read.
func TestParseWhatExportsLookLike(t *testing.T) {
	_, err := Parse("application/json", strings.NewReader(
		`{"items":[{"sku":"A1","name":"Apple","price":"3.50"},{"sku":"W9","name":"Whisky 18y"}]}`))
	if perr.CodeOf(err) != money.CodeEmpty || !strings.Contains(err.Error(), "W9") {
		t.Errorf("JSON item without a price: %v, want %s naming W9", err, money.CodeEmpty)
	}
	got, err := Parse("text/csv", strings.NewReader("\ufeffsku,name,price\nA1,Apple,3.50\n"))
	if err != nil || len(got) != 1 || got[0].SKU != "A1" || got[0].Price != 350 {
		t.Errorf("CSV with a byte order mark: %+v, %v", got, err)
	}
	got, err = Parse("", strings.NewReader("\ufeff"+`[{"sku":"A1","name":"Apple","price":"3.50"}]`))
	if err != nil || len(got) != 1 {
		t.Errorf("JSON with a byte order mark: %+v, %v", got, err)
	}
}

// TestImportSourceOnlyWhenChanged: the --catalog file is imported at the first start, not
// again at a restart after the manager imported another catalog through the API, and again
// once the file changes.
func TestImportSourceOnlyWhenChanged(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "catalog.json")
	src := filepath.Join(dir, "catalog.csv")
	write := func(body string) {
		if err := os.WriteFile(src, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	start := func() *Catalog { // a store-server start with --catalog src
		t.Helper()
		c, err := Open(path, "S1")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.ImportSource(src, noPub{}); err != nil {
			t.Fatal(err)
		}
		return c
	}
	price := func(c *Catalog) money.Fen { return c.Current().Items[0].Price }
	write("sku,name,price\nA1,Apple,3.50\n")
	if c := start(); c.Current().Version != 1 || price(c) != 350 {
		t.Fatalf("first start: version %d, price %s", c.Current().Version, price(c))
	}
	c := start()
	if _, err := c.Replace([]wire.CatalogItem{{SKU: "A1", Name: "Apple", Price: 420}}, noPub{}); err != nil {
		t.Fatal(err) // the manager's import, through the API
	}
	if c := start(); c.Current().Version != 2 || price(c) != 420 {
		t.Fatalf("restart with the same file: version %d, price %s; the manager's 4.20 is undone",
			c.Current().Version, price(c))
	}
	write("sku,name,price\nA1,Apple,3.80\n")
	if c := start(); c.Current().Version != 3 || price(c) != 380 {
		t.Fatalf("restart with a changed file: version %d, price %s", c.Current().Version, price(c))
	}
}

// TestFirstCatalogFileKeepsManagersImport: a store-server ran without --catalog, and the
// manager imported a catalog through the API. The first start with --catalog items.csv
// keeps it; a change to the file is imported at the next start.
func TestFirstCatalogFileKeepsManagersImport(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(t.TempDir(), "items.csv")
	if err := os.WriteFile(file, []byte("sku,name,price\nA1,Apple,3.50\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := Open(DefaultPath(dir), "S1")
	if err != nil {
		t.Fatal(err)
	}
	mgr := []wire.CatalogItem{{SKU: "A1", Name: "Apple", Price: 400}, {SKU: "B2", Name: "Bread", Price: 1200}}
	if _, err := c.Replace(mgr, nil); err != nil { // the manager's, through the API
		t.Fatal(err)
	}
	// Restarted with --catalog.
	c2, err := Open(DefaultPath(dir), "S1")
	if err != nil {
		t.Fatal(err)
	}
	result, err := c2.ImportSource(file, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cur := c2.Current(); result != SourceKept || len(cur.Items) != 2 {
		t.Fatalf("the first start with --catalog took the file (%s): catalog v%d now %+v; the manager's import %+v is gone",
			result, cur.Version, cur.Items, mgr)
	}
	if err := os.WriteFile(file, []byte("sku,name,price\nA1,Apple,3.80\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if result, err := c2.ImportSource(file, nil); err != nil || result != SourceImported || c2.Current().Items[0].Price != 380 {
		t.Fatalf("a changed --catalog at the next start: %s, %v, catalog %+v", result, err, c2.Current().Items)
	}
}

type failingPub struct{}

func (failingPub) PublishRetained(string, []byte) error { return errors.New("broker gone") }

// TestInstalledNotPublished: an import the broker does not take is installed and saved all
// the same, and says so (NotPublishedError), so that the manager is not asked to send it
// again as another version.
func TestInstalledNotPublished(t *testing.T) {
	path := filepath.Join(t.TempDir(), "catalog.json")
	c, err := Open(path, "S1")
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.Replace(items("A"), failingPub{})
	var np *NotPublishedError
	if !errors.As(err, &np) || np.Version != 1 || got.Version != 1 || c.Current().Version != 1 {
		t.Fatalf("Replace with the broker gone: %+v, %v", got, err)
	}
	if reopened, err := Open(path, "S1"); err != nil || reopened.Current().Version != 1 {
		t.Fatalf("not saved: %v", err)
	}
}
