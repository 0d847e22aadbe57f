package ledger

import (
	"context"
	"reflect"
	"testing"

	"github.com/posgate/posgate/internal/perr"
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

// TestEveryContentOfAKeyParked: T1:1 is recorded, then the till's key is reused with other
// content twice over (a till restored from a backup, then again): the till keeps both
// contents and counts them in its day close, so the store parks both, each once however
// often it is delivered. It parked the first other content only (one parked row per key):
// the second was answered conflict and kept nowhere. Each content is an exception of its
// own for HQ (the key's first under sku ”, as before, a later one under its hash), and
// the manager resolves them one by one, naming the content by its hash.
func TestEveryContentOfAKeyParked(t *testing.T) {
	ctx := context.Background()
	l := MustOpen(t, day)
	original := withFlow(accepted("T1", 1, day, salePayload("s1", []item{{"A", 1, 500}})), 1)
	second := accepted("T1", 1, day, salePayload("s1", []item{{"A", 1, 900}}))
	third := accepted("T1", 1, day, salePayload("s1", []item{{"A", 2, 900}}))
	MustAdjust(t, l, "open-A", "A", 10)
	MustCommit(t, l, original)
	for _, r := range []Record{second, third} {
		if o := MustCommit(t, l, r)[0]; o.Status != wire.AckConflict {
			t.Fatalf("outcome %+v, want a conflict", o)
		}
	}
	parked, err := l.Parked(ctx, 0, true)
	if err != nil {
		t.Fatal(err)
	}
	hashes := map[string]bool{}
	for _, p := range parked {
		hashes[p.Hash] = true
	}
	if len(parked) != 2 || !hashes[second.Hash] || !hashes[third.Hash] {
		t.Fatalf("parked %+v: want the second and the third content of T1:1", parked)
	}
	xs, last := exceptionsAfter(t, l, 0, 100)
	if got := briefs(xs); len(xs) != 2 || xs[0].SKU != "" || xs[1].SKU != third.Hash {
		t.Fatalf("exceptions for HQ %q: want the second content under sku '', the third under its hash", got)
	}
	// Redelivered, in one group or one by one, in any order: nothing changes.
	before := dump(t, l)
	MustCommit(t, l, third, second)
	MustCommit(t, l, asOther(second))
	if after := dump(t, l); !reflect.DeepEqual(after, before) {
		t.Errorf("a redelivery changed the ledger:\n%v\nafter\n%v", before, after)
	}
	if again, _ := exceptionsAfter(t, l, last, 100); len(again) != 0 {
		t.Errorf("exception changes after a redelivery: %q", briefs(again))
	}
	if _, _, n, err := l.OpenExceptions(ctx); err != nil || n != 2 {
		t.Errorf("open parked %d (%v), want 2", n, err)
	}

	// Resolved one by one: without the hash, the key is ambiguous.
	if _, _, err := l.ResolveParked(ctx, "T1", 1, "", "x"); perr.As(err).Code != CodeParkedHashRequired {
		t.Fatalf("resolve without a hash: %v, want %s", err, CodeParkedHashRequired)
	}
	p, applied, err := l.ResolveParked(ctx, "T1", 1, third.Hash, "entered again")
	if err != nil || !applied || p.Hash != third.Hash || !p.Resolved {
		t.Fatalf("resolve the third content: %+v, %v, %v", p, applied, err)
	}
	xs, _ = exceptionsAfter(t, l, last, 100)
	if len(xs) != 1 || xs[0].SKU != third.Hash || !xs[0].Resolved {
		t.Errorf("exceptions for HQ after the resolution %q: want the third content resolved", briefs(xs))
	}
	if open, err := l.Parked(ctx, 0, false); err != nil || len(open) != 1 || open[0].Hash != second.Hash {
		t.Errorf("open parked %+v, %v: want the second content", open, err)
	}
	if _, _, err := l.ResolveParked(ctx, "T1", 1, "nope", "x"); perr.As(err).Code != CodeParkedNotFound {
		t.Errorf("resolve an unknown content: %v, want %s", err, CodeParkedNotFound)
	}
}
