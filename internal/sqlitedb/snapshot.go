package sqlitedb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
)

// Snapshot writes a consistent copy of the database at src into the new file dst while
// other connections, of this process or another, go on writing: VACUUM INTO, in one read
// transaction, so that the copy is the database as of one commit. It then checks the copy
// (PRAGMA quick_check). dst must not exist; on an error nothing is left at dst.
//
// It reads on a connection of its own: VACUUM INTO writes the copy, which a query-only
// connection refuses, and on the writer it would hold every commit back for as long as
// it runs.
func Snapshot(ctx context.Context, src, dst string) error {
	return SnapshotEdit(ctx, src, dst, nil)
}

// SnapshotEdit is Snapshot, with edit run on the copy (on a connection of its own, in
// rollback-journal mode: the copy stays one file) before the copy is checked. A store's
// backup marks its ledger copy so that, once restored, the ledger knows it was.
func SnapshotEdit(ctx context.Context, src, dst string, edit func(ctx context.Context, db *sql.DB) error) (err error) {
	if _, err := os.Lstat(dst); err == nil {
		return fmt.Errorf("snapshot: %s exists", dst)
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("snapshot: %w", err)
	}
	defer func() {
		if err != nil {
			os.Remove(dst)
		}
	}()
	if _, err := os.Stat(src); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	q := url.Values{}
	q.Set("mode", "rw") // never create src
	q.Set("_busy_timeout", "10000")
	db, err := sql.Open(driverName, URI(src, q))
	if err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `VACUUM INTO ?`, dst); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	if edit != nil {
		if err := editCopy(ctx, dst, edit); err != nil {
			return fmt.Errorf("snapshot: edit the copy: %w", err)
		}
	}
	cp, err := OpenQueryOnly(ctx, dst, 1)
	if err != nil {
		return fmt.Errorf("snapshot: open the copy: %w", err)
	}
	defer cp.Close()
	var check string
	if err := cp.QueryRowContext(ctx, `PRAGMA quick_check`).Scan(&check); err != nil {
		return fmt.Errorf("snapshot: check the copy: %w", err)
	}
	if check != "ok" {
		return fmt.Errorf("snapshot: the copy fails its check: %s", check)
	}
	return nil
}

func editCopy(ctx context.Context, dst string, edit func(ctx context.Context, db *sql.DB) error) error {
	q := url.Values{}
	q.Set("mode", "rw")
	q.Set("_busy_timeout", "10000")
	q.Set("_journal_mode", "DELETE")
	db, err := sql.Open(driverName, URI(dst, q))
	if err != nil {
		return err
	}
	db.SetMaxOpenConns(1)
	if err := edit(ctx, db); err != nil {
		db.Close()
		return err
	}
	return db.Close()
}
