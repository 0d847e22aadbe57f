package ledger

import (
	"context"
	"io/fs"
	"path/filepath"
	"testing"
	"testing/fstest"

	"github.com/posgate/posgate/internal/hqwire"
	"github.com/posgate/posgate/internal/sqlitedb"
	"github.com/posgate/posgate/schema"
)

func flowsAfter(t *testing.T, l *Ledger, after int64) ([]hqwire.FlowException, int64) {
	t.Helper()
	xs, last, err := l.FlowExceptionsAfter(context.Background(), after, 100)
	if err != nil {
		t.Fatal(err)
	}
	return xs, last
}

// TestFlowExceptionChanges: a flow exception booked is one change HQ is sent, its resolution
// another, with the state the ledger holds then; the changes and their numbers stay across a
// restart, and the next change is numbered above them.
func TestFlowExceptionChanges(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	l := mustOpenAt(t, path, day)
	MustAdjust(t, l, "open-A", "A", 10)
	MustCommit(t, l, withFlow(accepted("T1", 1, day, salePayload("s1", []item{{"A", 1, 100}})), 7))
	if xs, last := flowsAfter(t, l, 0); len(xs) != 0 || last != 0 {
		t.Fatalf("changes before any flow exception: %+v, last %d", xs, last)
	}
	MustCommit(t, l, replayed(accepted("T2", 1, day, salePayload("s2", []item{{"A", 1, 100}})), 7))
	xs, booked := flowsAfter(t, l, 0)
	if len(xs) != 1 || xs[0].Change != booked || xs[0].Terminal != "T2" || xs[0].Seq != 1 ||
		xs[0].Kind != hqwire.FlowSale || xs[0].FlowGiven != 7 || xs[0].FlowBooked != 8 || xs[0].HeldBy != "T1:1" ||
		xs[0].BusinessDate != dayDate || !xs[0].At.Equal(day) || xs[0].Resolved {
		t.Fatalf("booked: %+v (last %d)", xs, booked)
	}
	if top, err := l.MaxFlowChange(ctx); err != nil || top != booked {
		t.Fatalf("max flow change %d, %v; want %d", top, err, booked)
	}
	if xs, last := flowsAfter(t, l, booked); len(xs) != 0 || last != booked {
		t.Fatalf("changes after the last: %+v, last %d", xs, last)
	}
	if _, _, err := l.ResolveFlow(ctx, "T2", 1, "receipt 7 of T2 reprinted as 8"); err != nil {
		t.Fatal(err)
	}
	xs, resolved := flowsAfter(t, l, booked)
	if len(xs) != 1 || resolved <= booked || xs[0].Change != resolved || !xs[0].Resolved ||
		xs[0].Resolution != "receipt 7 of T2 reprinted as 8" || xs[0].ResolvedAt.IsZero() {
		t.Fatalf("resolved: %+v (last %d, booked %d)", xs, resolved, booked)
	}
	// Both changes read at once: one state, the latest, under the last change.
	if xs, last := flowsAfter(t, l, 0); len(xs) != 1 || last != resolved || xs[0].Change != resolved || !xs[0].Resolved {
		t.Fatalf("both changes: %+v, last %d", xs, last)
	}

	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = mustOpenAt(t, path, day)
	if xs, last := flowsAfter(t, l, booked); len(xs) != 1 || last != resolved || !xs[0].Resolved {
		t.Fatalf("after a restart: %+v, last %d; want the resolution under %d", xs, last, resolved)
	}
	MustCommit(t, l, replayed(accepted("T2", 2, day, salePayload("s3", []item{{"A", 1, 100}})), 8))
	xs, next := flowsAfter(t, l, resolved)
	if len(xs) != 1 || next <= resolved || xs[0].Seq != 2 || xs[0].FlowGiven != 8 || xs[0].HeldBy != "T2:1" {
		t.Fatalf("booked after the restart: %+v, last %d (resolved %d)", xs, next, resolved)
	}
}

