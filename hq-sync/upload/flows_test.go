package upload

import (
	"context"
	"testing"
	"time"

	"github.com/posgate/posgate/hq-sync/serve"
	"github.com/posgate/posgate/internal/hqwire"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/ledger"
)

// TestFlowsToServe: a serve without the flow exceptions route (404, as v0.1.0's) takes the
// batches, with the rows and the other exceptions, while the store's flow exception waits;
// once HQ takes the route the flow exception goes, then its resolution (a NUL in the note
// dropped), and an uploader started again sends nothing twice.
func TestFlowsToServe(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	s := MustOpenStore(t, dir)
	st := mustOpenHQ(t, dir)
	clk := newClock(day0.Add(time.Hour))
	srv := newOlderServe(t, st, clk.Now) // a serve that knows no flow exceptions route

	s.replayTakenFlow()
	date := s.l.BusinessDate(day0)
	if xs, err := s.l.FlowExceptions(ctx, date, true); err != nil || len(xs) != 1 || xs[0].FlowBooked != 2 {
		t.Fatalf("the ledger's flow exceptions: %+v, %v", xs, err)
	}

	cfg := config(dir, s, srv.URL+serve.BatchesPath, clk.Now)
	u := MustNew(t, cfg)
	MustOnce(t, u)
	if rows, _ := st.Rows(ctx, date, testStore); len(rows) != 2 {
		t.Fatalf("HQ holds %d rows, want 2", len(rows))
	}
	if xs, _ := st.Exceptions(ctx, date, testStore); len(xs) == 0 || xs[0].Kind != hqwire.ExceptionOversell {
		t.Fatalf("HQ's exceptions: %+v, want T1's oversell", xs)
	}
	if srv.requests(hqwire.FlowsPath) == 0 {
		t.Fatal("the uploader never offered the flow exceptions")
	}
	if xs, _ := st.FlowExceptions(ctx, "", "", false); len(xs) != 0 {
		t.Fatalf("a serve without the route holds flow exceptions %+v", xs)
	}
	waiting := func(want int64) {
		t.Helper()
		if stat, err := u.Status(ctx); err != nil || stat.FlowsWaiting != want {
			t.Fatalf("status %+v (%v): want %d flow exception changes waiting", stat, err, want)
		}
	}
	waiting(1)

	srv.old.Store(false)
	MustOnce(t, u)
	xs, err := st.FlowExceptions(ctx, date, testStore, false)
	if err != nil || len(xs) != 1 || xs[0].Terminal != "T2" || xs[0].Seq != 1 || xs[0].FlowGiven != 1 ||
		xs[0].FlowBooked != 2 || xs[0].HeldBy != "T1:1" || xs[0].Resolved {
		t.Fatalf("HQ's flow exceptions: %+v, %v; want T2:1's, open", xs, err)
	}
	// A NUL in the manager's note (HQ refuses one: PostgreSQL text cannot hold it) is dropped.
	waiting(0)
	if _, _, err := s.l.ResolveFlow(ctx, "T2", 1, "T2's receipt\x00 reprinted as no. 2"); err != nil {
		t.Fatal(err)
	}
	waiting(1)
	MustOnce(t, u)
	waiting(0)
	xs, err = st.FlowExceptions(ctx, date, testStore, false)
	if err != nil || len(xs) != 1 || !xs[0].Resolved || xs[0].Resolution != "T2's receipt reprinted as no. 2" {
		t.Fatalf("HQ's flow exceptions after the resolution: %+v, %v", xs, err)
	}
	received := xs[0].ReceivedAt

	// Started again on its state: nothing to send. On a new state: all again, nothing new.
	u.Close()
	sent := srv.requests(hqwire.FlowsPath)
	u = MustNew(t, cfg)
	MustOnce(t, u)
	if srv.requests(hqwire.FlowsPath) != sent {
		t.Fatalf("an uploader started again sent flow exceptions HQ acknowledged")
	}
	u.Close()
	clk.Set(clk.Now().Add(time.Hour))
	cfg.StatePath += "-new"
	u = MustNew(t, cfg)
	MustOnce(t, u)
	if xs, _ = st.FlowExceptions(ctx, date, testStore, false); len(xs) != 1 || !xs[0].ReceivedAt.Equal(received) {
		t.Fatalf("after a new state sent all again: %+v, want the state received at %v", xs, received)
	}
	u.Close()
}

// replayTakenFlow books a flow exception of day0: T1's offline sale takes flow number 1 (and
// oversells); T2's sale, replayed after the store lost it, brings 1 too and is booked
// under 2.
func (s *store) replayTakenFlow() {
	s.OfflineSale("T1", day0.Add(time.Minute))
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.record("T2", day0.Add(2*time.Minute), wire.KindSale, salePayload(100, 1))
	r.FlowNo, r.Replayed, r.Offline = 1, true, true
	s.commit([]ledger.Record{r})
}
