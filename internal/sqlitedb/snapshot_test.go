package sqlitedb

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"testing/fstest"
)

// TestSnapshotWhileWriting: a snapshot taken from the read-only pool while the writer
// commits is a whole database as of one commit: every row of a transaction or none, and
// the snapshot opens and checks as a database of its own.
func TestSnapshotWhileWriting(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db, err := Open(ctx, filepath.Join(dir, "x.db"), fstest.MapFS{
		"001_t.sql": {Data: []byte(`CREATE TABLE t (batch INTEGER NOT NULL, n INTEGER NOT NULL);`)},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// Each transaction writes 100 rows of its batch: a snapshot holds 100 per batch.
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Go(func() {
		for b := 1; ; b++ {
			select {
			case <-stop:
				return
			default:
			}
			tx, err := db.W.BeginTx(ctx, nil)
			if err != nil {
				t.Error(err)
				return
			}
			for n := range 100 {
				if _, err := tx.Exec(`INSERT INTO t VALUES (?, ?)`, b, n); err != nil {
					t.Error(err)
					tx.Rollback()
					return
				}
			}
			if err := tx.Commit(); err != nil {
				t.Error(err)
				return
			}
		}
	})
	committed := func() int {
		var n int
		if err := db.R.QueryRow(`SELECT count(DISTINCT batch) FROM t`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for i := range 5 {
		before := committed()
		for i == 0 && before == 0 {
			before = committed()
		}
		dst := filepath.Join(dir, fmt.Sprintf("snap%d.db", i))
		if err := Snapshot(ctx, db.Path, dst); err != nil {
			close(stop)
			wg.Wait()
			t.Fatal(err)
		}
		cp, err := OpenQueryOnly(ctx, dst, 1)
		if err != nil {
			t.Fatal(err)
		}
		var batches, partial int
		if err := cp.QueryRow(`SELECT count(*), count(*) FILTER (WHERE c <> 100) FROM
			(SELECT batch, count(*) AS c FROM t GROUP BY batch)`).Scan(&batches, &partial); err != nil {
			t.Fatal(err)
		}
		cp.Close()
		if partial != 0 {
			t.Fatalf("snapshot %d: %d of %d transactions held in part", i, partial, batches)
		}
		if batches < before {
			t.Fatalf("snapshot %d: %d transactions, but %d were committed before it began", i, batches, before)
		}
		t.Logf("snapshot %d: %d whole transactions", i, batches)
	}
	close(stop)
	wg.Wait()
	if err := Snapshot(ctx, db.Path, filepath.Join(dir, "snap0.db")); err == nil {
		t.Fatal("a snapshot over an existing file succeeded")
	}
}
