package ledger

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
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
	// A TRUNCATE checkpoint is busy (and copies nothing) while the background checkpointer's
	// own pass runs: the file would miss the pages still in the log.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var busy, log, done int
		if err := l.db.W.QueryRow(`PRAGMA wal_checkpoint(TRUNCATE)`).Scan(&busy, &log, &done); err != nil {
			t.Fatal(err)
		}
		if busy == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the log stays busy: %d frames, %d copied", log, done)
		}
	}
	fi, err := os.Stat(l.db.Path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
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

// TestCompact: after the archive moved most of a ledger's rows, Compact rewrites it only
// when the store is quiet, and the file shrinks; stock stays provable and the archived days
// read the same. Quiet is no sale received since the time asked.
func TestCompact(t *testing.T) {
	ctx := context.Background()
	l := mustOpenAt(t, filepath.Join(t.TempDir(), "ledger.db"), day)
	defer l.Close()
	MustAdjust(t, l, "open-A", "A", 100_000)
	MustAdjust(t, l, "open-B", "B", 100_000)
	jan10 := time.Date(2025, 1, 10, 11, 0, 0, 0, shanghai)
	seq := fillDays(t, l, 1, 1500, jan10, jan10.AddDate(0, 0, 1), jan10.AddDate(0, 0, 2))
	fillDays(t, l, seq, 500, day)
	if quiet, err := l.QuietSince(ctx, day.Add(-time.Hour)); err != nil || quiet {
		t.Fatalf("quiet with sales received just now: %v (%v)", quiet, err)
	}
	before := mustDayView(t, l, "2025-01-11")
	archiveAll(t, l, "2025-01-10", "2025-01-11", "2025-01-12")
	size := fileBytes(t, l)
	if c, err := l.Compact(ctx, false); err != nil || c.Vacuumed || c.After != c.Before {
		t.Fatalf("compact while trading: %+v (%v), want nothing done", c, err)
	}
	if quiet, err := l.QuietSince(ctx, day.Add(time.Minute)); err != nil || !quiet {
		t.Fatalf("quiet since after the last sale: %v (%v)", quiet, err)
	}
	c, err := l.Compact(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	after := fileBytes(t, l)
	t.Logf("ledger file %d KiB before, %d KiB after (Compact: %+v)", size>>10, after>>10, c)
	if !c.Vacuumed || after*2 > size {
		t.Errorf("compact of a quiet ledger a quarter free: %+v, file %d -> %d bytes; want a VACUUM, at most half", c, size, after)
	}
	if _, free, _, err := l.pageStats(ctx); err != nil || free != 0 {
		t.Errorf("free pages after the compact: %d (%v)", free, err)
	}
	mustStock(t, l)
	if v := mustDayView(t, l, "2025-01-11"); !reflect.DeepEqual(v, before) {
		t.Errorf("an archived day after the compact:\n got %+v\nwant %+v", v, before)
	}
	// Nothing much free now: quiet or not, nothing to do.
	if c, err := l.Compact(ctx, true); err != nil || c.Vacuumed {
		t.Errorf("compact with nothing free: %+v (%v)", c, err)
	}
}

// TestCompactV010Ledger: a ledger made by v0.1.0 compacts the same way.
func TestCompactV010Ledger(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	v010Ledger(t, path)
	l := mustOpenAt(t, path, day)
	defer l.Close()
	MustAdjust(t, l, "open-A", "A", 100_000)
	MustAdjust(t, l, "open-B", "B", 100_000)
	jan12 := time.Date(2025, 1, 12, 11, 0, 0, 0, shanghai)
	seq := fillDays(t, l, 2, 1500, jan12, jan12.AddDate(0, 0, 1))
	fillDays(t, l, seq, 500, day)
	archiveAll(t, l, "2025-01-10", "2025-01-12", "2025-01-13")
	size := fileBytes(t, l)
	c, err := l.Compact(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	after := fileBytes(t, l)
	t.Logf("v0.1.0 ledger file %d KiB before, %d KiB after (Compact: %+v)", size>>10, after>>10, c)
	if !c.Vacuumed || after*2 > size {
		t.Errorf("compact of a quiet v0.1.0 ledger: %+v, file %d -> %d bytes; want a VACUUM, at most half", c, size, after)
	}
	mustStock(t, l)
}
