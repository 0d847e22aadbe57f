package uplink

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/terminal-agent/outbox"
)

// TestCatalogKeyRotation: a till pinned (by --store-key) to the store's first key follows
// the store's chain of rotations to its newest key, and takes the catalog signed by it that
// it refused before the chain came; a forged chain, an old chain replayed and a catalog of
// another key are refused and counted, the pin kept. The pin stays where the chain moved it
// across restarts with the same --store-key, follows a changed --store-key, and a reset
// replaces it. A till of a store that never rotated (a v0.1.0 store: no chain on the topic)
// takes the catalog signed by the key it pinned.
func TestCatalogKeyRotation(t *testing.T) {
	ctx := context.Background()
	keys := make([]ed25519.PrivateKey, 3)
	for i := range keys {
		_, keys[i], _ = ed25519.GenerateKey(rand.Reader)
	}
	_, forger, _ := ed25519.GenerateKey(rand.Reader)
	pub := func(k ed25519.PrivateKey) ed25519.PublicKey { return k.Public().(ed25519.PublicKey) }
	at := time.Date(2027, 3, 1, 9, 0, 0, 0, time.UTC)
	chain := wire.CatalogKeys{V: wire.Version, Store: "S1", Rotations: []wire.KeyRotation{
		wire.SignRotation("S1", keys[0], pub(keys[1]), at), wire.SignRotation("S1", keys[1], pub(keys[2]), at.Add(time.Hour))}}
	body := func(v any) []byte {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	catalog := func(version int64, key ed25519.PrivateKey) []byte {
		c := wire.Catalog{V: wire.Version, Store: "S1", Version: version,
			Items: []wire.CatalogItem{{SKU: "MILK", Name: "Milk", Price: 1250}}}
		if err := wire.SignCatalog(&c, key); err != nil {
			t.Fatal(err)
		}
		return body(c)
	}
	path := filepath.Join(t.TempDir(), "outbox.db")
	st, err := outbox.Open(ctx, path, outbox.Config{Store: "S1", Terminal: "T1"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	check := func(what string, pinned ed25519.PublicKey, version, refused int64) {
		t.Helper()
		k, _ := st.StoreKey(ctx)
		v, _ := st.CatalogVersion(ctx)
		n, _ := st.KV(ctx, outbox.KVCatalogsRefused)
		if !k.Equal(pinned) || v != version || n != refused {
			t.Fatalf("%s: pinned %s, catalog version %d, %d refused; want %s, %d, %d", what, wire.KeyID(k), v, n,
				wire.KeyID(pinned), version, refused)
		}
	}
	u := New(Config{Store: "S1", Terminal: "T1", StoreKey: pub(keys[0])}, st)
	u.onCatalog(ctx, catalog(1, keys[0])) // the v0.1.0 form: no chain anywhere
	check("the first key's catalog", pub(keys[0]), 1, 0)
	u.onCatalog(ctx, catalog(2, keys[2]))
	check("the newest key's catalog before the chain", pub(keys[0]), 1, 1)
	u.onCatalogKeys(ctx, body(chain))
	check("the chain", pub(keys[2]), 2, 1)
	u.onCatalogKeys(ctx, body(chain))
	check("the chain again", pub(keys[2]), 2, 1)

	forged := chain
	forged.Rotations = append(append([]wire.KeyRotation(nil), chain.Rotations...),
		wire.SignRotation("S1", forger, pub(forger), at.Add(2*time.Hour)))
	forged.Rotations[2].From = chain.Rotations[1].To // claims to start from the store's key
	u.onCatalogKeys(ctx, body(forged))
	check("a step the store's key did not sign", pub(keys[2]), 2, 2)
	old := chain
	old.Rotations = chain.Rotations[:1]
	u.onCatalogKeys(ctx, body(old))
	check("the old chain replayed", pub(keys[2]), 2, 3)
	u.onCatalogKeys(ctx, []byte(`{"v":1,"store":"S1","rotations":[{}]}`))
	check("a broken chain", pub(keys[2]), 2, 4)
	u.onCatalog(ctx, catalog(3, forger))
	check("a catalog of another key", pub(keys[2]), 2, 5)
	u.onCatalog(ctx, catalog(4, keys[0]))
	check("a catalog of the key rotated away from", pub(keys[2]), 2, 6)
	u.onCatalog(ctx, catalog(5, keys[2]))
	check("the newest key's next catalog", pub(keys[2]), 5, 6)

	// A restart with the same --store-key keeps the pin where the chain moved it.
	u = New(Config{Store: "S1", Terminal: "T1", StoreKey: pub(keys[0])}, st)
	u.onCatalog(ctx, catalog(6, keys[2]))
	check("restarted with the same --store-key", pub(keys[2]), 6, 6)
	// The reset (the store's key stolen: a new one given at the till) replaces the pin; a
	// restart with the same --store-key keeps it.
	_, fresh, _ := ed25519.GenerateKey(rand.Reader)
	if was, err := st.ResetStoreKey(ctx, pub(fresh)); err != nil || !was.Equal(pub(keys[2])) {
		t.Fatalf("reset: was %s, %v", wire.KeyID(was), err)
	}
	u = New(Config{Store: "S1", Terminal: "T1", StoreKey: pub(keys[0])}, st)
	u.onCatalog(ctx, catalog(7, keys[2]))
	check("reset: the rotated key's catalog", pub(fresh), 6, 7)
	u.onCatalog(ctx, catalog(8, fresh))
	check("reset: the new key's catalog", pub(fresh), 8, 7)
	// A changed --store-key pins its key.
	u = New(Config{Store: "S1", Terminal: "T1", StoreKey: pub(keys[1])}, st)
	u.onCatalog(ctx, catalog(9, keys[1]))
	check("a changed --store-key", pub(keys[1]), 9, 7)
}
