package wire_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"testing"

	"github.com/posgate/posgate/internal/perr"
	"github.com/posgate/posgate/internal/wire"
)

// TestCatalogSignature: a catalog signed by the store's key verifies with it after a trip
// through JSON; one with a changed price, one signed by another key (naming itself or the
// store's key), and one unsigned do not, each with its code.
func TestCatalogSignature(t *testing.T) {
	_, storeKey, _ := ed25519.GenerateKey(rand.Reader)
	_, otherKey, _ := ed25519.GenerateKey(rand.Reader)
	storePub := storeKey.Public().(ed25519.PublicKey)
	cat := func() wire.Catalog {
		return wire.Catalog{V: wire.Version, Store: testStore, Version: 7,
			Items: []wire.CatalogItem{{SKU: "MILK", Name: "Milk <1L> & co", Price: 1250}}}
	}
	trip := func(c wire.Catalog) wire.Catalog {
		t.Helper()
		b, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		out, err := wire.DecodeCatalog(b)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	good := cat()
	if err := wire.SignCatalog(&good, storeKey); err != nil {
		t.Fatal(err)
	}
	if err := wire.VerifyCatalog(trip(good), storePub); err != nil {
		t.Fatalf("the store's own catalog: %v", err)
	}
	cheap := trip(good)
	cheap.Items[0].Price = 1
	forged := cat()
	forged.Items[0].Price = 1
	if err := wire.SignCatalog(&forged, otherKey); err != nil {
		t.Fatal(err)
	}
	claims := forged
	claims.Key = good.Key // names the store's key, signed by another
	for _, tc := range []struct {
		name string
		c    wire.Catalog
		code string
	}{
		{"price changed after signing", cheap, wire.CodeCatalogForged},
		{"signed by another key", trip(forged), wire.CodeCatalogForged},
		{"naming the store's key, signed by another", trip(claims), wire.CodeCatalogForged},
		{"unsigned", trip(cat()), wire.CodeCatalogUnsigned},
	} {
		if err := wire.VerifyCatalog(tc.c, storePub); perr.CodeOf(err) != tc.code {
			t.Errorf("%s: %v, want %s", tc.name, err, tc.code)
		}
	}
	pemKey, err := wire.MarshalStoreKey(storePub)
	if err != nil {
		t.Fatal(err)
	}
	if back, err := wire.ParseStoreKey(pemKey); err != nil || !back.Equal(storePub) {
		t.Fatalf("store key through PEM: %v", err)
	}
	if _, err := wire.ParseStoreKey([]byte("not a key")); err == nil {
		t.Fatal("a file that is no key was taken")
	}
}
