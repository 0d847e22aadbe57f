package wire_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/posgate/posgate/internal/perr"
	"github.com/posgate/posgate/internal/wire"
)

// rotations returns n+1 keys and the chain of n rotations from the first to the last, a
// minute apart, sent through JSON and decoded as a terminal gets it.
func rotations(t *testing.T, store string, n int) ([]ed25519.PrivateKey, wire.CatalogKeys) {
	t.Helper()
	keys := make([]ed25519.PrivateKey, n+1)
	for i := range keys {
		_, keys[i], _ = ed25519.GenerateKey(rand.Reader)
	}
	at := time.Date(2027, 3, 1, 9, 0, 0, 123456789, time.FixedZone("CST", 8*3600))
	k := wire.CatalogKeys{V: wire.Version, Store: store}
	for i := 0; i < n; i++ {
		k.Rotations = append(k.Rotations, wire.SignRotation(store, keys[i], pub(keys[i+1]), at.Add(time.Duration(i)*time.Minute)))
	}
	return keys, trip(t, k)
}

func pub(k ed25519.PrivateKey) ed25519.PublicKey { return k.Public().(ed25519.PublicKey) }

func trip(t *testing.T, k wire.CatalogKeys) wire.CatalogKeys {
	t.Helper()
	b, err := json.Marshal(k)
	if err != nil {
		t.Fatal(err)
	}
	out, err := wire.DecodeCatalogKeys(b)
	if err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	return out
}

// TestFollowRotations: a till follows the store's chain from the key it holds, wherever in
// the chain that is, to the newest key; a forged step, steps out of order, a step back in
// time or to a key already left, another store's chain and a chain that does not name the
// till's key (an old one replayed to a till that moved on) are refused with their codes and
// leave the till's key as it was.
func TestFollowRotations(t *testing.T) {
	keys, chain := rotations(t, testStore, 3)
	newest := pub(keys[3])
	for i := 0; i <= 3; i++ {
		got, err := chain.Follow(pub(keys[i]))
		if err != nil || !got.Equal(newest) {
			t.Fatalf("from key %d: %s, %v; want the newest key %s", i, wire.KeyID(got), err, wire.KeyID(newest))
		}
	}
	if got, err := (wire.CatalogKeys{V: wire.Version, Store: testStore}).Follow(pub(keys[0])); err != nil || !got.Equal(pub(keys[0])) {
		t.Fatalf("an empty chain: %s, %v; want the key held", wire.KeyID(got), err)
	}

	_, forger, _ := ed25519.GenerateKey(rand.Reader)
	cases := []struct {
		name   string
		chain  func() wire.CatalogKeys
		pinned ed25519.PublicKey
		code   string
	}{
		{"a step signed by another key", func() wire.CatalogKeys {
			c := clone(chain)
			forged := wire.SignRotation(testStore, forger, pub(forger), c.Rotations[1].At)
			c.Rotations[1].Sig = forged.Sig
			return c
		}, pub(keys[0]), wire.CodeRotationInvalid},
		{"a step to the forger's key, signed by it", func() wire.CatalogKeys {
			c := clone(chain)
			c.Rotations = append(c.Rotations, wire.SignRotation(testStore, forger, pub(forger), c.Rotations[2].At.Add(time.Hour)))
			c.Rotations[3].From = c.Rotations[2].To
			return c
		}, pub(keys[0]), wire.CodeRotationInvalid},
		{"a step's new key changed after signing", func() wire.CatalogKeys {
			c := clone(chain)
			c.Rotations = c.Rotations[:1]
			c.Rotations[0].To = trip(t, wire.CatalogKeys{V: wire.Version, Store: testStore,
				Rotations: []wire.KeyRotation{wire.SignRotation(testStore, forger, pub(forger), time.Now())}}).Rotations[0].To
			return c
		}, pub(keys[0]), wire.CodeRotationInvalid},
		{"a step's time changed after signing", func() wire.CatalogKeys {
			c := clone(chain)
			c.Rotations[2].At = c.Rotations[2].At.Add(time.Second)
			return c
		}, pub(keys[0]), wire.CodeRotationInvalid},
		{"steps out of order", func() wire.CatalogKeys {
			c := clone(chain)
			c.Rotations[0], c.Rotations[1] = c.Rotations[1], c.Rotations[0]
			return c
		}, pub(keys[0]), wire.CodeRotationInvalid},
		{"a step missing", func() wire.CatalogKeys {
			c := clone(chain)
			c.Rotations = append(c.Rotations[:1], c.Rotations[2:]...)
			return c
		}, pub(keys[0]), wire.CodeRotationInvalid},
		{"a step earlier than the one before", func() wire.CatalogKeys {
			c := clone(chain)
			c.Rotations[2] = wire.SignRotation(testStore, keys[2], pub(keys[3]), c.Rotations[1].At.Add(-time.Second))
			return c
		}, pub(keys[0]), wire.CodeRotationInvalid},
		{"a step back to a key left", func() wire.CatalogKeys {
			c := clone(chain)
			c.Rotations = append(c.Rotations, wire.SignRotation(testStore, keys[3], pub(keys[1]), c.Rotations[2].At.Add(time.Hour)))
			return c
		}, pub(keys[0]), wire.CodeRotationInvalid},
		{"another store's chain", func() wire.CatalogKeys {
			c := clone(chain)
			c.Store = "S999"
			return c
		}, pub(keys[0]), wire.CodeRotationInvalid},
		{"an old chain replayed to a till that moved on", func() wire.CatalogKeys {
			c := clone(chain)
			c.Rotations = c.Rotations[:1]
			return c
		}, newest, wire.CodeRotationUnknown},
		{"a chain of another key", func() wire.CatalogKeys { return clone(chain) }, pub(forger), wire.CodeRotationUnknown},
	}
	for _, tc := range cases {
		got, err := tc.chain().Follow(tc.pinned)
		if perr.CodeOf(err) != tc.code || !got.Equal(tc.pinned) {
			t.Errorf("%s: %s, %v; want %s and the key held kept", tc.name, wire.KeyID(got), err, tc.code)
		}
	}

	// The old chain to a till that holds the key it ends with: nothing to do.
	old := clone(chain)
	old.Rotations = old.Rotations[:1]
	if got, err := old.Follow(pub(keys[1])); err != nil || !got.Equal(pub(keys[1])) {
		t.Fatalf("the old chain to a till holding its newest key: %s, %v", wire.KeyID(got), err)
	}
}

