package upload

import (
	"context"
	"testing"
	"time"

	"github.com/posgate/posgate/hq-sync/serve"
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
