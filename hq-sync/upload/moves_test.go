package upload

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/posgate/posgate/hq-sync/serve"
	"github.com/posgate/posgate/internal/perr"
)

// TestMovesToServe: the store's stock adjustments (opening stock, an adjustment, a count)
// reach hq-sync serve with what each booked, once each, also when a new state sends them
// all again; a serve without the route (404, as v0.1.0's) leaves the batches going and the
// moves waiting.
func TestMovesToServe(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	s := MustOpenStore(t, dir)
	st := mustOpenHQ(t, dir)
	clk := newClock(day0.Add(time.Hour))
	srv := newOlderServe(t, st, clk.Now) // a serve that knows no moves route
	if _, _, err := s.l.Adjust(ctx, "open-A", "A", 40, "opening"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.l.Adjust(ctx, "adj-A", "A", -2, "adjust"); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := s.l.Count(ctx, "count-B", "B", 9); err != nil {
		t.Fatal(err)
	}
	s.Sales(5, day0)
	cfg := config(dir, s, srv.URL+serve.BatchesPath, clk.Now)
	u := MustNew(t, cfg)
	MustOnce(t, u)
	if rows, _ := st.ExportRows(ctx, testStore, "", 0, 100); len(rows) != 5 {
		t.Fatalf("HQ holds %d rows, want 5", len(rows))
	}
	if moves, _ := st.ExportMoves(ctx, testStore, 0, 100); len(moves) != 0 {
		t.Fatalf("a serve without the route holds %d moves", len(moves))
	}
	if stat, err := u.Status(ctx); err != nil || stat.MovesWaiting != 3 {
		t.Fatalf("status %+v (%v): want the 3 moves waiting", stat, err)
	}
	srv.old.Store(false)
	MustOnce(t, u)
	if stat, err := u.Status(ctx); err != nil || stat.MovesWaiting != 0 {
		t.Fatalf("status %+v (%v): want no move waiting once HQ took them", stat, err)
	}
	want, err := s.l.Adjustments(ctx, 0, 100)
	if err != nil || len(want) != 3 {
		t.Fatalf("ledger adjustments %+v, %v", want, err)
	}
	for pass := range 2 {
		got, err := st.ExportMoves(ctx, testStore, 0, 100)
		if err != nil || len(got) != 3 {
			t.Fatalf("pass %d: HQ holds %+v, %v", pass, got, err)
		}
		for i := range got {
			if got[i].ID != want[i].ID || got[i].N != want[i].N || got[i].Delta != want[i].Delta || !got[i].At.Equal(want[i].At) ||
				(got[i].Counted == nil) != (want[i].Counted == nil) {
				t.Errorf("pass %d: move %d at HQ %+v, ledger %+v", pass, i, got[i], want[i])
			}
		}
		u.Close()
		cfg.StatePath = cfg.StatePath + "-new" // a new state: everything goes again
		u = MustNew(t, cfg)
		MustOnce(t, u)
	}
}

// TestRefusedBatchLeavesSidesGoing: a batch HQ refuses holds back the rows after it, not the
// store's stock moves and flow exceptions, which carry nothing of it: Once sends them before
// it answers the refusal, and Run sends later ones while the batch waits for an operator.
func TestRefusedBatchLeavesSidesGoing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	s := MustOpenStore(t, dir)
	st := mustOpenHQ(t, dir)
	clk := newClock(day0.Add(time.Hour))
	srv := newOlderServe(t, st, clk.Now)
	srv.old.Store(false)
	srv.refuse.Store(true)
	for i, d := range []int64{40, -2} {
		if _, _, err := s.l.Adjust(ctx, fmt.Sprintf("adj-%d", i), "A", d, "adjust"); err != nil {
			t.Fatal(err)
		}
	}
	s.replayTakenFlow()
	date := s.l.BusinessDate(day0)
	moves := func() int {
		got, err := st.ExportMoves(ctx, testStore, 0, 100)
		if err != nil {
			t.Fatal(err)
		}
		return len(got)
	}

	u := MustNew(t, config(dir, s, srv.URL+serve.BatchesPath, clk.Now))
	if err := u.Once(ctx); perr.CodeOf(err) != CodeRefused {
		t.Fatalf("once: %v, want the batch refused", err)
	}
	if rows, _ := st.Rows(ctx, date, testStore); len(rows) != 0 {
		t.Fatalf("HQ holds %d rows of a refused batch", len(rows))
	}
	if n := moves(); n != 2 {
		t.Errorf("HQ holds %d stock moves after Once met a refused batch, want 2", n)
	}
	if xs, err := st.FlowExceptions(ctx, date, testStore, false); err != nil || len(xs) != 1 {
		t.Errorf("HQ's flow exceptions after Once met a refused batch: %+v, %v; want T2's", xs, err)
	}

	// Run: the batch is refused again and again; a count booked meanwhile reaches HQ.
	stop := runInBackground(t, u)
	if _, _, _, err := s.l.Count(ctx, "count-B", "B", 9); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 15*time.Second, "the count at HQ while the batch is refused", func() bool { return moves() == 3 })
	if stat, err := u.Status(ctx); err != nil || stat.Pending == "" || stat.Attempts < 2 {
		t.Errorf("status %+v (%v): want the batch pending, refused more than once", stat, err)
	}
	srv.refuse.Store(false)
	waitFor(t, 15*time.Second, "the rows once HQ takes the batch", func() bool {
		rows, _ := st.Rows(ctx, date, testStore)
		return len(rows) == 2
	})
	stop()
}
