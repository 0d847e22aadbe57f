package ledger

import (
	"context"
	"io/fs"
	"path/filepath"
	"testing"
	"testing/fstest"

	"github.com/posgate/posgate/internal/perr"
	"github.com/posgate/posgate/internal/sqlitedb"
	"github.com/posgate/posgate/schema"
)

// replayed marks an accepted record as a till's replay of an event the ledger lost, with the
// flow number the store gave it first.
func replayed(r Record, flow int64) Record {
	r.FlowNo, r.Replayed, r.Offline = flow, true, true
	return r
}

// TestReplayedFlowGivenAgain: a replayed sale whose flow number the store gave another sale
// since it lost the event is booked under the date's next number and recorded as a flow
// exception naming both numbers and the sale that holds the receipt's; a replay whose number
// is free keeps it and flags nothing; the replay delivered again adds nothing. A manager
// lists and resolves the exception like an oversell.
func TestReplayedFlowGivenAgain(t *testing.T) {
	ctx := context.Background()
	l := MustOpen(t, day)
	MustAdjust(t, l, "open-A", "A", 10)
	// T1:1 took flow number 7 while the ledger lacked T2:1 (degrade mode after a restore).
	MustCommit(t, l, withFlow(accepted("T1", 1, day, salePayload("s1", []item{{"A", 1, 100}})), 7))
	again := replayed(accepted("T2", 1, day, salePayload("s2", []item{{"A", 1, 100}})), 7)
	out := MustCommit(t, l, again,
		replayed(accepted("T2", 2, day, salePayload("s3", []item{{"A", 1, 100}})), 9))
	if out[0].Err != nil || out[0].FlowNo != 8 || out[1].Err != nil || out[1].FlowNo != 9 {
		t.Fatalf("replays booked %+v, %+v; want flow numbers 8 (7 was taken) and 9", out[0], out[1])
	}
	MustCommit(t, l, again) // delivered again: answered from the ledger
	xs, err := l.FlowExceptions(ctx, "", false)
	if err != nil {
		t.Fatal(err)
	}
	if len(xs) != 1 {
		t.Fatalf("flow exceptions %+v, want one", xs)
	}
	x := xs[0]
	if x.Terminal != "T2" || x.Seq != 1 || x.Kind != "sale" || x.FlowGiven != 7 || x.FlowBooked != 8 ||
		x.HeldBy != "T1:1" || x.BusinessDate != dayDate || !x.At.Equal(day) || x.Resolved {
		t.Fatalf("flow exception %+v", x)
	}
	if n, err := l.OpenFlowExceptions(ctx); err != nil || n != 1 {
		t.Fatalf("open flow exceptions %d, %v; want 1", n, err)
	}
	if xs, _ := l.FlowExceptions(ctx, "2025-03-02", true); len(xs) != 0 {
		t.Fatalf("flow exceptions of another date: %+v", xs)
	}

	if _, _, err := l.ResolveFlow(ctx, "T2", 1, "  "); perr.CodeOf(err) != CodeFlowResolutionRequired {
		t.Fatalf("resolve without a note: %v", err)
	}
	if _, _, err := l.ResolveFlow(ctx, "T2", 2, "n/a"); perr.CodeOf(err) != CodeFlowNotFound {
		t.Fatalf("resolve an event without a flow exception: %v", err)
	}
	r, applied, err := l.ResolveFlow(ctx, "T2", 1, "receipt 7 of T2 reprinted as 8")
	if err != nil || !applied || !r.Resolved || r.Resolution != "receipt 7 of T2 reprinted as 8" {
		t.Fatalf("resolve: %+v applied %v, %v", r, applied, err)
	}
	if _, applied, err := l.ResolveFlow(ctx, "T2", 1, "other"); err != nil || applied {
		t.Fatalf("resolve again: applied %v, %v; want the first resolution to stand", applied, err)
	}
	if n, _ := l.OpenFlowExceptions(ctx); n != 0 {
		t.Fatalf("open flow exceptions after resolving: %d", n)
	}
	if xs, _ := l.FlowExceptions(ctx, dayDate, true); len(xs) != 1 || !xs[0].Resolved {
		t.Fatalf("flow exceptions with the resolved ones: %+v", xs)
	}
}

// TestFlowExceptionsMigration: a ledger made by v0.1.0's migration alone opens, takes the
// flow_exceptions table, and records one.
func TestFlowExceptionsMigration(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	first, err := fs.ReadFile(schema.Store(), "001_ledger.sql")
	if err != nil {
		t.Fatal(err)
	}
	old, err := sqlitedb.Open(ctx, path, fstest.MapFS{"001_ledger.sql": {Data: first}})
	if err != nil {
		t.Fatal(err)
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	l := mustOpenAt(t, path, day)
	MustAdjust(t, l, "open-A", "A", 10)
	MustCommit(t, l, withFlow(accepted("T1", 1, day, salePayload("s1", []item{{"A", 1, 100}})), 3),
		replayed(accepted("T2", 1, day, salePayload("s2", []item{{"A", 1, 100}})), 3))
	if n, err := l.OpenFlowExceptions(ctx); err != nil || n != 1 {
		t.Fatalf("open flow exceptions in a migrated v0.1.0 ledger: %d, %v; want 1", n, err)
	}
}
