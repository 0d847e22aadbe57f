// Package catalog keeps the store's catalog: imported from CSV or JSON by the manager,
// persisted in the data directory, versioned, and published retained on pos/{store}/catalog
// so terminals price from it, also offline. A catalog is replaced whole; its version only
// ever grows.
package catalog

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/csv"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/perr"
	"github.com/posgate/posgate/internal/private"
	"github.com/posgate/posgate/internal/wire"
)

// Codes of refused imports (besides those of wire.Catalog.Validate and money).
const (
	CodeEmpty    = "catalog_empty"     // no items
	CodeTooLarge = "catalog_too_large" // over wire.MaxCatalogBytes, as imported or as published
)

// Publisher publishes a retained message.
type Publisher interface {
	PublishRetained(topic string, payload []byte) error
}

// Catalog is the store's current catalog, and the SKUs of every earlier version.
type Catalog struct {
	path  string
	store string

	replacing sync.Mutex // one import at a time: each takes the next version whole
	mu        sync.RWMutex
	cur       wire.Catalog
	skus      map[string]bool
	prices    map[string]money.Fen // the current catalog's, replaced whole (never changed in place)
	known     map[string]bool      // the SKUs of every version installed here, kept in knownPath
	floor     func() int64         // the highest version a terminal holds (SetVersionFloor)
	key       ed25519.PrivateKey   // signs what is published (SetSigner)
	rotations wire.CatalogKeys     // the key's rotations, published before the catalog (SetRotations)
}

// MaxVersionJump bounds how far above the store's version a terminal's report may lift the
// next import's: a report further ahead is not a catalog the store issued (a faulty or
// hostile terminal; a heartbeat of the largest int64 overflowed the version, and every
// import after it was refused).
const MaxVersionJump = 1 << 20

// SetVersionFloor has each import take a version above floor's answer as well: the highest
// catalog version a terminal reports holding. A store-server whose data directory was
// restored from a backup, or made anew, numbered its next import below what the terminals
// hold, and every terminal ignored it (they keep the highest version they have seen) and
// went on selling at the old prices. Call it before the first import.
func (c *Catalog) SetVersionFloor(floor func() int64) {
	c.replacing.Lock()
	defer c.replacing.Unlock()
	c.floor = floor
}

// knownPath is where the SKUs of every version are kept: a terminal that sold a SKU
// offline from its copy of a catalog may sync after the manager has imported one without
// it, and that sale happened.
func knownPath(path string) string { return path + ".skus" }

// Open loads the catalog kept at path (an empty catalog of version 0 if there is none).
func Open(path, store string) (*Catalog, error) {
	c := &Catalog{path: path, store: store, cur: wire.Catalog{V: wire.Version, Store: store}, skus: map[string]bool{},
		known: map[string]bool{}}
	kb, err := os.ReadFile(knownPath(path))
	switch {
	case err == nil:
		var known []string
		if err := json.Unmarshal(kb, &known); err != nil {
			return nil, fmt.Errorf("catalog %s: %w", knownPath(path), err)
		}
		for _, sku := range known {
			c.known[sku] = true
		}
	case !errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("read catalog: %w", err)
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read catalog: %w", err)
	}
	cat, err := wire.DecodeCatalog(b)
	if err != nil {
		return nil, fmt.Errorf("catalog %s: %w", path, err)
	}
	c.set(cat)
	return c, nil
}

func (c *Catalog) set(cat wire.Catalog) {
	skus := make(map[string]bool, len(cat.Items))
	prices := make(map[string]money.Fen, len(cat.Items))
	for _, it := range cat.Items {
		skus[it.SKU] = true
		prices[it.SKU] = it.Price
	}
	c.mu.Lock()
	c.cur, c.skus, c.prices = cat, skus, prices
	for sku := range skus {
		c.known[sku] = true
	}
	c.mu.Unlock()
}

// Current returns the current catalog.
func (c *Catalog) Current() wire.Catalog {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.cur
}

// Has reports whether the catalog sells sku.
func (c *Catalog) Has(sku string) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.skus[sku]
}

// PriceList returns the current catalog's version and its price per SKU, of one moment. The
// map is the catalog's own and never changes: do not change it.
func (c *Catalog) PriceList() (int64, map[string]money.Fen) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.cur.Version, c.prices
}

// Known reports whether sku is in this catalog or was in an earlier version of it.
func (c *Catalog) Known(sku string) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.known[sku]
}

