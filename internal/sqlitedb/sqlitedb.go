// Package sqlitedb opens posgate's SQLite databases the one way they are opened everywhere:
// WAL, synchronous=FULL (a commit survives power loss), foreign keys on, a busy timeout, one
// writer connection and a small pool of read-only connections, WAL checkpoints in the
// background rather than inside a commit, and applies the numbered migrations embedded by
// package schema.
//
// It never opens a database with a weaker durability setting.
package sqlitedb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mattn/go-sqlite3"
)

// DB is a SQLite database with one writer connection and a pool of readers.
type DB struct {
	// W is the only connection that writes. Transactions on it begin IMMEDIATE.
	W *sql.DB
	// R is a pool of read-only connections.
	R *sql.DB
	// Path is the database file.
	Path string

	ckpt *checkpointer // nil for a DB built by hand (no background checkpoints)
	lock *os.File      // OpenExclusive's lock on path+".lock"; nil otherwise
}

// driverName is mattn/go-sqlite3 with every connection's automatic WAL checkpoint turned
// off: a commit that crosses the WAL's 1000-page mark would otherwise copy the whole log
// into the database file and fsync it before returning, a stall of several milliseconds
// on the writer's path. Open checkpoints in the background instead.
const driverName = "sqlite3_posgate"

func init() {
	sql.Register(driverName, &sqlite3.SQLiteDriver{ConnectHook: func(c *sqlite3.SQLiteConn) error {
		// A log that grew long under a burst is cut back when it starts over.
		if _, err := c.Exec(fmt.Sprintf("PRAGMA journal_size_limit = %d", journalSizeLimit), nil); err != nil {
			return err
		}
		_, err := c.Exec("PRAGMA wal_autocheckpoint = 0", nil)
		return err
	}})
}

// CheckpointEvery is how often Open's background checkpointer copies the write-ahead log
// into the database file (PRAGMA wal_checkpoint(PASSIVE): it never blocks the writer or a
// reader, and copies what no reader still needs).
var CheckpointEvery = 250 * time.Millisecond

// checkpointer runs PASSIVE checkpoints on a connection of its own.
type checkpointer struct {
	// ready is set when the log is past RestartFrames and the checkpointer has copied all
	// of it but the last commit or two: the writer's cue to finish (FinishCheckpoint).
	ready   atomic.Bool
	restart int // RestartFrames when it started
	db      *sql.DB
	every   time.Duration
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
}

// RestartFrames is how long the log may grow (in frames of one page: 16 Ki frames of 4 KiB,
// 64 MiB) before it is made to start over. SQLite starts the log over at a write
// transaction that began with the log copied whole into the database. Under a steady stream
// of commits the writer begins its next transaction as soon as it commits, and a
// checkpoint running beside it never has the log whole at that moment: the log grew by
// every commit for as long as the stream lasted (600 MB in 14 s of 5,000 live sales a
// second). Past RestartFrames the checkpointer copies again at once, a few times, each pass
// copying what was committed during the last, and then the writer copies the last commit
// or two itself between two transactions (FinishCheckpoint, about a millisecond), so that
// its next transaction starts the log over. The log file keeps its size (journal_size_limit
// is above it): a log that starts over writes into blocks the file already has, and a
// commit's fsync has no new file size to record.
var RestartFrames = 16 << 10

// catchUpPasses bounds the quick passes after a tick (each takes about a millisecond when
// little was committed meanwhile).
const catchUpPasses = 5

// journalSizeLimit is what a log file larger than it is cut back to when the log starts
// over (a burst of large groups); above RestartFrames' worth, so the file is not cut at
// every restart.
const journalSizeLimit = 128 << 20

func startCheckpointer(path string) (*checkpointer, error) {
	db, err := sql.Open(driverName, dsn(path, false))
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	c := &checkpointer{db: db, every: CheckpointEvery, restart: RestartFrames, stop: make(chan struct{}), done: make(chan struct{})}
	go c.run()
	return c, nil
}

func (c *checkpointer) run() {
	defer close(c.done)
	t := time.NewTicker(c.every)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
			// A failure (busy, I/O) leaves the frames in the log: the next tick tries again,
			// and the log only grows meanwhile.
			if log := c.pass(); log >= c.restart {
				for range catchUpPasses {
					c.pass()
				}
				c.ready.Store(true)
			}
		}
	}
}

// pass runs one PASSIVE checkpoint and returns the log's length in frames (0 on failure).
func (c *checkpointer) pass() int {
	var busy, log, done int
	if err := c.db.QueryRow("PRAGMA wal_checkpoint(PASSIVE)").Scan(&busy, &log, &done); err != nil {
		return 0
	}
	return log
}

func (c *checkpointer) close() error {
	c.once.Do(func() { close(c.stop) })
	<-c.done
	return c.db.Close()
}

func dsn(path string, readonly bool) string {
	q := url.Values{}
	q.Set("_journal_mode", "WAL")
	q.Set("_synchronous", "FULL")
	q.Set("_busy_timeout", "10000")
	q.Set("_foreign_keys", "on")
	if readonly {
		q.Set("_query_only", "true")
	} else {
		q.Set("_txlock", "immediate")
	}
	return URI(path, q)
}

// URI is the SQLite URI of the file at path with the query q, for sql.Open (mattn's
// go-sqlite3 takes its own _ options from the query too) or ATTACH. The characters a URI
// gives a meaning to (%, ? and #) are escaped in the path: unescaped, a data directory named
// "till#2" would open the file "till" (SQLite ends the path at the #).
func URI(path string, q url.Values) string {
	return "file:" + uriPath.Replace(path) + "?" + q.Encode()
}