// TestFlowExceptionChangesMigration: a ledger made by the migrations before
// flow_exception_changes, holding a flow exception, has no change to send to an uploader
// that reads it before the store-server migrates it; migrated, its flow exception is one
// change to send, and a new one is numbered above it.
func TestFlowExceptionChangesMigration(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	before := fstest.MapFS{}
	for _, name := range []string{"001_ledger.sql", "002_archive_indexes.sql", "003_stock_unknown.sql",
		"004_flow_exceptions.sql"} {
		data, err := fs.ReadFile(schema.Store(), name)
		if err != nil {
			t.Fatal(err)
		}
		before[name] = &fstest.MapFile{Data: data}
	}
	old, err := sqlitedb.Open(ctx, path, before)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := old.W.ExecContext(ctx, `INSERT INTO flow_exceptions (terminal, seq, kind, flow_given, flow_booked,
		at, business_date, resolved, resolved_at, resolution) VALUES ('T2', 1, 'sale', 3, 4, ?, ?, 1, ?, 'told apart')`,
		day.UTC().Format(timeFormat), dayDate, day.UTC().Format(timeFormat)); err != nil {
		t.Fatal(err)
	}
	if _, err := old.W.ExecContext(ctx, `INSERT INTO meta (k, v) VALUES ('store_id', ?)`, testStore); err != nil {
		t.Fatal(err)
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	// The uploader reads it before the store-server migrates it: no flow exception yet.
	r, err := OpenReader(ctx, path, testStore, shanghai)
	if err != nil {
		t.Fatal(err)
	}
	if top, err := r.MaxFlowChange(ctx); err != nil || top != 0 {
		t.Fatalf("max flow change of a ledger before 005: %d, %v", top, err)
	}
	r.Close()
	l := mustOpenAt(t, path, day)
	xs, first := flowsAfter(t, l, 0)
	if len(xs) != 1 || xs[0].Seq != 1 || xs[0].FlowGiven != 3 || !xs[0].Resolved || xs[0].Resolution != "told apart" {
		t.Fatalf("the flow exception of before the migration: %+v", xs)
	}
	MustAdjust(t, l, "open-A", "A", 10)
	MustCommit(t, l, withFlow(accepted("T1", 1, day, salePayload("s1", []item{{"A", 1, 100}})), 5),
		replayed(accepted("T2", 2, day, salePayload("s2", []item{{"A", 1, 100}})), 5))
	if xs, last := flowsAfter(t, l, first); len(xs) != 1 || xs[0].Seq != 2 || last <= first {
		t.Fatalf("a flow exception after the migration: %+v, last %d (first %d)", xs, last, first)
	}
}

// TestWaitingCounts: what an uploader has still to send of the adjustments and the flow
// exception changes, after the last it had acknowledged: those after it, or all of them when
// the ledger's last is below it (a ledger restored from a backup, which it sends again).
func TestWaitingCounts(t *testing.T) {
	ctx := context.Background()
	l := mustOpenAt(t, filepath.Join(t.TempDir(), "ledger.db"), day)
	MustAdjust(t, l, "open-A", "A", 10)
	MustAdjust(t, l, "open-B", "B", 10)
	MustCommit(t, l, withFlow(accepted("T1", 1, day, salePayload("s1", []item{{"A", 1, 100}})), 7))
	MustCommit(t, l, replayed(accepted("T2", 1, day, salePayload("s2", []item{{"A", 1, 100}})), 7))
	_, flow := flowsAfter(t, l, 0)
	for _, c := range []struct {
		moves, flows       int64
		wantMoves, wantFlw int64
	}{
		{0, 0, 2, 1},          // nothing acknowledged
		{1, flow, 1, 0},       // the first adjustment and the flow change acknowledged
		{2, flow, 0, 0},       // everything
		{99, flow + 99, 2, 1}, // acknowledged past the ledger's last: sent again, all of them
		{2, flow - 1, 0, 1},   // the flow change not yet
	} {
		err := l.ViewHQ(ctx, func(r *HQReader) error {
			m, err := r.AdjustmentsWaiting(ctx, c.moves)
			if err != nil {
				return err
			}
			f, err := r.FlowChangesWaiting(ctx, c.flows)
			if err != nil {
				return err
			}
			if m != c.wantMoves || f != c.wantFlw {
				t.Errorf("after %d and %d: %d adjustments and %d flow changes waiting, want %d and %d",
					c.moves, c.flows, m, f, c.wantMoves, c.wantFlw)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}
