package catalog

import (
	"crypto/ed25519"
	"os"
	"path/filepath"
	"testing"

	"github.com/posgate/posgate/internal/wire"
)

type lastPub struct{ body []byte }

func (p *lastPub) PublishRetained(_ string, b []byte) error { p.body = b; return nil }

// TestSignedCatalogs: the store's key is made once (0600, its public key beside it) and kept
// across starts; every catalog the store publishes (an import, the publish at start) is
// signed by it and verifies with the public key file a terminal is given.
func TestSignedCatalogs(t *testing.T) {
	dir := t.TempDir()
	key, err := LoadKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{KeyFile, PubKeyFile} {
		st, err := os.Stat(filepath.Join(dir, f))
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v, mode %v; want 0600", f, err, st.Mode().Perm())
		}
	}
	again, err := LoadKey(dir)
	if err != nil || !again.Equal(key) {
		t.Fatalf("the second start made another key (%v)", err)
	}
	pemPub, err := os.ReadFile(filepath.Join(dir, PubKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	pub, err := wire.ParseStoreKey(pemPub)
	if err != nil || !pub.Equal(key.Public().(ed25519.PublicKey)) {
		t.Fatalf("the public key file: %v", err)
	}
	c, err := Open(DefaultPath(dir), "S1")
	if err != nil {
		t.Fatal(err)
	}
	c.SetSigner(key)
	var p lastPub
	if _, err := c.Replace([]wire.CatalogItem{{SKU: "MILK", Name: "Milk", Price: 1250}}, &p); err != nil {
		t.Fatal(err)
	}
	verify := func(what string) {
		t.Helper()
		got, err := wire.DecodeCatalog(p.body)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if err := wire.VerifyCatalog(got, pub); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	verify("the import")
	p.body = nil
	reopened, err := Open(DefaultPath(dir), "S1")
	if err != nil {
		t.Fatal(err)
	}
	reopened.SetSigner(key)
	if err := reopened.Publish(&p); err != nil {
		t.Fatal(err)
	}
	verify("the publish at start")
	if err := os.WriteFile(filepath.Join(dir, KeyFile), []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadKey(dir); err == nil {
		t.Fatal("a key file that is no key was replaced by a new key")
	}
}
