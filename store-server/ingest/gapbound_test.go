package ingest

import (
	"encoding/json"
	"math"
	"testing"
	"time"

	"github.com/posgate/posgate/internal/stack"
	"github.com/posgate/posgate/internal/wire"
)

// TestJumpLeavesANextSeq: a terminal the ledger holds nothing of may start at any seq, but
// not at the last one an int64 holds: after it there is no next seq (seq+1 wraps to the
// most negative), and once the store restarts and reads the next seqs from the ledger, every
// event of that terminal id, the real till's included, is out_of_order with an expect no
// till can meet. A device sending such a seq (a misconfigured one, or one hostile, with a
// new till's id) would silence that till for good.
func TestJumpLeavesANextSeq(t *testing.T) {
	s := stack.Run(t, stack.Options{Redis: true})
	led := newLedger(t, 1000)
	r := startGapRun(t, s, led)
	wantAck(t, r.send(t, "T7", math.MaxInt64), wire.AckOutOfOrder, 1)
	if g := gapsOf(t, led, "T7"); len(g) != 0 {
		t.Fatalf("T7's gaps: %+v, want none", g)
	}
	r.stop()
	r = startGapRun(t, s, led)
	wantAck(t, r.send(t, "T7", 1), wire.AckAccepted, 0)
	wantAck(t, r.send(t, "T7", 2), wire.AckAccepted, 0)
}

// TestTillWhoseJumpedEventWasNotItsLastAcked: a restored ledger holds each till up to 1; the
// lost one took 2..4 and acked 2 and 4 but not 3 (its ack lost, or a live refusal the till
// resends offline: the agent sends it again while the events after it are acked). The till
// holds 3 pending and 4 acked: 3 jumps the gap 2..2, and the till's next new event, 5, is
// beyond the 4 the store then expects, which the till holds acked and never sends again.
// Answered out_of_order expect 4, the till was stuck for good, every checkout waiting out its
// deadline. The event right after a jump may jump too: in the next message, in one message
// with it, or after a restart; once an event follows in order, no more.
func TestTillWhoseJumpedEventWasNotItsLastAcked(t *testing.T) {
	s := stack.Run(t, stack.Options{Redis: true})
	// What the lost ledger took after the backup does not matter here: only what the tills
	// send next.
	r, restored := restoreAfter(t, s, []string{"T1", "T2", "T3"}, func(*gapRun) {})
	// T1: 3 pending, 4 acked by the lost ledger; then 5, a new sale.
	wantAck(t, r.send(t, "T1", 3), wire.AckAccepted, 0)
	wantAck(t, r.send(t, "T1", 5), wire.AckAccepted, 0)
	wantAck(t, r.send(t, "T1", 6), wire.AckAccepted, 0)
	wantAck(t, r.send(t, "T1", 8), wire.AckOutOfOrder, 7) // in order since: no more jumps
	// T2: the same, its 3 and 5 in one message.
	r.out.mu.Lock()
	n := len(r.out.msgs)
	r.out.mu.Unlock()
	r.in.Handle(wire.UpTopic(testStore, "T2"), batchOf(t, "T2", 3, 5))
	for _, a := range acksOf(t, r.out, n) {
		wantAck(t, a, wire.AckAccepted, 0)
	}
	// T3: its 3 before a restart, its 5 after.
	wantAck(t, r.send(t, "T3", 3), wire.AckAccepted, 0)
	r.stop()
	r = startGapRun(t, s, restored)
	wantAck(t, r.send(t, "T3", 5), wire.AckAccepted, 0)
	wantAck(t, r.send(t, "T3", 6), wire.AckAccepted, 0)
	wantAck(t, r.send(t, "T3", 8), wire.AckOutOfOrder, 7)
	for _, term := range []string{"T1", "T2", "T3"} {
		g := gapsOf(t, restored, term)
		if len(g) != 2 || g[0].From != 2 || g[0].To != 2 || g[1].From != 4 || g[1].To != 4 {
			t.Fatalf("%s's gaps: %+v, want 2..2 and 4..4", term, g)
		}
	}
}

// batchOf is one up message carrying the sales of terminal at seqs.
func batchOf(t *testing.T, terminal string, seqs ...int64) []byte {
	t.Helper()
	var raw []json.RawMessage
	for _, seq := range seqs {
		raw = append(raw, testSale(terminal, seq, time.Now(), true))
	}
	b, err := wire.MarshalBatch(testStore, terminal, raw)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestAnotherStoresEventTakesNoJump: a till of another store (moved here with its old
// settings: same terminal id, its own seqs, its store's id in its events) publishes on this
// store's topic of T1, whom the ledger holds nothing of (a new till, or a data directory
// started empty). Its event is not this store's and tells nothing of what T1 sent: it is
// answered out_of_order as before, not filed under T1 as a rejected event that moved T1's
// next seq past the real till's and recorded a gap of events T1 never sent. Taken, the
// real T1's sale at that seq would later meet it as other content, and be parked.
func TestAnotherStoresEventTakesNoJump(t *testing.T) {
	s := stack.Run(t, stack.Options{Redis: true})
	led := newLedger(t, 1000)
	r := startGapRun(t, s, led)
	r.out.mu.Lock()
	n := len(r.out.msgs)
	r.out.mu.Unlock()
	r.in.Handle(wire.UpTopic(testStore, "T1"), saleOfStore(t, "S999", "T1", 3))
	wantAck(t, acksOf(t, r.out, n)[0], wire.AckOutOfOrder, 1)
	if g := gapsOf(t, led, "T1"); len(g) != 0 {
		t.Fatalf("T1's gaps: %+v, want none", g)
	}
	for seq := int64(1); seq <= 4; seq++ {
		wantAck(t, r.send(t, "T1", seq), wire.AckAccepted, 0)
	}
}

// saleOfStore is testSale naming store.
func saleOfStore(t *testing.T, store, terminal string, seq int64) []byte {
	t.Helper()
	var env wire.Envelope
	if err := json.Unmarshal(testSale(terminal, seq, time.Now(), true), &env); err != nil {
		t.Fatal(err)
	}
	env = wire.NewEnvelope(env.Kind, store, terminal, seq, time.Now(), env.Payload)
	env.Offline = true
	b, err := json.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
