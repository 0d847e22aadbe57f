package sqlitedb

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
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
	if testing.Short() {
		t.Skip("-short: a steady stream of commits for seconds")
	}
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

// TestLogStartsOverUnderASteadyStream: a writer committing back to back, with no pause in
// which a background checkpoint could find the log whole, keeps the log short by calling
// FinishCheckpoint after each commit.
func TestLogStartsOverUnderASteadyStream(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a steady stream of commits for seconds")
	}
	ctx := context.Background()
	CheckpointEvery, RestartFrames = 2*time.Millisecond, 200
	path := filepath.Join(t.TempDir(), "x.db")
	db, err := Open(ctx, path, testSchema)
	CheckpointEvery, RestartFrames = 250*time.Millisecond, 16<<10
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	const commits = 3000 // a page and a half each
	for range commits {
		if _, err := db.W.Exec(`INSERT INTO t (v) VALUES (?)`, []byte(strings.Repeat("x", 3000))); err != nil {
			t.Fatal(err)
		}
		if err := db.FinishCheckpoint(ctx); err != nil {
			t.Fatal(err)
		}
	}
	fi, err := os.Stat(path + "-wal")
	if err != nil {
		t.Fatal(err)
	}
	// Every commit writes a frame or two: a log that never started over holds more frames
	// than there were commits (4,600–9,100 here without FinishCheckpoint; a few hundred
	// with it on an idle machine, about a thousand on a busy one).
	const frame = 4096 + 24
	if frames := fi.Size() / frame; frames >= commits {
		t.Errorf("the log file holds %d frames after %d commits: it did not start over", frames, commits)
	}
	var n int
	if err := db.R.QueryRow(`SELECT count(*) FROM t`).Scan(&n); err != nil || n != commits {
		t.Fatalf("%d rows (%v), want %d", n, err, commits)
	}
}

// TestPathsWithURICharacters: a database in a directory whose name holds the characters a
// URI gives a meaning to is opened, snapshotted and read at that path, and no other file
// is made.
func TestPathsWithURICharacters(t *testing.T) {
	ctx := context.Background()
	name := "till #2 100%"
	if runtime.GOOS != "windows" {
		name += " ?x=1"
	}
	dir := filepath.Join(t.TempDir(), name)
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "a.db")
	db, err := Open(ctx, path, testSchema)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.W.Exec(`INSERT INTO t (v) VALUES (x'01')`); err != nil {
		t.Fatal(err)
	}
	copyPath := filepath.Join(dir, "copy#1.db")
	if err := Snapshot(ctx, path, copyPath); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := OpenQueryOnly(ctx, copyPath, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var n int
	if err := r.QueryRow(`SELECT count(*) FROM t`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("the copy holds %d rows (%v), want 1", n, err)
	}
	var made []string
	filepath.WalkDir(filepath.Dir(dir), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			made = append(made, strings.TrimPrefix(p, filepath.Dir(dir)))
		}
		return nil
	})
	for _, f := range made {
		if !strings.HasPrefix(f, string(filepath.Separator)+name+string(filepath.Separator)) {
			t.Errorf("a file was made outside the database's directory: %q (all: %q)", f, made)
		}
	}
}