// Replace installs items as the next version, saves it, and publishes it. Imports run one
// after the other: two at once would both take the same version with other items, and the
// terminals keep whichever comes first.
func (c *Catalog) Replace(items []wire.CatalogItem, pub Publisher) (wire.Catalog, error) {
	c.replacing.Lock()
	defer c.replacing.Unlock()
	return c.replace(items, pub)
}

// File is one of the files the catalog keeps in its directory.
type File struct {
	Name string // the file's name in the directory
	Body []byte
}

// Files returns the files the catalog keeps (the catalog, the SKUs of every version, the
// digest of the file last imported from --catalog, the signing key, its public key and the
// chain of its rotations), those that exist, read under the import lock: a set of one
// moment, which Open takes back as it was. They are what a backup of the store holds of its
// catalog.
func (c *Catalog) Files() ([]File, error) {
	c.replacing.Lock()
	defer c.replacing.Unlock()
	var out []File
	// The signing key goes too: a store restored from its backup keeps the key its
	// terminals pinned, and they go on taking its catalogs.
	dir := filepath.Dir(c.path)
	for _, p := range []string{c.path, knownPath(c.path), sourcePath(c.path), filepath.Join(dir, KeyFile),
		filepath.Join(dir, PubKeyFile), filepath.Join(dir, RotationsFile)} {
		b, err := os.ReadFile(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read catalog: %w", err)
		}
		out = append(out, File{Name: filepath.Base(p), Body: b})
	}
	return out, nil
}

// Reissue issues the current catalog's items again, under a version above held, the version
// terminals report holding, when that is above the store's (and under MaxVersionJump above
// it). It reads the current catalog under the import lock: read before it, an import running
// meanwhile was overwritten with the items it replaced. It returns whether it issued.
func (c *Catalog) Reissue(held int64, pub Publisher) (wire.Catalog, bool, error) {
	c.replacing.Lock()
	defer c.replacing.Unlock()
	cur := c.Current()
	if held <= cur.Version || held-cur.Version >= MaxVersionJump || len(cur.Items) == 0 {
		return cur, false, nil
	}
	next, err := c.replace(cur.Items, pub)
	return next, true, err
}

// replace is Replace with the import lock held.
func (c *Catalog) replace(items []wire.CatalogItem, pub Publisher) (wire.Catalog, error) {
	c.mu.RLock()
	next := wire.Catalog{V: wire.Version, Store: c.store, Version: c.cur.Version + 1, Items: items}
	c.mu.RUnlock()
	if c.floor != nil {
		if f := c.floor(); f >= next.Version && f-next.Version < MaxVersionJump {
			next.Version = f + 1
		}
	}
	if len(items) == 0 {
		return next, perr.New(perr.Invalid, CodeEmpty,
			"the catalog has no items: every scan would be refused as unknown_sku; import the items the store sells")
	}
	if err := next.Validate(); err != nil {
		return next, err
	}
	next, err := c.signed(next)
	if err != nil {
		return next, err
	}
	body, err := json.Marshal(next)
	if err != nil {
		return next, err
	}
	// The terminals, and this package's Open, take at most wire.MaxCatalogBytes: JSON spells
	// out each item's field names and escapes <, > and & in six bytes, so an import under
	// the limit can make a catalog over it.
	if len(body) > wire.MaxCatalogBytes {
		return next, perr.New(perr.Invalid, CodeTooLarge, "the catalog comes to %d bytes as the terminals get it, over the %d they take",
			len(body), wire.MaxCatalogBytes)
	}
	// The SKUs known so far and the new ones first: a crash between the two files leaves
	// the new SKUs known a version early, never an old one forgotten.
	c.mu.RLock()
	known := make([]string, 0, len(c.known)+len(items))
	for sku := range c.known {
		known = append(known, sku)
	}
	c.mu.RUnlock()
	for _, it := range items {
		known = append(known, it.SKU)
	}
	slices.Sort(known)
	kb, err := json.Marshal(slices.Compact(known))
	if err != nil {
		return next, err
	}
	if err := private.WriteFile(knownPath(c.path), kb); err != nil {
		return next, fmt.Errorf("save catalog: %w", err)
	}
	if err := private.WriteFile(c.path, body); err != nil {
		return next, fmt.Errorf("save catalog: %w", err)
	}
	c.set(next)
	if pub != nil {
		if err := pub.PublishRetained(wire.CatalogTopic(c.store), body); err != nil {
			return next, &NotPublishedError{Version: next.Version, Err: err}
		}
	}
	return next, nil
}

