package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/terminal-agent/outbox"
)

// TestCatalogKeyReset: catalog-key reset pins the key given (a PEM file as the store writes
// it, or base64) in a stopped agent's outbox; it refuses a directory with no outbox, a key
// that is not one, and an outbox an agent holds.
func TestCatalogKeyReset(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	run := func(args ...string) (string, error) {
		var out, errOut bytes.Buffer
		err := catalogKeyMain(append([]string{"reset", "--data-dir", dir}, args...), &out, &errOut)
		return out.String() + errOut.String(), err
	}
	a, _, _ := ed25519.GenerateKey(rand.Reader)
	b, _, _ := ed25519.GenerateKey(rand.Reader)
	if out, err := run("--store-key", base64.StdEncoding.EncodeToString(a)); err == nil {
		t.Fatalf("reset without an outbox: %s", out)
	}
	st, err := outbox.Open(ctx, filepath.Join(dir, "outbox.db"), outbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.PinStoreKey(ctx, a); err != nil {
		t.Fatal(err)
	}
	if out, err := run("--store-key", base64.StdEncoding.EncodeToString(b)); err == nil {
		t.Fatalf("reset while the outbox is held: %s", out)
	}
	st.Close()
	pemFile := filepath.Join(t.TempDir(), "catalog-key.pub")
	body, _ := wire.MarshalStoreKey(b)
	os.WriteFile(pemFile, body, 0o600)
	for _, bad := range []string{"not-a-key", base64.StdEncoding.EncodeToString(b[:16]), filepath.Join(dir, "outbox.db")} {
		if out, err := run("--store-key", bad); err == nil {
			t.Fatalf("reset to %q: %s", bad, out)
		}
	}
	pinned := func() ed25519.PublicKey {
		st, err := outbox.Open(ctx, filepath.Join(dir, "outbox.db"), outbox.Config{})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		k, _ := st.StoreKey(ctx)
		return k
	}
	if !pinned().Equal(a) {
		t.Fatal("a refused reset changed the pin")
	}
	out, err := run("--store-key", pemFile)
	if err != nil || !pinned().Equal(b) || !strings.Contains(out, wire.KeyID(b)) || !strings.Contains(out, "was "+wire.KeyID(a)) {
		t.Fatalf("reset from the store's file: %s, %v", out, err)
	}
	if out, err := run("--store-key", base64.StdEncoding.EncodeToString(a)); err != nil || !pinned().Equal(a) {
		t.Fatalf("reset from base64: %s, %v", out, err)
	}
}
