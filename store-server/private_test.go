package main

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestDataIsPrivate: the store's and a till's data directories, made 0755 by the operator,
// hold nothing another account can read once the store-server and the agent ran and sold:
// every directory 0700, every file (ledger, outbox, their -wal and -shm, lock files,
// catalog) 0600. The binaries set umask 077 and tighten the directory at start.
func TestDataIsPrivate(t *testing.T) {
	e := newEnv(t, "Asia/Shanghai", []string{"T01"})
	c := e.cashiers["T01"]
	if err := c.Sale([]string{"MILK"}, "cash"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitDrained(context.Background()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // the catalog's and backlog's writes after the ack
	for _, dir := range []string{e.store.Opts.DataDir, e.agents["T01"].Opts.DataDir} {
		n := 0
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			st, err := os.Lstat(path)
			if err != nil {
				return err
			}
			want := os.FileMode(0o600)
			if d.IsDir() {
				want = 0o700
			}
			if got := st.Mode().Perm(); got != want {
				t.Errorf("%s is %v, want %v", path, got, want)
			}
			n++
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if n < 3 {
			t.Errorf("%s holds %d entries; want the database and its companions", dir, n)
		}
	}
}