// NotPublishedError is Replace's error when the new catalog is installed and saved but the
// broker has not taken it: it goes out when the store-server connects to the broker again,
// or starts. An import sent again would only make another version.
type NotPublishedError struct {
	Version int64
	Err     error
}

func (e *NotPublishedError) Error() string {
	return fmt.Sprintf("catalog version %d installed, not yet published: %v", e.Version, e.Err)
}

func (e *NotPublishedError) Unwrap() error { return e.Err }

// sourcePath is where ImportSource keeps the digest of the file it last imported.
func sourcePath(path string) string { return path + ".source" }

// What ImportSource did with the file.
const (
	SourceImported  = "imported"  // the file changed since it was last taken: imported
	SourceUnchanged = "unchanged" // taken before, or its items are the catalog's
	SourceKept      = "kept"      // first seen, other than the store's catalog: not imported
)

// ImportSource imports the catalog file at path (JSON if its name ends in .json, CSV
// otherwise) when its content has changed since ImportSource last took it: the file's
// SHA-256 is kept beside the catalog. A store-server restarted with the same --catalog
// imported the file again whenever it differed from the current catalog, and so undid,
// without a word, every import the manager had made through the API since.
//
// With no digest kept yet (the first start with --catalog), the file is imported into an
// empty catalog; a catalog already installed stays as it is (SourceKept: the caller says
// so), as the manager may have imported it through the API, and the file is taken as seen:
// a change to it is imported at the next start.
func (c *Catalog) ImportSource(path string, pub Publisher) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	body, err := io.ReadAll(io.LimitReader(f, wire.MaxCatalogBytes+1))
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(body)
	digest := hex.EncodeToString(sum[:])
	kept, err := os.ReadFile(sourcePath(c.path))
	switch {
	case err == nil && strings.TrimSpace(string(kept)) == digest:
		return SourceUnchanged, nil
	case err != nil && !errors.Is(err, os.ErrNotExist):
		return "", fmt.Errorf("read %s: %w", sourcePath(c.path), err)
	}
	firstSeen := err != nil // no digest kept yet
	seen := func() error {
		if err := private.WriteFile(sourcePath(c.path), []byte(digest+"\n")); err != nil {
			return fmt.Errorf("save catalog source: %w", err)
		}
		return nil
	}
	ctype := "text/csv"
	if strings.HasSuffix(path, ".json") {
		ctype = "application/json"
	}
	items, err := Parse(ctype, bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	result := SourceUnchanged
	switch {
	case slices.Equal(c.Current().Items, items):
	case firstSeen && c.Current().Version > 0:
		result = SourceKept
	default:
		// Not published yet is imported: it goes out with the store-server's next publish.
		var np *NotPublishedError
		if _, err := c.Replace(items, pub); err != nil && !errors.As(err, &np) {
			return "", err
		}
		result = SourceImported
	}
	return result, seen()
}

// Publish publishes the current catalog (at start, so a restarted broker has it).
func (c *Catalog) Publish(pub Publisher) error {
	// Under the import lock: a publish of the catalog read before an import, reaching the
	// broker after the import's, would leave the old one retained.
	c.replacing.Lock()
	defer c.replacing.Unlock()
	cur, err := c.signed(c.Current())
	if err != nil || cur.Version == 0 {
		return err
	}
	body, err := json.Marshal(cur)
	if err != nil {
		return err
	}
	// The chain first: a terminal that pinned an earlier key moves to the one this catalog
	// is signed with (and takes again a catalog it refused meanwhile).
	if err := c.publishRotations(pub); err != nil {
		return err
	}
	return pub.PublishRetained(wire.CatalogTopic(c.store), body)
}

