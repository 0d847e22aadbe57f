package ledger

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/posgate/posgate/hq-sync/hq"
)

// TestSeqGapIsAnException: a seq gap the store records is an exception change of kind
// seq_gap (key: terminal, from_seq, no sku), read for HQ under the business date of the
// event after it, saying which seqs are lacking and why; the reader of an HQ that does not
// take seq gaps stops before it, and the counts say the changes from it on wait. HQ heard
// nothing of a gap: the till's day close differed from the store's rows with nothing to say
// why.
func TestSeqGapIsAnException(t *testing.T) {
	ctx := context.Background()
	// The store hears of the events two days on (the till was offline), at 07:00 store time:
	// 23:00 the day before in UTC.
	later := time.Date(2025, 3, 3, 7, 0, 0, 0, shanghai)
	l := MustOpen(t, later)
	MustAdjust(t, l, "open-A", "A", 10)
	sale := accepted("T1", 5, day, salePayload("T1-5", []item{{"A", 1, 100}}))
	sale.Gap = &SeqGap{From: 2, To: 4, Reason: GapRestored}
	MustCommit(t, l, sale)
	first := accepted("T2", 3, day, salePayload("T2-3", []item{{"A", 1, 100}}))
	first.Gap = &SeqGap{From: 1, To: 2, Reason: GapNewLedger}
	MustCommit(t, l, first)

	var all []hq.Exception
	err := l.ViewHQ(ctx, func(r *HQReader) error {
		var err error
		if all, _, _, err = r.ExceptionsAfter(ctx, 0, 100, true, true, true); err != nil {
			return err
		}
		held, _, _, err := r.ExceptionsAfter(ctx, 0, 100, true, true, false)
		if err != nil {
			return err
		}
		if len(held) != 0 {
			t.Errorf("an HQ without seq gaps is sent %q", briefs(held))
		}
		c, err := r.ExceptionChangesAfter(ctx, 0)
		if err != nil {
			return err
		}
		if c.All != 2 || c.FromGaps != 2 || c.FromParked != 0 {
			t.Errorf("change counts %+v, want 2, both from the first seq gap on", c)
		}
		for _, w := range []struct {
			gaps, want bool
		}{{false, true}, {true, false}} {
			got, err := r.ChangesWaiting(ctx, 0, true, true, true, w.gaps)
			if err != nil {
				return err
			}
			if got != w.want {
				t.Errorf("changes waiting with HQ taking seq gaps %v: %v, want %v", w.gaps, got, w.want)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"seq_gap T1:2  " + dayDate + " restored", "seq_gap T2:1  " + dayDate + " new_ledger"}
	if got := briefs(all); !slices.Equal(got, want) {
		t.Fatalf("exceptions %q, want %q", got, want)
	}
	if d := all[0].Detail; !strings.HasPrefix(d, "seqs 2 to 4 of terminal T1: ") || !strings.Contains(d, "backup") {
		t.Errorf("the restored gap says %q", d)
	}
	if d := all[1].Detail; !strings.HasPrefix(d, "seqs 1 to 2 of terminal T2: ") || !strings.Contains(d, "data directory") {
		t.Errorf("the new ledger's gap says %q", d)
	}
	if !all[0].At.Equal(later) || all[0].Resolved {
		t.Errorf("the gap at %v, resolved %v; want recorded at %v, open", all[0].At, all[0].Resolved, later)
	}

	// An event after the gap without a date: the gap goes under the store's date when it
	// was recorded (not the UTC date).
	if _, err := l.db.W.Exec(`UPDATE events SET business_date = '' WHERE terminal = 'T1' AND seq = 5`); err != nil {
		t.Fatal(err)
	}
	xs, _ := exceptionsAfter(t, l, 0, 100)
	if len(xs) != 2 || xs[0].BusinessDate != "2025-03-03" {
		t.Errorf("a gap whose event has no date: %q, want it under 2025-03-03", briefs(xs))
	}
}

// TestReaderOfALedgerBefore022: the uploader may be upgraded before its store-server, and
// reads a ledger migrated through 021 that has recorded a gap: there is no change of it to
// read, and reading goes on. Migration 022 then makes the gap a change, once.
func TestReaderOfALedgerBefore022(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	db := openBefore(t, path, "022")
	for _, q := range []string{
		`INSERT INTO meta (k, v) VALUES ('store_id', '` + testStore + `')`,
		`INSERT INTO seq_gaps (terminal, from_seq, to_seq, at_ms, reason) VALUES ('T1', 3, 7, 1740794400000, 'restored')`,
	} {
		if _, err := db.W.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	db.Close()
	l, err := OpenReader(ctx, path, testStore, shanghai)
	if err != nil {
		t.Fatal(err)
	}
	if xs, _ := exceptionsAfter(t, l, 0, 100); len(xs) != 0 {
		t.Errorf("exceptions of a ledger before 022: %q, want none", briefs(xs))
	}
	err = l.ViewHQ(ctx, func(r *HQReader) error {
		c, err := r.ExceptionChangesAfter(ctx, 0)
		if err == nil && c != (ChangeCounts{}) {
			t.Errorf("change counts of a ledger before 022: %+v, want none", c)
		}
		return err
	})
	l.Close()
	if err != nil {
		t.Fatal(err)
	}

	w := mustOpenAt(t, path, day) // the store-server upgraded: 022 runs
	xs, _ := exceptionsAfter(t, w, 0, 100)
	if got, want := briefs(xs), []string{"seq_gap T1:3  2025-03-01 restored"}; !slices.Equal(got, want) {
		t.Fatalf("exceptions after 022: %q, want %q", got, want)
	}
}
