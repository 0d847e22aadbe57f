package ledger

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// fillDays commits n two-line sales of terminal T1 on each of days (at 11:00 in the store's
// zone), seqs from seq on, and returns the next seq.
func fillDays(t *testing.T, l *Ledger, seq int64, n int, days ...time.Time) int64 {
	t.Helper()
	for _, d := range days {
		var recs []Record
		for i := range n {
			recs = append(recs, withFlow(accepted("T1", seq, d.Add(time.Duration(i)*time.Second),
				salePayload(fmt.Sprintf("s%d", seq), []item{{"A", 1, 100}, {"B", 1, 50}}, cash(150))), int64(i+1)))
			seq++
			if len(recs) == 500 {
				MustCommit(t, l, recs...)
				recs = nil
			}
		}
		MustCommit(t, l, recs...)
	}
	return seq
}

// fileBytes checkpoints the ledger's log whole into its file and returns the file's size.
func fileBytes(t *testing.T, l *Ledger) int64 {
	t.Helper()
	if _, err := l.db.W.Exec(`PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(l.db.Path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

func mustAutoVacuum(t *testing.T, l *Ledger) int64 {
	t.Helper()
	mode, _, _, _, err := l.pageStats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return mode
}

// archiveAll archives every day before 2025-02-01 (out of Redis, HQ holding all).
func archiveAll(t *testing.T, l *Ledger, days ...string) {
	t.Helper()
	mustOutOfRedis(t, l, days...)
	got, err := l.Archive(context.Background(), "2025-02-01", mustMaxOutbox(t, l))
	if err != nil || len(got) != 1 || len(got[0].Days) != len(days) {
		t.Fatalf("archive: %+v (%v)", got, err)
	}
}

// TestCompactIncremental: a new ledger is made incremental; after the archive moved most
// of its rows, Compact gives their pages back and the file shrinks; stock stays provable.
func TestCompactIncremental(t *testing.T) {
	ctx := context.Background()
	l := mustOpenAt(t, filepath.Join(t.TempDir(), "ledger.db"), day)
	defer l.Close()
	if m := mustAutoVacuum(t, l); m != autoVacuumIncremental {
		t.Fatalf("a new ledger's auto_vacuum is %d, want incremental", m)
	}
	MustAdjust(t, l, "open-A", "A", 100_000)
	MustAdjust(t, l, "open-B", "B", 100_000)
	jan10 := time.Date(2025, 1, 10, 11, 0, 0, 0, shanghai)
	seq := fillDays(t, l, 1, 1500, jan10, jan10.AddDate(0, 0, 1), jan10.AddDate(0, 0, 2))
	fillDays(t, l, seq, 500, day)
	archiveAll(t, l, "2025-01-10", "2025-01-11", "2025-01-12")
	before := fileBytes(t, l)
	c, err := l.Compact(ctx, false, 0)
	if err != nil {
		t.Fatal(err)
	}
	after := fileBytes(t, l)
	t.Logf("ledger file %d KiB before, %d KiB after (Compact: %+v)", before>>10, after>>10, c)
	if c.Full || c.After >= c.Before || after*2 > before {
		t.Errorf("compact of an incremental ledger: %+v, file %d -> %d bytes; want it at most half", c, before, after)
	}
	if _, _, free, _, err := l.pageStats(ctx); err != nil || free != 0 {
		t.Errorf("free pages after the compact: %d (%v)", free, err)
	}
	mustStock(t, l)
	if v := mustDayView(t, l, "2025-01-11"); v.Totals["T1"].Sales != 1500 {
		t.Errorf("an archived day after the compact: %+v", v.Totals)
	}
}

// TestCompactV010Ledger: a ledger made by v0.1.0 (auto_vacuum NONE) is rewritten by one
// VACUUM only when the store is quiet, and is incremental after; a budget stops the steps.
func TestCompactV010Ledger(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	v010Ledger(t, path)
	l := mustOpenAt(t, path, day)
	defer l.Close()
	if m := mustAutoVacuum(t, l); m != 0 {
		t.Fatalf("the v0.1.0 ledger's auto_vacuum is %d, want 0 (NONE)", m)
	}
	MustAdjust(t, l, "open-A", "A", 100_000)
	MustAdjust(t, l, "open-B", "B", 100_000)
	jan12 := time.Date(2025, 1, 12, 11, 0, 0, 0, shanghai)
	seq := fillDays(t, l, 2, 1500, jan12, jan12.AddDate(0, 0, 1))
	fillDays(t, l, seq, 500, day)
	if quiet, err := l.QuietSince(ctx, day.Add(-time.Hour)); err != nil || quiet {
		t.Fatalf("quiet with sales received just now: %v (%v)", quiet, err)
	}
	archiveAll(t, l, "2025-01-10", "2025-01-12", "2025-01-13")
	before := fileBytes(t, l)
	if c, err := l.Compact(ctx, false, 0); err != nil || c.Full || c.After != c.Before {
		t.Fatalf("compact of a v0.1.0 ledger while trading: %+v (%v), want nothing done", c, err)
	}
	if quiet, err := l.QuietSince(ctx, day.Add(time.Minute)); err != nil || !quiet {
		t.Fatalf("quiet since after the last sale: %v (%v)", quiet, err)
	}
	c, err := l.Compact(ctx, true, 0)
	if err != nil {
		t.Fatal(err)
	}
	after := fileBytes(t, l)
	t.Logf("v0.1.0 ledger file %d KiB before, %d KiB after (Compact: %+v)", before>>10, after>>10, c)
	if !c.Full || after*2 > before {
		t.Errorf("compact of a quiet v0.1.0 ledger: %+v, file %d -> %d bytes; want a VACUUM, at most half", c, before, after)
	}
	if m := mustAutoVacuum(t, l); m != autoVacuumIncremental {
		t.Errorf("auto_vacuum after the VACUUM: %d, want incremental", m)
	}
	mustStock(t, l)

	// Incremental now: a pass with a budget of nothing takes one step, and the rest later.
	jan14 := time.Date(2025, 1, 14, 11, 0, 0, 0, shanghai)
	fillDays(t, l, 10_000, 4000, jan14)
	archiveAll(t, l, "2025-01-14")
	_, _, free, _, err := l.pageStats(ctx)
	if err != nil || free <= 2*compactStep {
		t.Fatalf("free pages after the next archive: %d (%v); want more than two steps", free, err)
	}
	if c, err = l.Compact(ctx, false, time.Nanosecond); err != nil || c.Full ||
		c.Before-c.After < compactStep*4096 || c.Before-c.After >= 2*compactStep*4096 {
		t.Errorf("a step with no budget left: %+v (%v), want one step of %d pages", c, err, compactStep)
	}
	if c, err = l.Compact(ctx, false, 0); err != nil || c.After >= c.Before {
		t.Errorf("the rest: %+v (%v)", c, err)
	}
}