// Parse reads a catalog import: JSON ({"items":[{"sku","barcode","name","price":"12.50"}]}
// or a bare array of items) or CSV with a header row naming sku, name, price and optionally
// barcode, in any order. Prices are decimal yuan with at most two decimals.
func Parse(contentType string, r io.Reader) ([]wire.CatalogItem, error) {
	body, err := io.ReadAll(io.LimitReader(r, wire.MaxCatalogBytes+1))
	if err != nil {
		return nil, err
	}
	if len(body) > wire.MaxCatalogBytes {
		return nil, perr.New(perr.Invalid, CodeTooLarge, "a catalog is at most %d bytes", wire.MaxCatalogBytes)
	}
	body = bytes.TrimPrefix(body, []byte("\xef\xbb\xbf")) // the byte order mark of Excel's "CSV UTF-8"
	trimmed := bytes.TrimSpace(body)
	if strings.Contains(contentType, "json") || (len(trimmed) > 0 && (trimmed[0] == '{' || trimmed[0] == '[')) {
		return parseJSON(trimmed)
	}
	return parseCSV(body)
}

// importItem is an item of a JSON import: a price is required (a missing one read as 0.00
// sold the item for nothing).
type importItem struct {
	SKU     string     `json:"sku"`
	Barcode string     `json:"barcode,omitempty"`
	Name    string     `json:"name"`
	Price   *money.Fen `json:"price"`
}

func parseJSON(b []byte) ([]wire.CatalogItem, error) {
	var in []importItem
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var err error
	if len(b) > 0 && b[0] == '[' {
		err = dec.Decode(&in)
	} else {
		var doc struct {
			Items []importItem `json:"items"`
		}
		err = dec.Decode(&doc)
		in = doc.Items
	}
	if err != nil {
		if pe := (*perr.Error)(nil); errors.As(err, &pe) {
			return nil, pe
		}
		return nil, perr.Wrap(err, perr.Invalid, "catalog_json", "the catalog is not valid JSON: %v", err)
	}
	items := make([]wire.CatalogItem, len(in))
	for i, it := range in {
		if it.Price == nil {
			return nil, perr.New(perr.Invalid, money.CodeEmpty, "item %d (sku %q) has no price", i+1, it.SKU)
		}
		if err := priceInLimit(*it.Price, fmt.Sprintf("item %d (sku %q)", i+1, it.SKU)); err != nil {
			return nil, err
		}
		items[i] = wire.CatalogItem{SKU: it.SKU, Barcode: it.Barcode, Name: it.Name, Price: *it.Price}
	}
	return items, nil
}

func parseCSV(b []byte) ([]wire.CatalogItem, error) {
	r := csv.NewReader(bytes.NewReader(b))
	r.TrimLeadingSpace = true
	rows, err := r.ReadAll()
	if err != nil {
		return nil, perr.Wrap(err, perr.Invalid, "catalog_csv", "the catalog is not valid CSV: %v", err)
	}
	if len(rows) == 0 {
		return nil, perr.New(perr.Invalid, "catalog_csv", "the catalog CSV is empty")
	}
	col := map[string]int{}
	for i, h := range rows[0] {
		col[strings.ToLower(strings.TrimSpace(h))] = i
	}
	for _, need := range []string{"sku", "name", "price"} {
		if _, ok := col[need]; !ok {
			return nil, perr.New(perr.Invalid, "catalog_csv", "the CSV header needs a %q column", need)
		}
	}
	items := make([]wire.CatalogItem, 0, len(rows)-1)
	for n, row := range rows[1:] {
		get := func(k string) string {
			if i, ok := col[k]; ok && i < len(row) {
				return strings.TrimSpace(row[i])
			}
			return ""
		}
		price, err := money.ParseNonNegative(get("price"))
		if err != nil {
			e := perr.As(err)
			return nil, perr.New(perr.Invalid, e.Code, "line %d: %s", n+2, e.Message)
		}
		if err := priceInLimit(price, fmt.Sprintf("line %d (sku %q)", n+2, get("sku"))); err != nil {
			return nil, err
		}
		items = append(items, wire.CatalogItem{SKU: get("sku"), Barcode: get("barcode"), Name: get("name"), Price: price})
	}
	return items, nil
}

// priceInLimit refuses a price above what one event may carry (wire.MaxAmount), naming the
// row: every scan of such an item would be refused at the till, and every sale of it.
func priceInLimit(p money.Fen, row string) error {
	if p > wire.MaxAmount {
		return perr.New(perr.Invalid, wire.CodeTooLarge, "%s: price %s is above the %s one event may carry", row, p, wire.MaxAmount)
	}
	return nil
}

// DefaultPath is where a store-server keeps its catalog in its data directory.
func DefaultPath(dataDir string) string { return filepath.Join(dataDir, "catalog.json") }
