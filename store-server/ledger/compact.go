package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// The archive deletes a day's rows from the ledger; SQLite keeps the pages they held as free
// pages of the file and writes the rows to come into them, so that a store archiving a day
// a day keeps a file of one size. A catch-up (the first archive of a ledger that kept every
// day: BenchmarkYearLedger's 274 days) frees most of the file at once, and the file would
// keep that size for good. Compact rewrites it then with a VACUUM, which the commits wait
// for (seconds: BenchmarkYearLedger's vacuum-s), so only when the store is quiet (no sale
// for a while: closed) and a quarter of the file is free.
//
// The ledger stays auto_vacuum = NONE, as v0.1.0 made it: INCREMENTAL, which would give
// pages back step by step while the store trades, keeps a map of every page's parent
// up to date in every commit, and cost the ledger's group commits 15–26% more CPU per
// record (BenchmarkCommitTerminals, terminals=20).

// Compacted is what Compact did.
type Compacted struct {
	Before, After int64 // the database file's bytes (its log aside)
	Vacuumed      bool  // a VACUUM rewrote the file
}

// pageStats returns the ledger's page count, free pages and page size.
func (l *Ledger) pageStats(ctx context.Context) (pages, free, size int64, err error) {
	for _, p := range []struct {
		q string
		v *int64
	}{{"PRAGMA page_count", &pages}, {"PRAGMA freelist_count", &free}, {"PRAGMA page_size", &size}} {
		if err := l.db.W.QueryRowContext(ctx, p.q).Scan(p.v); err != nil {
			return 0, 0, 0, fmt.Errorf("%s: %w", p.q, err)
		}
	}
	return pages, free, size, nil
}

// Compact rewrites the ledger with a VACUUM, giving its free pages back to the file system,
// when quiet (the commits wait for it) and a quarter of its pages are free; otherwise it
// does nothing.
func (l *Ledger) Compact(ctx context.Context, quiet bool) (Compacted, error) {
	pages, free, size, err := l.pageStats(ctx)
	if err != nil {
		return Compacted{}, fmt.Errorf("compact: %w", err)
	}
	c := Compacted{Before: pages * size, After: pages * size}
	if !quiet || free == 0 || free*4 < pages {
		return c, nil
	}
	if _, err := l.db.W.ExecContext(ctx, "VACUUM"); err != nil {
		return c, fmt.Errorf("compact: %w", err)
	}
	c.Vacuumed = true
	if pages, _, _, err = l.pageStats(ctx); err != nil {
		return c, fmt.Errorf("compact: %w", err)
	}
	c.After = pages * size
	return c, nil
}

// QuietSince reports whether no sale or refund was received since t: the newest events
// are read back to the last sale or refund (a quiet store's tills send heartbeats only).
func (l *Ledger) QuietSince(ctx context.Context, t time.Time) (bool, error) {
	var ms int64
	err := l.db.R.QueryRowContext(ctx, `SELECT received_ms FROM events WHERE kind IN ('sale', 'refund')
		ORDER BY rowid DESC LIMIT 1`).Scan(&ms)
	if errors.Is(err, sql.ErrNoRows) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("last sale: %w", err)
	}
	return ms < t.UnixMilli(), nil
}
