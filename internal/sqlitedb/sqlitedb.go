// Package sqlitedb opens posgate's SQLite databases the one way they are opened everywhere:
// WAL, synchronous=FULL (a commit survives power loss), foreign keys on, a busy timeout, one
// writer connection and a small pool of read-only connections, and applies the numbered
// migrations embedded by package schema.
//
// It never opens a database with a weaker durability setting.
package sqlitedb

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"net/url"
	"sort"
	"strings"

	_ "github.com/mattn/go-sqlite3" // the SQLite driver
)

// DB is a SQLite database with one writer connection and a pool of readers.
type DB struct {
	// W is the only connection that writes. Transactions on it begin IMMEDIATE.
	W *sql.DB
	// R is a pool of read-only connections.
	R *sql.DB
	// Path is the database file.
	Path string
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
	return "file:" + path + "?" + q.Encode()
}

// Open opens (creating if needed) the database at path and applies the migrations in
// migrations (files named NNN_name.sql, applied in name order), if it is not nil.
func Open(ctx context.Context, path string, migrations fs.FS) (*DB, error) {
	w, err := sql.Open("sqlite3", dsn(path, false))
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
	r, err := sql.Open("sqlite3", dsn(path, true))
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	r.SetMaxOpenConns(4)
	db.R = r
	return db, nil
}

// Close closes both pools.
func (db *DB) Close() error {
	err := db.W.Close()
	if db.R != nil {
		if rerr := db.R.Close(); err == nil {
			err = rerr
		}
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