func clone(k wire.CatalogKeys) wire.CatalogKeys {
	k.Rotations = append([]wire.KeyRotation(nil), k.Rotations...)
	return k
}

// TestDecodeCatalogKeys: the message is decoded strictly and its form checked; a chain is
// not a catalog: the catalog decoder (as v0.1.0's, which refuses unknown fields) refuses it,
// so it travels on a topic of its own, which no catalog topic filter matches.
func TestDecodeCatalogKeys(t *testing.T) {
	_, chain := rotations(t, testStore, 2)
	good, err := json.Marshal(chain)
	if err != nil {
		t.Fatal(err)
	}
	r0 := chain.Rotations[0]
	bad := map[string]string{
		"unknown field":    strings.Replace(string(good), `"v":1`, `"v":1,"extra":1`, 1),
		"version 2":        strings.Replace(string(good), `"v":1`, `"v":2`, 1),
		"store id":         strings.Replace(string(good), `"store":"`+testStore+`"`, `"store":"a/b"`, 1),
		"from not a key":   strings.Replace(string(good), r0.From, "AAAA", 1),
		"to not base64":    strings.Replace(string(good), r0.To, "not base64!", 1),
		"short signature":  strings.Replace(string(good), r0.Sig, "AAAA", 1),
		"trailing data":    string(good) + "{}",
		"too many":         `{"v":1,"store":"S1","rotations":[` + strings.Repeat(`{},`, wire.MaxRotations) + `{}]}`,
		"over the size":    `{"v":1,"store":"S1","rotations":[],"x":"` + strings.Repeat("a", wire.MaxCatalogKeysBytes) + `"}`,
		"a catalog":        `{"v":1,"store":"S1","version":3,"items":[]}`,
		"rotation unknown": strings.Replace(string(good), `"sig":`, `"by":"x","sig":`, 1),
	}
	for name, body := range bad {
		if _, err := wire.DecodeCatalogKeys([]byte(body)); perr.CodeOf(err) == "" {
			t.Errorf("%s: decoded (%v)", name, err)
		}
	}
	if _, err := wire.DecodeCatalog(good); perr.CodeOf(err) != wire.CodeUnknownField {
		t.Errorf("the chain decoded as a catalog: %v; want %s", err, wire.CodeUnknownField)
	}
	if a, b := wire.CatalogTopic(testStore), wire.CatalogKeysTopic(testStore); a == b || !strings.HasPrefix(b, a) {
		t.Errorf("topics %q and %q", a, b)
	}
}
