package uplink

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/terminal-agent/outbox"
)

// TestCatalogKey: a terminal pins the key of the first signed catalog it takes (or the one
// --store-key names), then takes only catalogs signed by it; a forged catalog (another key,
// a price changed after signing, no signature) is ignored and counted, and the till keeps its
// prices.
func TestCatalogKey(t *testing.T) {
	ctx := context.Background()
	_, storeKey, _ := ed25519.GenerateKey(rand.Reader)
	_, forger, _ := ed25519.GenerateKey(rand.Reader)
	open := func(pinned ed25519.PublicKey) (*Uplink, *outbox.Store) {
		st, err := outbox.Open(ctx, filepath.Join(t.TempDir(), "outbox.db"), outbox.Config{Store: "S1", Terminal: "T1"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return New(Config{Store: "S1", Terminal: "T1", StoreKey: pinned}, st), st
	}
	// catalog is a catalog of MILK at price, signed by key (none if nil); tamper changes
	// the price to 0.01 after signing.
	catalog := func(version int64, price money.Fen, key ed25519.PrivateKey, tamper bool) []byte {
		c := wire.Catalog{V: wire.Version, Store: "S1", Version: version,
			Items: []wire.CatalogItem{{SKU: "MILK", Name: "Milk", Price: price}}}
		if key != nil {
			if err := wire.SignCatalog(&c, key); err != nil {
				t.Fatal(err)
			}
		}
		if tamper {
			c.Items[0].Price = 1
		}
		b, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	check := func(st *outbox.Store, what string, version, refused int64) {
		t.Helper()
		v, _ := st.CatalogVersion(ctx)
		n, _ := st.KV(ctx, outbox.KVCatalogsRefused)
		it, ok, _ := st.Item(ctx, "MILK")
		if v != version || n != refused || (version > 0 && (!ok || it.Price != 1250)) {
			t.Fatalf("%s: catalog version %d, MILK %+v, %d refused; want version %d at 12.50, %d refused", what, v, it, n,
				version, refused)
		}
	}

	u, st := open(nil)
	u.onCatalog(ctx, catalog(1, 1, nil, false))
	check(st, "an unsigned first catalog", 0, 1)
	u.onCatalog(ctx, catalog(1, 1250, storeKey, false))
	check(st, "the store's first catalog", 1, 1)
	u.onCatalog(ctx, catalog(2, 1, forger, false))
	check(st, "a catalog by another key", 1, 2)
	u.onCatalog(ctx, catalog(3, 1250, storeKey, true))
	check(st, "the store's catalog with a price changed", 1, 3)
	u.onCatalog(ctx, catalog(4, 1, nil, false))
	check(st, "an unsigned catalog", 1, 4)
	u.onCatalog(ctx, catalog(5, 1250, storeKey, false))
	check(st, "the store's next catalog", 5, 4)

	// Pinned at enrolment: the forger's catalog is refused even as the first one.
	u, st = open(storeKey.Public().(ed25519.PublicKey))
	u.onCatalog(ctx, catalog(9, 1, forger, false))
	check(st, "--store-key, the forger's catalog first", 0, 1)
	u.onCatalog(ctx, catalog(1, 1250, storeKey, false))
	check(st, "--store-key, the store's catalog", 1, 1)
}
