package ingest

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/posgate/posgate/internal/stack"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/ledger"
)

// resent sends one sale of terminal at seq as a replay (nil: a plain offline sale) with
// lostFrom, made at at, and returns its ack.
func (r *gapRun) resent(t *testing.T, terminal string, seq int64, at time.Time, rp *wire.Replay, lostFrom int64) wire.Ack {
	t.Helper()
	var env wire.Envelope
	if err := json.Unmarshal(testSale(terminal, seq, at, true), &env); err != nil {
		t.Fatal(err)
	}
	env.Replay, env.LostFrom = rp, lostFrom
	body, err := json.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	r.out.mu.Lock()
	n := len(r.out.msgs)
	r.out.mu.Unlock()
	r.in.Handle(wire.UpTopic(testStore, terminal), body)
	acks := acksOf(t, r.out, n)
	if len(acks) != 1 {
		t.Fatalf("%s:%d: acks %+v", terminal, seq, acks)
	}
	return acks[0]
}

// resendOf waits for the n-th resend request the store sent.
func (r *gapRun) resendOf(t *testing.T, n int) wire.Resend {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		r.out.mu.Lock()
		if len(r.out.resends) > n {
			defer r.out.mu.Unlock()
			return r.out.resends[n]
		}
		r.out.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatalf("no resend request %d", n)
		}
	}
}

// TestCatchUpRefillsALostLedger: a store whose ledger lost a till's events (here a new,
// empty ledger on the same Redis) answers the till's next event out_of_order and asks it to
// send the events it lacks again; the till's replays are booked with the flow numbers the
// store gave them the first time, stock and Redis agree, the till's next event follows in
// order with a flow number above theirs, and no gap is recorded.
func TestCatchUpRefillsALostLedger(t *testing.T) {
	s := stack.Run(t, stack.Options{Redis: true})
	ctx := context.Background()
	first := startGapRun(t, s, newLedger(t, 100))
	at := time.Now()
	flows := map[int64]int64{}
	for seq := int64(1); seq <= 3; seq++ {
		a := first.send(t, "T01", seq, at)
		wantAck(t, a, wire.AckAccepted, 0)
		flows[seq] = a.Result.FlowNo
	}
	first.stop()

	led := newLedger(t, 100) // the data directory lost: the opening booked again
	r := startGapRun(t, s, led)
	wantAck(t, r.send(t, "T01", 4, at), wire.AckOutOfOrder, 1)
	if rq := r.resendOf(t, 0); rq.Terminal != "T01" || rq.From != 1 || rq.To != 3 {
		t.Fatalf("resend request %+v, want T01 1..3", rq)
	}
	date := led.BusinessDate(at)
	for seq := int64(1); seq <= 3; seq++ {
		a := r.resent(t, "T01", seq, at, &wire.Replay{Status: wire.ReplayAccepted, FlowNo: flows[seq], BusinessDate: date}, 0)
		if a.Status != wire.AckAccepted || a.Result == nil || a.Result.FlowNo != flows[seq] {
			t.Fatalf("replay of T01:%d: %+v, want accepted with flow %d", seq, a, flows[seq])
		}
	}
	a := r.send(t, "T01", 4, at)
	if a.Status != wire.AckAccepted || a.Result.FlowNo <= flows[3] {
		t.Fatalf("T01:4 after the catch-up: %+v, want accepted above flow %d", a, flows[3])
	}
	stock, err := led.Stock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if stock["A"] != 96 {
		t.Fatalf("ledger stock of A: %d, want 96", stock["A"])
	}
	waitRedisStock(t, r.in, "A", 96)
	if g := gapsOf(t, led, "T01"); len(g) != 0 {
		t.Fatalf("seq gaps %+v, want none", g)
	}
	if st := r.in.Stats(); st.Resends != 1 || st.Replayed != 3 || st.SeqGaps != 0 {
		t.Fatalf("stats: %d resends, %d replayed, %d gaps; want 1, 3, 0", st.Resends, st.Replayed, st.SeqGaps)
	}
}

// waitRedisStock waits until Redis's stock of sku is want.
func waitRedisStock(t *testing.T, in *Ingest, sku string, want int64) {
	t.Helper()
	var got map[string]int64
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		var err error
		if got, err = in.cfg.Gate.Stock(context.Background()); err == nil && got[sku] == want {
			return
		}
	}
	t.Fatalf("redis stock of %s: %d, want %d", sku, got[sku], want)
}

