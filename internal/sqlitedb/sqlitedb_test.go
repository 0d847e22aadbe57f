package sqlitedb

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
	"time"
)

var testSchema = fstest.MapFS{"001_t.sql": &fstest.MapFile{Data: []byte(`CREATE TABLE t (id INTEGER PRIMARY KEY, v BLOB NOT NULL);`)}}

// walFrames writes n rows of about a page each, one transaction per row, and returns the
// frames then in the write-ahead log.
func walFrames(t *testing.T, db *DB, n int) int {
	t.Helper()
	for range n {
		if _, err := db.W.Exec(`INSERT INTO t (v) VALUES (?)`, []byte(strings.Repeat("x", 3000))); err != nil {
			t.Fatal(err)
		}
	}
	var busy, log, done int
	if err := db.R.QueryRow(`PRAGMA wal_checkpoint(PASSIVE)`).Scan(&busy, &log, &done); err != nil {
		t.Fatal(err)
	}
	return log
}

// TestCheckpointsInTheBackground: no commit checkpoints the log (which would stall it), and
// the background checkpointer copies the log so that it starts over.
func TestCheckpointsInTheBackground(t *testing.T) {
	ctx := context.Background()
	for _, every := range []time.Duration{time.Hour, 10 * time.Millisecond} {
		CheckpointEvery = every
		db, err := Open(ctx, filepath.Join(t.TempDir(), "x.db"), testSchema)
		CheckpointEvery = 250 * time.Millisecond
		if err != nil {
			t.Fatal(err)
		}
		var auto int
		if err := db.W.QueryRow(`PRAGMA wal_autocheckpoint`).Scan(&auto); err != nil || auto != 0 {
			t.Errorf("writer's wal_autocheckpoint = %d, %v; want 0", auto, err)
		}
		if err := db.R.QueryRow(`PRAGMA wal_autocheckpoint`).Scan(&auto); err != nil || auto != 0 {
			t.Errorf("reader's wal_autocheckpoint = %d, %v; want 0", auto, err)
		}
		frames := walFrames(t, db, 1500)
		if every == time.Hour {
			if frames < 1500 {
				t.Errorf("%d frames in the log after 1500 commits without a checkpointer: a commit checkpointed", frames)
			}
		} else {
			time.Sleep(200 * time.Millisecond)
			if after := walFrames(t, db, 1); after > 100 {
				t.Errorf("the log holds %d frames after a background checkpoint and one commit: it did not start over", after)
			}
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
