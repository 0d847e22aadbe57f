package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// The archive deletes a day's rows from the ledger; SQLite keeps the pages they held as free
// pages of the file, for the rows to come, and the file never shrinks. A ledger made by
// this posgate is made with auto_vacuum = INCREMENTAL (Open), and Compact gives its free
// pages back to the file system a few megabytes at a time, each step a short write
// transaction between the ingest's commits. A ledger made by v0.1.0 has auto_vacuum = NONE,
// which only a VACUUM (the whole file rewritten, commits waiting meanwhile) can change:
// Compact runs that VACUUM once, when the store is quiet and a quarter of the file is free,
// and the ledger is incremental from then on.

// compactStep is how many pages one step of an incremental compaction gives back (16 MiB
// of 4 KiB pages): a step is one write transaction, a few tens of milliseconds.
const compactStep = 4096

// Compacted is what Compact did.
type Compacted struct {
	Before, After int64 // the database file's bytes (its log aside)
	Full          bool  // a VACUUM rewrote the file (a ledger made by v0.1.0, once)
}

// pageStats returns the ledger's auto_vacuum mode, page count, free pages and page size.
func (l *Ledger) pageStats(ctx context.Context) (mode, pages, free, size int64, err error) {
	for _, p := range []struct {
		q string
		v *int64
	}{{"PRAGMA auto_vacuum", &mode}, {"PRAGMA page_count", &pages}, {"PRAGMA freelist_count", &free}, {"PRAGMA page_size", &size}} {
		if err := l.db.W.QueryRowContext(ctx, p.q).Scan(p.v); err != nil {
			return 0, 0, 0, 0, fmt.Errorf("%s: %w", p.q, err)
		}
	}
	return mode, pages, free, size, nil
}

// autoVacuumIncremental is PRAGMA auto_vacuum's INCREMENTAL.
const autoVacuumIncremental = 2

// Compact gives the ledger's free pages back to the file system: step by step on an
// incremental ledger; on a ledger made by v0.1.0 by one VACUUM that makes it incremental,
// only when quiet (no sale for a while: the commits wait for it) and a quarter of its
// pages are free. It stops between steps when ctx is done.
func (l *Ledger) Compact(ctx context.Context, quiet bool) (Compacted, error) {
	mode, pages, free, size, err := l.pageStats(ctx)
	if err != nil {
		return Compacted{}, fmt.Errorf("compact: %w", err)
	}
	c := Compacted{Before: pages * size, After: pages * size}
	switch {
	case free == 0:
		return c, nil
	case mode == autoVacuumIncremental:
		for free > 0 && ctx.Err() == nil {
			if _, err := l.db.W.ExecContext(ctx, fmt.Sprintf("PRAGMA incremental_vacuum(%d)", compactStep)); err != nil {
				return c, fmt.Errorf("compact: %w", err)
			}
			if _, pages, free, _, err = l.pageStats(ctx); err != nil {
				return c, fmt.Errorf("compact: %w", err)
			}
		}
	case quiet && free*4 >= pages:
		if err := l.vacuumIncremental(ctx); err != nil {
			return c, fmt.Errorf("compact: %w", err)
		}
		c.Full = true
		if _, pages, _, _, err = l.pageStats(ctx); err != nil {
			return c, fmt.Errorf("compact: %w", err)
		}
	default:
		return c, nil
	}
	c.After = pages * size
	return c, nil
}

// vacuumIncremental rewrites the ledger with auto_vacuum = INCREMENTAL.
func (l *Ledger) vacuumIncremental(ctx context.Context) error {
	if _, err := l.db.W.ExecContext(ctx, "PRAGMA auto_vacuum = INCREMENTAL"); err != nil {
		return err
	}
	_, err := l.db.W.ExecContext(ctx, "VACUUM")
	return err
}

// makeIncremental makes a ledger Open just created incremental (its tables are empty: the
// VACUUM takes no time).
func (l *Ledger) makeIncremental(ctx context.Context) error {
	mode, _, _, _, err := l.pageStats(ctx)
	if err != nil || mode == autoVacuumIncremental {
		return err
	}
	return l.vacuumIncremental(ctx)
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
