package ledger

import (
	"context"
	"testing"

	"github.com/posgate/posgate/internal/wire"
)

// asOther turns r into the conflict record ingest sends for other content of a key
// (Record.OtherContent).
func asOther(r Record) Record {
	r = refused(r, wire.AckConflict, true, CodeIdempotencyConflict)
	r.OtherContent = true
	return r
}

// TestOtherContentInOneCommit: other content of a key whose first content comes earlier in
// the same Commit is parked behind it when the first is stored final, both ways of
// committing; behind a live refusal (which binds nothing) it is Undecided and nothing of
// it is written.
func TestOtherContentInOneCommit(t *testing.T) {
	first := withFlow(accepted("T1", 1, day, salePayload("s1", []item{{"A", 1, 500}})), 1)
	other := asOther(accepted("T1", 1, day, salePayload("s1", []item{{"A", 1, 900}})))
	for _, staged := range []bool{true, false} {
		withStaged(staged, func() {
			l := MustOpen(t, day)
			out := MustCommit(t, l, first, other)
			if out[0].Status != wire.AckAccepted || out[1].Status != wire.AckConflict || out[1].Undecided {
				t.Fatalf("staged %t: outcomes %+v, want accepted then conflict", staged, out)
			}
			if s := mustLookup(t, l, "T1", 1); s.Hash != first.Hash {
				t.Errorf("staged %t: stored %+v: the first content must stand", staged, s)
			}
			parked, err := l.Parked(context.Background(), 0, true)
			if err != nil || len(parked) != 1 || parked[0].Code != CodeIdempotencyConflict {
				t.Fatalf("staged %t: parked %+v, %v: want the other content", staged, parked, err)
			}

			l = MustOpen(t, day)
			live := refused(first, wire.AckRateLimited, false, "rate_limited")
			out = MustCommit(t, l, live, other)
			if out[0].Status != wire.AckRateLimited || !out[1].Undecided {
				t.Fatalf("staged %t: outcomes %+v, want rate limited then undecided", staged, out)
			}
			if s := mustLookup(t, l, "T1", 1); s.Hash != first.Hash || s.Final {
				t.Errorf("staged %t: stored %+v, want the live refusal", staged, s)
			}
			if c := counts(t, l); c["parked"] != 0 || c["events"] != 1 {
				t.Errorf("staged %t: rows %v, want the live refusal's event alone", staged, c)
			}
		})
	}
}
