package ledger

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/posgate/posgate/internal/hqwire"
)

// TestSeqGapIsAnException: a seq gap the store records is an exception change of kind
// seq_gap (key: terminal, from_seq, no sku), read for HQ under the business date of the
// event after it, saying which seqs are lacking and why, and counted among the changes
// waiting. HQ heard nothing of a gap: the till's day close differed from the store's rows
// with nothing to say why.
func TestSeqGapIsAnException(t *testing.T) {
	ctx := context.Background()
	// The store hears of the events two days on (the till was offline), at 07:00 store time:
	// 23:00 the day before in UTC.
	later := time.Date(2025, 3, 3, 7, 0, 0, 0, shanghai)
	l := MustOpen(t, later)
	MustAdjust(t, l, "open-A", "A", 10)
	sale := accepted("T1", 5, day, salePayload("T1-5", []item{{"A", 1, 100}}))
	sale.Gap = &SeqGap{From: 2, To: 4, Reason: GapPruned}
	MustCommit(t, l, sale)
	first := accepted("T2", 3, day, salePayload("T2-3", []item{{"A", 1, 100}}))
	first.Gap = &SeqGap{From: 1, To: 2, Reason: GapPruned}
	MustCommit(t, l, first)

	var all []hqwire.Exception
	err := l.ViewHQ(ctx, func(r *HQReader) error {
		var err error
		if all, _, _, err = r.ExceptionsAfter(ctx, 0, 100); err != nil {
			return err
		}
		n, err := r.ExceptionChangesAfter(ctx, 0)
		if err != nil {
			return err
		}
		if n != 2 {
			t.Errorf("%d exception changes, want 2", n)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"seq_gap T1:2  " + dayDate + " pruned", "seq_gap T2:1  " + dayDate + " pruned"}
	if got := briefs(all); !slices.Equal(got, want) {
		t.Fatalf("exceptions %q, want %q", got, want)
	}
	if d := all[0].Detail; !strings.HasPrefix(d, "seqs 2 to 4 of terminal T1: ") || !strings.Contains(d, "no longer held") {
		t.Errorf("the first gap says %q", d)
	}
	if d := all[1].Detail; !strings.HasPrefix(d, "seqs 1 to 2 of terminal T2: ") || !strings.Contains(d, "(pruned)") {
		t.Errorf("the second gap says %q", d)
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
