package storetest

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/posgate/posgate/hq-sync/hqstore"
	"github.com/posgate/posgate/internal/hqwire"
)

// FlowException returns a booked flow exception of a sale: terminal:seq's receipt prints
// given, held by heldBy; the store booked it under booked.
func FlowException(terminal string, seq int64, date string, at time.Time, given, booked int64, heldBy string,
	change int64) hqwire.FlowException {
	return hqwire.FlowException{Change: change, Terminal: terminal, Seq: seq, Kind: hqwire.FlowSale, FlowGiven: given,
		FlowBooked: booked, HeldBy: heldBy, At: at, BusinessDate: date}
}

// ResolvedFlow returns x resolved at when with note, as change change.
func ResolvedFlow(x hqwire.FlowException, when time.Time, note string, change int64) hqwire.FlowException {
	x.Resolved, x.ResolvedAt, x.Resolution, x.Change = true, when, note, change
	return x
}

// StoredFlow returns x as HQ holds it for store, received at.
func StoredFlow(store string, x hqwire.FlowException, at time.Time) hqstore.StoredFlowException {
	x.At, x.ResolvedAt = x.At.UTC(), x.ResolvedAt.UTC()
	if x.ResolvedAt.Equal(time.Time{}.UTC()) {
		x.ResolvedAt = time.Time{}
	}
	return hqstore.StoredFlowException{Store: store, FlowException: x, ReceivedAt: at.Truncate(time.Millisecond).UTC()}
}

// MustPutFlows stores flow exception states of store and fails the test unless HQ stored
// stored of them.
func MustPutFlows(tb testing.TB, s hqstore.Storage, store, id string, at time.Time, stored int, xs ...hqwire.FlowException) {
	tb.Helper()
	n, err := s.PutFlowExceptions(context.Background(), store, id, xs, at)
	if err != nil {
		tb.Fatalf("put flow exceptions %s/%s: %v", store, id, err)
	}
	if n != stored {
		tb.Fatalf("put flow exceptions %s/%s: %d stored, want %d", store, id, n, stored)
	}
}

// CheckFlows fails the test unless s holds want of date and store (open: only those not
// resolved), in order.
func CheckFlows(tb testing.TB, s hqstore.Storage, date, store string, open bool, want ...hqstore.StoredFlowException) {
	tb.Helper()
	got, err := s.FlowExceptions(context.Background(), date, store, open)
	if err != nil {
		tb.Fatal(err)
	}
	for i := range got {
		got[i].At, got[i].ResolvedAt = got[i].At.UTC(), got[i].ResolvedAt.UTC()
		if got[i].ResolvedAt.Equal(time.Time{}.UTC()) {
			got[i].ResolvedAt = time.Time{}
		}
	}
	if want == nil {
		want = []hqstore.StoredFlowException{}
	}
	if !reflect.DeepEqual(got, want) {
		tb.Fatalf("flow exceptions of %q, store %q (open %v):\n got %+v\nwant %+v", date, store, open, got, want)
	}
}

// testFlowExceptions: flow exceptions are kept per (store, terminal, seq), every field read
// back as sent; a resend changes nothing; a state of a higher change number (a resolution)
// replaces the one held, one of a lower number does not; the reads filter by date, store
// and open.
func testFlowExceptions(t *testing.T, s hqstore.Storage) {
	x1 := FlowException("T2", 1, D1, t0, 7, 8, "T1:1", 100)
	x2 := FlowException("T2", 2, D1, t0.Add(time.Minute), 9, 10, "", 101)
	x2.Kind = hqwire.FlowRefund
	other := FlowException("T2", 1, D2, t0.Add(24*time.Hour), 3, 4, "T1:5", 50) // another store's
	MustPutFlows(t, s, "S1", "f-100-101", at1, 2, x2, x1)
	MustPutFlows(t, s, "S2", "f-50-50", at1, 1, other)
	CheckFlows(t, s, D1, "S1", false, StoredFlow("S1", x1, at1), StoredFlow("S1", x2, at1))
	CheckFlows(t, s, D1, "", false, StoredFlow("S1", x1, at1), StoredFlow("S1", x2, at1))
	CheckFlows(t, s, D2, "", false, StoredFlow("S2", other, at1))
	CheckFlows(t, s, "", "", true, StoredFlow("S1", x1, at1), StoredFlow("S1", x2, at1), StoredFlow("S2", other, at1))

	// Sent again: nothing changes, not even the receive time.
	MustPutFlows(t, s, "S1", "f-100-101", at2, 0, x1, x2)
	CheckFlows(t, s, D1, "S1", false, StoredFlow("S1", x1, at1), StoredFlow("S1", x2, at1))

	// The manager's resolution, a later change, wins; the booked state sent late does not
	// undo it.
	res := ResolvedFlow(x1, t0.Add(2*time.Hour), "receipt 7 of T2 reprinted as 8", 102)
	MustPutFlows(t, s, "S1", "f-102-102", at2, 1, res)
	MustPutFlows(t, s, "S1", "f-100-100", at3, 0, x1)
	CheckFlows(t, s, D1, "S1", false, StoredFlow("S1", res, at2), StoredFlow("S1", x2, at1))
	CheckFlows(t, s, "", "S1", true, StoredFlow("S1", x2, at1))
	CheckFlows(t, s, D2, "S1", false)
}