// TestPrunedTillLeavesAGap: a till that no longer holds the events the store lacks says so
// (LostFrom at or before the store's next); its event is taken and the gap recorded as
// pruned, once. A LostFrom beyond the store's next (the till holds events the store still
// lacks) takes nothing, nor does another store's event.
func TestPrunedTillLeavesAGap(t *testing.T) {
	s := stack.Run(t, stack.Options{Redis: true})
	led := newLedger(t, 100)
	r := startGapRun(t, s, led)
	at := time.Now()
	wantAck(t, r.send(t, "T01", 7, at), wire.AckOutOfOrder, 1)
	if rq := r.resendOf(t, 0); rq.From != 1 || rq.To != 6 {
		t.Fatalf("resend request %+v, want 1..6", rq)
	}
	wantAck(t, r.resent(t, "T01", 7, at, nil, 3), wire.AckOutOfOrder, 1)
	wantAck(t, r.resent(t, "T01", 7, at, nil, 1), wire.AckAccepted, 0)
	if g := gapsOf(t, led, "T01"); len(g) != 1 || g[0].From != 1 || g[0].To != 6 || g[0].Reason != ledger.GapPruned {
		t.Fatalf("seq gaps %+v, want 1..6 pruned", g)
	}
	wantAck(t, r.send(t, "T01", 8, at), wire.AckAccepted, 0)

	// Another store's event: no gap taken on its word.
	var env wire.Envelope
	if err := json.Unmarshal(testSale("T02", 5, at, true), &env); err != nil {
		t.Fatal(err)
	}
	env.Store = "OTHER"
	env = wire.NewEnvelope(env.Kind, env.Store, env.Terminal, env.Seq, env.At, env.Payload)
	env.Offline, env.LostFrom = true, 1
	body, _ := json.Marshal(env)
	r.out.mu.Lock()
	n := len(r.out.msgs)
	r.out.mu.Unlock()
	r.in.Handle(wire.UpTopic(testStore, "T02"), body)
	wantAck(t, acksOf(t, r.out, n)[0], wire.AckOutOfOrder, 1)
	if st := r.in.Stats(); st.SeqGaps != 1 {
		t.Fatalf("stats: %d gaps, want 1", st.SeqGaps)
	}
}

// replayBytes is an offline sale of terminal at seq sent again with the store's first
// answer rp.
func replayBytes(t *testing.T, terminal string, seq int64, at time.Time, rp *wire.Replay) []byte {
	t.Helper()
	var env wire.Envelope
	if err := json.Unmarshal(testSale(terminal, seq, at, true), &env); err != nil {
		t.Fatal(err)
	}
	env.Replay = rp
	b, err := json.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestNewEventsWaitBehindReplays: new events the gate would decide in a group that carries
// replays wait for the next group (Redis holds the replays' stock only once it is rebuilt
// from the ledger): a live one gets no answer, an offline one is paced (catching_up). The
// replay is booked with its flow number; the events come back and are accepted.
func TestNewEventsWaitBehindReplays(t *testing.T) {
	in, _, out := newIngest(t)
	at := time.Now()
	in.Handle(wire.UpTopic(testStore, "T1"), replayBytes(t, "T1", 1, at, &wire.Replay{Status: wire.ReplayAccepted, FlowNo: 7}))
	in.Handle(wire.UpTopic(testStore, "T2"), testSale("T2", 1, at, false)) // live
	in.Handle(wire.UpTopic(testStore, "T3"), testSale("T3", 1, at, true))  // offline
	runIngest(t, in)
	for range 2 {
		select {
		case <-out.got:
		case <-time.After(20 * time.Second):
			t.Fatal("no acks within 20s")
		}
	}
	time.Sleep(100 * time.Millisecond) // an acks message for T2 would be a failure
	out.mu.Lock()
	msgs := append([]wire.Acks(nil), out.msgs...)
	out.mu.Unlock()
	if len(msgs) != 2 {
		t.Fatalf("%d acks messages, want 2 (T1, T3): %+v", len(msgs), msgs)
	}
	for _, m := range msgs {
		a := m.Acks[0]
		switch m.Terminal {
		case "T1":
			if a.Status != wire.AckAccepted || a.Result == nil || a.Result.FlowNo != 7 {
				t.Errorf("T1's replay: %+v, want accepted with flow 7", a)
			}
		case "T3":
			if a.Status != wire.AckRateLimited || a.Code != CodeCatchingUp || a.Live || a.RetryAfterMs <= 0 {
				t.Errorf("T3's offline sale: %+v, want rate_limited catching_up", a)
			}
		default:
			t.Errorf("acks for %s: %+v", m.Terminal, m.Acks)
		}
	}
	for i, term := range []string{"T2", "T3"} {
		in.Handle(wire.UpTopic(testStore, term), testSale(term, 1, at, true))
		if a := acksOf(t, out, 2+i)[0]; a.Status != wire.AckAccepted || a.Result.FlowNo <= 7 {
			t.Fatalf("%s:1 sent again: %+v, want accepted above flow 7", term, a)
		}
	}
	waitRedisStock(t, in, "A", 997)
	if st := in.Stats(); st.HeldBehindReplays != 1 || st.Replayed != 1 {
		t.Fatalf("stats: %d held, %d replayed; want 1, 1", st.HeldBehindReplays, st.Replayed)
	}
}
