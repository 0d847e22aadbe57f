package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/posgate/posgate/e2e"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/catalog"
	agentclient "github.com/posgate/posgate/terminal-agent/client"
)

// TestCatalogKeyRotation, end to end with the real binaries on anonymous mosquitto: the
// store's catalog key is rotated (refused while the store runs; stopped, rotated, started).
// A till that pinned the old key by --store-key and one that pinned it at first use follow
// the store's signed rotation and sell MILK at the new catalog's 13.80, accepted live; a
// catalog signed by another key is still refused by both. Then the store's key is replaced
// with no rotation (a stolen key: the store makes a new one); the till reset at the till
// (terminal-agent catalog-key reset) takes the store's catalogs again, the other refuses them.
func TestCatalogKeyRotation(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "Asia/Shanghai", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	b := binaries(t)
	sdir := e.store.Opts.DataDir
	enrolled := filepath.Join(t.TempDir(), "store-key.pub") // the till's copy, as given at enrolment
	copyFile(t, filepath.Join(sdir, catalog.PubKeyFile), enrolled)
	oldKey := storeKey(t, enrolled)
	pinned := startAgent(t, e, "T01", "--store-key", enrolled)
	firstUse := startAgent(t, e, "T02")
	tills := map[string]*e2e.Cashier{"--store-key": pinned, "first use": firstUse}

	rotate := func() (string, error) {
		cmd := exec.CommandContext(ctx, b.StoreServer, "catalog-key", "rotate", "--store", "S1", "--data-dir", sdir)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		t.Logf("store-server catalog-key rotate: %s", strings.TrimSpace(errOut.String()))
		return out.String(), err
	}
	if _, err := rotate(); err == nil {
		t.Fatal("rotated the key of a running store")
	}
	if err := e.store.Stop(); err != nil {
		t.Fatal(err)
	}
	out, err := rotate()
	if err != nil {
		t.Fatal(err)
	}
	newKey, err := wire.ParseStoreKey([]byte(out))
	if err != nil || newKey.Equal(oldKey) || !newKey.Equal(storeKey(t, filepath.Join(sdir, catalog.PubKeyFile))) {
		t.Fatalf("rotate printed %q (%v); want the new key, written to %s", out, err, catalog.PubKeyFile)
	}
	if err := e.store.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	newMilkPrice(t, e.store, "13.80") // version 2, signed by the new key
	for name, c := range tills {
		waitVersion(ctx, t, name, c, 2)
		unit, total, err := sellMilk(ctx, c)
		if err != nil || unit != 1380 || total != 1380 {
			t.Fatalf("%s: MILK sold at %s (total %s), %v; want 13.80 live", name, unit, total, err)
		}
	}
	for term := range e.agents {
		if log, _ := os.ReadFile(e.agents[term].Log); !strings.Contains(string(log), "store catalog key rotated") {
			t.Errorf("%s did not log the rotation", term)
		}
	}
	refusedBefore := map[string]int64{}
	for name, c := range tills {
		st, _ := c.Status()
		refusedBefore[name] = st.CatalogsRefused
	}
	forge(t, e.stack.MQTTURL(), 99)
	for name, c := range tills {
		st := waitRefused(ctx, t, name, c, refusedBefore[name]+1)
		if st.CatalogVersion != 2 {
			t.Fatalf("%s: holds catalog version %d after the forgery, want 2", name, st.CatalogVersion)
		}
	}

	// The key stolen: the store is given a new key with no rotation (the old one could sign
	// one to the thief's key), and each till is reset to it.
	if err := e.store.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{catalog.KeyFile, catalog.PubKeyFile, catalog.RotationsFile} {
		if err := os.Remove(filepath.Join(sdir, f)); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.store.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	freshFile := filepath.Join(sdir, catalog.PubKeyFile)
	fresh := storeKey(t, freshFile)
	a := e.agents["T01"]
	if err := a.Stop(); err != nil {
		t.Fatal(err)
	}
	reset := exec.CommandContext(ctx, b.TerminalAgent, "catalog-key", "reset", "--data-dir", a.Opts.DataDir, "--store-key", freshFile)
	if msg, err := reset.CombinedOutput(); err != nil || !strings.Contains(string(msg), wire.KeyID(fresh)) {
		t.Fatalf("catalog-key reset: %s, %v", msg, err)
	}
	if err := a.Restart(ctx); err != nil { // with the --store-key of its enrolment still given
		t.Fatal(err)
	}
	if pinned, err = e2e.ReadyCashier(ctx, a.API, a.Token, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	st, _ := firstUse.Status()
	v := newMilkPrice(t, e.store, "14.20").Version // signed by the store's fresh key
	waitVersion(ctx, t, "reset", pinned, v)
	if unit, _, err := sellMilk(ctx, pinned); err != nil || unit != 1420 {
		t.Fatalf("the till reset: MILK at %s, %v; want 14.20", unit, err)
	}
	if s := waitRefused(ctx, t, "not reset", firstUse, st.CatalogsRefused+1); s.CatalogVersion != 2 {
		t.Fatalf("the till not reset took catalog version %d of a key it never pinned", s.CatalogVersion)
	}
}

// waitVersion waits until the till holds catalog version at least v.
func waitVersion(ctx context.Context, t *testing.T, name string, c *e2e.Cashier, v int64) {
	t.Helper()
	for {
		st, err := c.Status()
		if err == nil && st.CatalogVersion >= v {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("%s: holds catalog version %d (%+v, %v), want %d", name, st.CatalogVersion, st, err, v)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitRefused waits until the till has refused n catalogs (or rotations), and returns its status.
func waitRefused(ctx context.Context, t *testing.T, name string, c *e2e.Cashier, n int64) agentclient.StatusAnswer {
	t.Helper()
	for {
		st, err := c.Status()
		if err == nil && st.CatalogsRefused >= n {
			return st
		}
		if ctx.Err() != nil {
			t.Fatalf("%s: %d catalogs refused (%v), want %d", name, st.CatalogsRefused, err, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func storeKey(t *testing.T, path string) ed25519.PublicKey {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	k, err := wire.ParseStoreKey(b)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}