var uriPath = strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23")

// Open opens (creating if needed) the database at path and applies the migrations in
// migrations (files named NNN_name.sql, applied in name order), if it is not nil.
func Open(ctx context.Context, path string, migrations fs.FS) (*DB, error) {
	w, err := sql.Open(driverName, dsn(path, false))
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	if err := w.PingContext(ctx); err != nil {
		w.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	db := &DB{W: w, Path: path}
	if migrations != nil {
		if err := Migrate(ctx, w, migrations); err != nil {
			w.Close()
			return nil, err
		}
	}
	r, err := sql.Open(driverName, dsn(path, true))
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	r.SetMaxOpenConns(4)
	db.R = r
	if db.ckpt, err = startCheckpointer(path); err != nil {
		db.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	return db, nil
}

// OpenExclusive is Open for a database that one process owns (a terminal's outbox, a store's
// ledger, an uploader's state): the returned DB is its only user until it is closed, and
// while it is open another OpenExclusive of the same path, in any process, fails with
// ErrInUse (a lock on path+".lock"; readers that open the file themselves are not
// stopped). Two agents, store-servers or uploaders started on one data directory would
// each believe it decides alone.
func OpenExclusive(ctx context.Context, path string, migrations fs.FS) (*DB, error) {
	lock, err := lockFile(path)
	if err != nil {
		return nil, err
	}
	db, err := Open(ctx, path, migrations)
	if err != nil {
		lock.Close()
		return nil, err
	}
	db.lock = lock
	return db, nil
}

// OpenQueryOnly opens an existing database (never creating it) for reading only, with at
// most conns connections, for a process that reads a database another one writes (the
// uploader reading the store's ledger, a status command reading a running uploader's
// state). It takes no lock and runs no migration.
func OpenQueryOnly(ctx context.Context, path string, conns int) (*sql.DB, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, err
	}
	q := url.Values{}
	q.Set("mode", "rw") // never create the file; rw so that SQLite can open the log's index
	q.Set("_busy_timeout", "10000")
	q.Set("_query_only", "true")
	db, err := sql.Open("sqlite3", URI(path, q))
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(conns)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

// FinishCheckpoint copies into the database what the checkpointer has not yet copied of a
// log past RestartFrames, on the writer connection between two transactions, so that the
// next write transaction starts the log over (see RestartFrames). It does nothing unless the
// checkpointer has caught up with such a log since the last call, and must not be called
// inside a transaction. The writer that commits in a steady stream calls it after each
// commit.
func (db *DB) FinishCheckpoint(ctx context.Context) error {
	if db.ckpt == nil || !db.ckpt.ready.CompareAndSwap(true, false) {
		return nil
	}
	var busy, log, done int
	err := db.W.QueryRowContext(ctx, "PRAGMA wal_checkpoint(PASSIVE)").Scan(&busy, &log, &done)
	if se := (sqlite3.Error{}); errors.As(err, &se) && se.Code == sqlite3.ErrBusy {
		return nil // another checkpoint is running: the checkpointer will cue the writer again
	}
	return err
}

// Close stops the checkpointer and closes both pools (the last connection to close
// checkpoints what is left in the log).
func (db *DB) Close() error {
	var err error
	if db.ckpt != nil {
		err = db.ckpt.close()
	}
	if werr := db.W.Close(); err == nil {
		err = werr
	}
	if db.R != nil {
		if rerr := db.R.Close(); err == nil {
			err = rerr
		}
	}
	if db.lock != nil {
		db.lock.Close() // after the connections: the next writer may open it now
	}
	return err
}

// Migrate applies every *.sql file of fsys not yet recorded in the migrations table, in name
// order, each in its own transaction together with its record.
func Migrate(ctx context.Context, db *sql.DB, fsys fs.FS) error {
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS migrations (
		name TEXT PRIMARY KEY, applied_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now')))`); err != nil {
		return fmt.Errorf("create migrations table: %w", err)
	}
	names, err := fs.Glob(fsys, "*.sql")
	if err != nil {
		return fmt.Errorf("list migrations: %w", err)
	}
	sort.Strings(names)
	for _, name := range names {
		if err := migrateOne(ctx, db, fsys, name); err != nil {
			return err
		}
	}
	return nil
}

// Migrated reports whether migration name (its file name) is recorded as applied in the
// database q reads: a reader that runs no migration (a query-only open of a file another
// process migrates) asks it before it reads what the migration added.
func Migrated(ctx context.Context, q interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}, name string) (bool, error) {
	var n int
	if err := q.QueryRowContext(ctx, `SELECT count(*) FROM migrations WHERE name = ?`, name).Scan(&n); err != nil {
		return false, fmt.Errorf("migration %s applied: %w", name, err)
	}
	return n > 0, nil
}

func migrateOne(ctx context.Context, db *sql.DB, fsys fs.FS, name string) error {
	body, err := fs.ReadFile(fsys, name)
	if err != nil {
		return fmt.Errorf("read migration %s: %w", name, err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("migration %s: %w", name, err)
	}
	defer tx.Rollback()
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM migrations WHERE name = ?`, name).Scan(&n); err != nil {
		return fmt.Errorf("migration %s: %w", name, err)
	}
	if n > 0 {
		return nil
	}
	if strings.TrimSpace(string(body)) != "" {
		if _, err := tx.ExecContext(ctx, string(body)); err != nil {
			return fmt.Errorf("migration %s: %w", name, err)
		}
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO migrations (name) VALUES (?)`, name); err != nil {
		return fmt.Errorf("migration %s: %w", name, err)
	}
	return tx.Commit()
}
