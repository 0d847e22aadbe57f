package catalog

import (
	"crypto/ed25519"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/posgate/posgate/internal/wire"
)

type topics struct{ sent []string }

func (p *topics) PublishRetained(topic string, _ []byte) error {
	p.sent = append(p.sent, topic)
	return nil
}

// TestRotateKey: a rotation makes a new key, signs the step to it with the old one and keeps
// the chain (0600) beside the key; the store then signs with the newest key and publishes the
// chain before its catalog, and a till's key of any earlier rotation follows the chain to it.
// A rotation cut short is finished or dropped at the next start; a chain that does not end
// with the store's key, or is another store's, stops the start.
func TestRotateKey(t *testing.T) {
	dir := t.TempDir()
	if _, err := Rotate(dir, "S1", time.Now()); err == nil {
		t.Fatal("rotated a store that has no key yet")
	}
	first, err := LoadSigner(dir, "S1")
	if err != nil || len(first.Rotations.Rotations) != 0 {
		t.Fatalf("the first start: %+v, %v", first.Rotations, err)
	}
	at := time.Date(2027, 3, 1, 9, 0, 0, 0, time.UTC)
	second, err := Rotate(dir, "S1", at)
	if err != nil {
		t.Fatal(err)
	}
	third, err := Rotate(dir, "S1", at.Add(-time.Hour)) // a clock set back
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{KeyFile, PubKeyFile, RotationsFile} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v; want 0600", f, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, nextKeyFile)); !os.IsNotExist(err) {
		t.Fatalf("%s left behind: %v", nextKeyFile, err)
	}
	sg, err := LoadSigner(dir, "S1")
	if err != nil {
		t.Fatal(err)
	}
	if got := sg.Key.Public().(ed25519.PublicKey); !got.Equal(third) {
		t.Fatalf("the store signs with %s, want the newest key %s", wire.KeyID(got), wire.KeyID(third))
	}
	if pemPub, _ := os.ReadFile(filepath.Join(dir, PubKeyFile)); pemPub != nil {
		if p, err := wire.ParseStoreKey(pemPub); err != nil || !p.Equal(third) {
			t.Fatalf("%s is not the newest key: %v", PubKeyFile, err)
		}
	}
	for i, from := range []ed25519.PublicKey{first.Key.Public().(ed25519.PublicKey), second, third} {
		if got, err := sg.Rotations.Follow(from); err != nil || !got.Equal(third) {
			t.Fatalf("a till holding key %d follows to %s, %v", i, wire.KeyID(got), err)
		}
	}

	c, err := Open(DefaultPath(dir), "S1")
	if err != nil {
		t.Fatal(err)
	}
	c.SetSigner(sg.Key)
	c.SetRotations(sg.Rotations)
	var p topics
	if _, err := c.Replace([]wire.CatalogItem{{SKU: "MILK", Name: "Milk", Price: 1250}}, &p); err != nil {
		t.Fatal(err)
	}
	p.sent = nil
	if err := c.Publish(&p); err != nil {
		t.Fatal(err)
	}
	if want := []string{wire.CatalogKeysTopic("S1"), wire.CatalogTopic("S1")}; len(p.sent) != 2 || p.sent[0] != want[0] || p.sent[1] != want[1] {
		t.Fatalf("published %v, want %v", p.sent, want)
	}
	files, err := c.Files()
	if err != nil {
		t.Fatal(err)
	}
	inBackup := false
	for _, f := range files {
		inBackup = inBackup || f.Name == RotationsFile
	}
	if !inBackup {
		t.Fatalf("the backup's files lack %s", RotationsFile)
	}

	// A rotation that stopped after the chain named the new key is finished at the start;
	// one that stopped before is dropped.
	keyBody, _ := os.ReadFile(filepath.Join(dir, KeyFile))
	if _, err := Rotate(dir, "S1", at.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	newBody, _ := os.ReadFile(filepath.Join(dir, KeyFile))
	os.WriteFile(filepath.Join(dir, nextKeyFile), newBody, 0o600)
	os.WriteFile(filepath.Join(dir, KeyFile), keyBody, 0o600)
	if sg, err := LoadSigner(dir, "S1"); err != nil || len(sg.Rotations.Rotations) != 3 ||
		!sg.Key.Public().(ed25519.PublicKey).Equal(sg.Rotations.Newest()) {
		t.Fatalf("a rotation cut after the chain: %v", err)
	}
	os.WriteFile(filepath.Join(dir, nextKeyFile), keyBody, 0o600) // a key no chain names
	if sg, err := LoadSigner(dir, "S1"); err != nil || !sg.Key.Public().(ed25519.PublicKey).Equal(sg.Rotations.Newest()) {
		t.Fatalf("a rotation cut before the chain: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, nextKeyFile)); !os.IsNotExist(err) {
		t.Fatalf("the dropped key is still there: %v", err)
	}

	if _, err := LoadSigner(dir, "S2"); err == nil {
		t.Fatal("store S2 started on store S1's chain")
	}
	os.WriteFile(filepath.Join(dir, KeyFile), keyBody, 0o600)
	if _, err := LoadSigner(dir, "S1"); err == nil {
		t.Fatal("started with a key the chain does not end with")
	}
	os.Remove(filepath.Join(dir, KeyFile))
	if _, err := LoadSigner(dir, "S1"); err == nil {
		t.Fatal("made a new key beside a chain of rotations")
	}
}
