package ingest

import (
	"math"
	"testing"

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
