package ledger

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/posgate/posgate/internal/wire"
)

// TestSeqGapStoredWithItsRecord: a record's Gap is stored in the record's commit, once: a
// redelivery (a duplicate) or the offline resend of a live refusal that carried it stores
// nothing more; a record that is not written stores no gap. Both ways of committing agree.
func TestSeqGapStoredWithItsRecord(t *testing.T) {
	for _, staged := range []bool{true, false} {
		withStaged(staged, func() {
			l := MustOpen(t, day)
			MustAdjust(t, l, "open-A", "A", 10)
			sale := accepted("T1", 5, day, salePayload("T1-5", []item{{"A", 1, 100}}))
			sale.Gap = &SeqGap{From: 1, To: 4, Reason: GapPruned}
			if o := MustCommit(t, l, sale); !o[0].GapRecorded || o[0].Status != wire.AckAccepted {
				t.Fatalf("staged %v: outcome %+v, want accepted with its gap recorded", staged, o[0])
			}
			if o := MustCommit(t, l, sale); !o[0].Duplicate || o[0].GapRecorded {
				t.Fatalf("staged %v: redelivery %+v, want a duplicate without a gap", staged, o[0])
			}
			refused := accepted("T2", 3, day, salePayload("T2-3", []item{{"A", 1, 100}}))
			refused.Status, refused.Final, refused.Code = wire.AckRateLimited, false, "rate_limited"
			refused.Gap = &SeqGap{From: 1, To: 2, Reason: GapPruned}
			if o := MustCommit(t, l, refused); !o[0].GapRecorded {
				t.Fatalf("staged %v: live refusal %+v, want its gap recorded", staged, o[0])
			}
			offline := accepted("T2", 3, day, salePayload("T2-3", []item{{"A", 1, 100}}))
			offline.Offline, offline.Gap = true, refused.Gap
			if o := MustCommit(t, l, offline); o[0].Status != wire.AckAccepted || o[0].GapRecorded {
				t.Fatalf("staged %v: offline resend %+v, want accepted, the gap already recorded", staged, o[0])
			}
			gaps, err := l.SeqGaps(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if g := gaps["T1"]; len(g) != 1 || g[0].From != 1 || g[0].To != 4 || g[0].Reason != GapPruned || g[0].At.IsZero() {
				t.Fatalf("staged %v: T1's gaps %+v", staged, g)
			}
			if g := gaps["T2"]; len(g) != 1 || g[0].From != 1 || g[0].To != 2 || g[0].Reason != GapPruned {
				t.Fatalf("staged %v: T2's gaps %+v", staged, g)
			}
			seen, err := l.Terminals(context.Background())
			if err != nil || len(seen) != 2 || len(seen[0].SeqGaps) != 1 || len(seen[1].SeqGaps) != 1 {
				t.Fatalf("staged %v: Terminals %+v %v, want each with its gap", staged, seen, err)
			}
		})
	}
}

// TestBackupMarksItsCopy: the backup's copy carries the mark; the ledger opened from it
// takes it once, as the time it was restored, later than every event it holds; the ledger
// backed up is not marked.
func TestBackupMarksItsCopy(t *testing.T) {
	ctx := context.Background()
	l := MustOpen(t, day)
	MustAdjust(t, l, "open-A", "A", 10)
	MustCommit(t, l, accepted("T1", 1, day, salePayload("T1-1", []item{{"A", 1, 100}})))
	dst := filepath.Join(t.TempDir(), "ledger.db")
	if err := l.Backup(ctx, dst); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := l.RestoredAt(ctx); ok || err != nil {
		t.Fatalf("the ledger backed up says restored: %v %v", ok, err)
	}
	db, err := sql.Open("sqlite3", "file:"+dst+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	var mark string
	err = db.QueryRow(`SELECT v FROM meta WHERE k = 'backup_ms'`).Scan(&mark)
	db.Close()
	if err != nil || mark == "" {
		t.Fatalf("the copy's mark: %q %v", mark, err)
	}
	before := day.Add(-24 * 3600e9) // this machine's clock behind the one that received T1:1
	// Opened by a store-server whose clock is behind the one that received T1:1, closed, and
	// opened again: the mark is taken by the first.
	restored := openWithClock(t, dst, before)
	first, ok, err := restored.RestoredAt(ctx)
	restored.Close()
	if err != nil || !ok {
		t.Fatalf("restored at %v %v %v", first, ok, err)
	}
	restored = openWithClock(t, dst, day.Add(time.Hour))
	defer restored.Close()
	at, ok, err := restored.RestoredAt(ctx)
	if err != nil || !ok || !at.Equal(first) || !at.After(day) {
		t.Fatalf("restored at %v %v %v, want after the events the copy holds", at, ok, err)
	}
}

// openWithClock opens the ledger at path with its clock standing at now from the start (the
// restore is taken when it opens).
func openWithClock(t *testing.T, path string, now time.Time) *Ledger {
	t.Helper()
	was := openClock
	openClock = func() time.Time { return now }
	defer func() { openClock = was }()
	l, err := Open(context.Background(), path, testStore, shanghai)
	if err != nil {
		t.Fatal(err)
	}
	l.Now = func() time.Time { return now }
	return l
}
