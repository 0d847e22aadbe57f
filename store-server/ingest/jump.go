package ingest

import (
	"context"
	"math"

	"github.com/posgate/posgate/store-server/ledger"
)

// jump decides whether an event of terminal at seq, beyond the next expected, is taken
// although the events from next on are missing, and returns the gap it jumps (nil: the
// event is out of order). A till sends its events in order and never again once acked, so
// a gap is events it sent to a ledger this one is not: a ledger that holds none of the
// terminal's events (a data directory lost and started empty, or restored from a backup
// made before the till first traded), or one restored from a backup (GET /v1/backup) made
// before the till sent them, in which case the terminal's first event since the restore
// may jump, once; and so may the event right after one that jumped (jumpedLast). Any other
// jump is out of order. It reads the ledger only for an event that would be out of order:
// whether the terminal's last event jumped, and for a known terminal not heard from since a
// restore, once per terminal and process, whether it was heard since.
func (in *Ingest) jump(ctx context.Context, terminal string, seq, next int64, known bool) (*ledger.SeqGap, error) {
	if seq == math.MaxInt64 {
		// No till gets there, and after it there is no next seq: taken, it would wrap the
		// terminal's next to the most negative once read back from the ledger, and every
		// event of that terminal id would be out of order for good.
		return nil, nil
	}
	reason := ledger.GapNewLedger
	if !in.restoredAt.IsZero() {
		reason = ledger.GapRestored
	}
	if known {
		again, err := in.jumpedLast(ctx, terminal, next)
		if err != nil {
			return nil, err
		}
		if again {
			return in.newJump(terminal, seq, next, reason), nil
		}
		if in.restoredAt.IsZero() || in.heard[terminal] {
			return nil, nil
		}
		resumed, err := in.cfg.Ledger.ResumedSince(ctx, terminal, in.restoredAt)
		if err != nil {
			return nil, err
		}
		if resumed {
			in.heard[terminal] = true
			return nil, nil
		}
	}
	return in.newJump(terminal, seq, next, reason), nil
}

func (in *Ingest) newJump(terminal string, seq, next int64, reason string) *ledger.SeqGap {
	g := &ledger.SeqGap{Terminal: terminal, From: next, To: seq - 1, Reason: reason}
	in.jumps[terminal] = g
	return g
}

// jumpedLast reports whether the terminal's last event (next-1) is one that jumped a gap: the
// till's events after it may be beyond next too. The till resent an event the lost ledger
// had not acked (its ack lost, or a live refusal it sends again offline) while it holds the
// events after it acked: those are lost as well, and the till never sends them again. Once
// an event of the terminal follows in order, its jumps are over.
func (in *Ingest) jumpedLast(ctx context.Context, terminal string, next int64) (bool, error) {
	if j := in.jumps[terminal]; j != nil {
		return j.To+2 == next, nil
	}
	return in.cfg.Ledger.Jumped(ctx, terminal, next-1)
}
