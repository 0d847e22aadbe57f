package ledger

import (
	"context"
	"io/fs"
	"path/filepath"
	"testing"
	"testing/fstest"
	"time"

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
	if top := readerMaxFlowChange(t, path); top != 0 {
		t.Fatalf("max flow change of a ledger before 005: %d", top)
	}
	l := mustOpenAt(t, path, day)
	xs, first := flowsAfter(t, l, 0)
	if len(xs) != 1 || xs[0].Seq != 1 || xs[0].FlowGiven != 3 || !xs[0].Resolved || xs[0].Resolution != "told apart" {
		t.Fatalf("the flow exception of before the migration: %+v", xs)
	}
	MustAdjust(t, l, "open-A", "A", 10)
	MustCommit(t, l, withFlow(accepted("T1", 1, day, salePayload("s1", []item{{"A", 1, 100}})), 5),
		replayed(accepted("T2", 2, day, salePayload("s2", []item{{"A", 1, 100}})), 5))
	// T1:1 takes flow number 5 in the group the replay of T2:2 comes in: it holds it.
	if xs, last := flowsAfter(t, l, first); len(xs) != 1 || xs[0].Seq != 2 || xs[0].HeldBy != "T1:1" || last <= first {
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

// TestFlowHolderAfterArchive: a flow exception names the transaction that holds the
// receipt's number after that day's events moved to their month's archive: the resolution
// the uploader sends HQ after the archive, and the manager's list, still name it.
func TestFlowHolderAfterArchive(t *testing.T) {
	ctx := context.Background()
	l := mustOpenAt(t, filepath.Join(t.TempDir(), "ledger.db"), day)
	MustAdjust(t, l, "open-A", "A", 10)
	jan10 := time.Date(2025, 1, 10, 11, 0, 0, 0, shanghai)
	MustCommit(t, l, withFlow(accepted("T1", 1, jan10, salePayload("s1", []item{{"A", 1, 100}})), 7))
	MustCommit(t, l, replayed(accepted("T2", 1, jan10, salePayload("s2", []item{{"A", 1, 100}})), 7),
		withFlow(accepted("T1", 2, day, salePayload("s3", []item{{"A", 1, 100}})), 1),
		withFlow(accepted("T2", 2, day, salePayload("s4", []item{{"A", 1, 100}})), 2))
	xs, booked := flowsAfter(t, l, 0)
	if len(xs) != 1 || xs[0].Seq != 1 || xs[0].FlowGiven != 7 || xs[0].HeldBy != "T1:1" {
		t.Fatalf("booked: %+v", xs)
	}
	mustOutOfRedis(t, l, "2025-01-10")
	got, err := l.Archive(ctx, "2025-02-01", mustMaxOutbox(t, l))
	if err != nil || len(got) != 1 || got[0].Events != 2 {
		t.Fatalf("archive: %+v (%v), want 2025-01-10's two events moved", got, err)
	}
	if n := mustEventsOf(t, l.db.R, "2025-01-10"); n != 0 {
		t.Fatalf("the ledger holds %d events of the archived day", n)
	}
	if _, _, err := l.ResolveFlow(ctx, "T2", 1, "receipt 7 of T2 reprinted as 8"); err != nil {
		t.Fatal(err)
	}
	xs, _ = flowsAfter(t, l, booked)
	if len(xs) != 1 || !xs[0].Resolved || xs[0].HeldBy != "T1:1" {
		t.Fatalf("the resolution sent after the archive: %+v, want it to name T1:1, which holds flow 7", xs)
	}
	list, err := l.FlowExceptions(ctx, "2025-01-10", true)
	if err != nil || len(list) != 1 || list[0].HeldBy != "T1:1" {
		t.Fatalf("the manager's list after the archive: %+v (%v), want T1:1 named", list, err)
	}
}

// TestFlowHolderMigration: a ledger made by the migrations before 006 (v0.1.0's and 002 to
// 005) holding two flow exceptions, one whose receipt's number an event holds and one whose
// no event does, is not read by an uploader before the store-server migrates it; migrated,
// each names its holder as the events say, the fill is no change to send, and a resolution
// after it sends the holder.
func TestFlowHolderMigration(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	before := fstest.MapFS{}
	entries, err := fs.ReadDir(schema.Store(), ".")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() >= "006" {
			continue
		}
		data, err := fs.ReadFile(schema.Store(), e.Name())
		if err != nil {
			t.Fatal(err)
		}
		before[e.Name()] = &fstest.MapFile{Data: data}
	}
	if len(before) != 5 {
		t.Fatalf("migrations before 006: %d, want 001 to 005", len(before))
	}
	old, err := sqlitedb.Open(ctx, path, before)
	if err != nil {
		t.Fatal(err)
	}
	at := day.UTC().Format(timeFormat)
	for _, q := range []string{
		`INSERT INTO meta (k, v) VALUES ('store_id', '` + testStore + `')`,
		`INSERT INTO events (terminal, seq, kind, hash, at, business_date, status, final, flow_no, received_ms, payload) VALUES
			('T1', 1, 'sale', 'h1', '` + at + `', '` + dayDate + `', 'accepted', 1, 7, 0, '{}'),
			('T2', 1, 'sale', 'h2', '` + at + `', '` + dayDate + `', 'accepted', 1, 8, 0, '{}'),
			('T2', 2, 'sale', 'h3', '` + at + `', '` + dayDate + `', 'accepted', 1, 9, 0, '{}')`,
		`INSERT INTO flow_exceptions (terminal, seq, kind, flow_given, flow_booked, at, business_date) VALUES
			('T2', 1, 'sale', 7, 8, '` + at + `', '` + dayDate + `'), ('T2', 2, 'sale', 3, 9, '` + at + `', '` + dayDate + `')`,
	} {
		if _, err := old.W.ExecContext(ctx, q); err != nil {
			t.Fatalf("%v\n%s", err, q)
		}
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	if top := readerMaxFlowChange(t, path); top != 0 {
		t.Fatalf("max flow change of a ledger before 006, read by an uploader: %d; want 0 until it is migrated", top)
	}

	l := mustOpenAt(t, path, day)
	changes := func() int {
		var n int
		if err := l.db.R.QueryRow(`SELECT count(*) FROM flow_exception_changes`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := changes(); n != 2 {
		t.Fatalf("%d flow exception changes after the migration, want the 2 bookings (the fill is no change)", n)
	}
	xs, last := flowsAfter(t, l, 0)
	if len(xs) != 2 || xs[0].Seq != 1 || xs[0].HeldBy != "T1:1" || xs[1].Seq != 2 || xs[1].HeldBy != "" {
		t.Fatalf("flow exceptions after the migration: %+v; want T2:1 held by T1:1 and T2:2 by none", xs)
	}
	if _, _, err := l.ResolveFlow(ctx, "T2", 1, "told apart"); err != nil {
		t.Fatal(err)
	}
	if xs, _ := flowsAfter(t, l, last); changes() != 3 || len(xs) != 1 || !xs[0].Resolved || xs[0].HeldBy != "T1:1" {
		t.Fatalf("the resolution after the migration: %+v (%d changes)", xs, changes())
	}
}

// TestReplayOfAnArchivedNumber: a replay bringing a flow number of a day the ledger has
// archived since, which an archived event holds, takes a new number and is a flow
// exception naming the archived holder (the ledger's events no longer show the number
// taken); a replay of the same day bringing a number no event holds keeps it.
func TestReplayOfAnArchivedNumber(t *testing.T) {
	ctx := context.Background()
	l := mustOpenAt(t, filepath.Join(t.TempDir(), "ledger.db"), day)
	MustAdjust(t, l, "open-A", "A", 10)
	jan10 := time.Date(2025, 1, 10, 11, 0, 0, 0, shanghai)
	MustCommit(t, l, withFlow(accepted("T1", 1, jan10, salePayload("s1", []item{{"A", 1, 100}})), 7),
		withFlow(accepted("T1", 2, jan10, salePayload("s2", []item{{"A", 1, 100}})), 9))
	mustOutOfRedis(t, l, "2025-01-10")
	if got, err := l.Archive(ctx, "2025-02-01", mustMaxOutbox(t, l)); err != nil || len(got) != 1 {
		t.Fatalf("archive: %+v (%v)", got, err)
	}
	out := MustCommit(t, l, replayed(accepted("T2", 1, jan10, salePayload("s3", []item{{"A", 1, 100}})), 7),
		replayed(accepted("T2", 2, jan10, salePayload("s4", []item{{"A", 1, 100}})), 8))
	if out[0].FlowNo <= 9 || out[1].FlowNo != 8 {
		t.Fatalf("booked under %d and %d: want T2:1 above the archived day's 9 (its 7 is T1:1's), T2:2 under its 8",
			out[0].FlowNo, out[1].FlowNo)
	}
	xs, _ := flowsAfter(t, l, 0)
	if len(xs) != 1 || xs[0].Terminal != "T2" || xs[0].Seq != 1 || xs[0].FlowGiven != 7 || xs[0].HeldBy != "T1:1" {
		t.Fatalf("flow exceptions: %+v, want T2:1's receipt 7, held by the archived T1:1", xs)
	}
}

// readerMaxFlowChange returns MaxFlowChange of the ledger at path as an uploader reads it
// (OpenReader: no migration).
func readerMaxFlowChange(t *testing.T, path string) int64 {
	t.Helper()
	r, err := OpenReader(context.Background(), path, testStore, shanghai)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	top, err := r.MaxFlowChange(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return top
}
