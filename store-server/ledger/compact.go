package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// The archive deletes a day's rows from the ledger; SQLite keeps the pages they held as free
// pages of the file, for the rows to come, and the file never shrinks. Compact gives them
// back to the file system in one of two ways:
//
//   - a VACUUM, which rewrites the whole file while the commits wait: only when the store is
//     quiet (no sale for an hour: closed) and a quarter of the file is free, as after the
//     first archive of a ledger that kept every day (BenchmarkYearLedger: 274 days). It
//     also makes a ledger made by v0.1.0 (auto_vacuum = NONE, which nothing but a VACUUM
//     changes) incremental;
//   - on an incremental ledger (auto_vacuum = INCREMENTAL: every ledger this store-server
//     creates, and a v0.1.0 one after its VACUUM), steps of PRAGMA incremental_vacuum, each
//     a short write transaction between the ingest's commits, for at most a budget of time
//     per call: a day's archive a day is a few megabytes.

// compactStep is how many pages one step of an incremental compaction gives back (1 MiB of
// 4 KiB pages): a step moves as many pages from the file's end into free ones, in one write
// transaction the commits wait for (BenchmarkYearLedger's compact-step-max-ms).
const compactStep = 256

// Compacted is what Compact did.
type Compacted struct {
	Before, After int64         // the database file's bytes (its log aside)
	Full          bool          // a VACUUM rewrote the file
	LongestStep   time.Duration // the longest incremental step (the longest wait of a commit)
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

// Compact gives the ledger's free pages back to the file system: by a VACUUM when quiet
// (no sale for a while: the commits wait for it) and a quarter of the pages are free;
// otherwise, on an incremental ledger, step by step for at most budget (0: until none is
// free or ctx is done).
func (l *Ledger) Compact(ctx context.Context, quiet bool, budget time.Duration) (Compacted, error) {
	mode, pages, free, size, err := l.pageStats(ctx)
	if err != nil {
		return Compacted{}, fmt.Errorf("compact: %w", err)
	}
	c := Compacted{Before: pages * size, After: pages * size}
	start := time.Now()
	switch {
	case free == 0:
		return c, nil
	case quiet && free*4 >= pages:
		if err := l.vacuumIncremental(ctx); err != nil {
			return c, fmt.Errorf("compact: %w", err)
		}
		c.Full = true
		if _, pages, _, _, err = l.pageStats(ctx); err != nil {
			return c, fmt.Errorf("compact: %w", err)
		}
	case mode == autoVacuumIncremental:
		for free > 0 && ctx.Err() == nil { // one step at least, then until the budget is spent
			step := time.Now()
			if err := l.incrementalStep(ctx); err != nil {
				return c, fmt.Errorf("compact: %w", err)
			}
			c.LongestStep = max(c.LongestStep, time.Since(step))
			if _, pages, free, _, err = l.pageStats(ctx); err != nil {
				return c, fmt.Errorf("compact: %w", err)
			}
			if budget > 0 && time.Since(start) >= budget {
				break
			}
		}
	default:
		return c, nil
	}
	c.After = pages * size
	return c, nil
}

// incrementalStep gives back up to compactStep free pages in one write transaction. The
// pragma moves a page each time it is stepped (a row each): read to its end, or it moves
// one page (Exec steps a statement once), one transaction and fsync each.
func (l *Ledger) incrementalStep(ctx context.Context) error {
	rows, err := l.db.W.QueryContext(ctx, fmt.Sprintf("PRAGMA incremental_vacuum(%d)", compactStep))
	if err != nil {
		return err
	}
	for rows.Next() {
	}
	return errors.Join(rows.Err(), rows.Close())
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
