package storetest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/posgate/posgate/hq-sync/hqstore"
	"github.com/posgate/posgate/internal/hqwire"
	"github.com/posgate/posgate/internal/perr"
	"github.com/posgate/posgate/internal/wire"
)

// putExceptions stores a batch of store holding only exceptions, received at(k), and
// fails the test unless HQ applied applied of them.
func putExceptions(tb testing.TB, s hqstore.Storage, store, id string, k, applied int, xs ...hqwire.Exception) hqwire.Receipt {
	tb.Helper()
	b, h := ExceptionBatch(store, id, nil, xs...)
	rc := MustPut(tb, s, b, h, at(k))
	if rc.Exceptions != applied {
		tb.Fatalf("batch %s/%s: %d exceptions applied, want %d (%+v)", store, id, rc.Exceptions, applied, rc)
	}
	return rc
}

// testExceptions: a batch's exceptions are stored with its rows, every field read back as
// sent, and the receipt counts them.
func testExceptions(t *testing.T, s hqstore.Storage) {
	rows := mixedRows("S1", D1)
	over := Oversell("T1", 2, "SKU-0001", D1, t0, 3, 1)
	other := Oversell("T1", 2, "SKU-0002", D1, t0, 1, 2) // the same sale, another SKU
	refund := Resolved(RefundException("T1", 6, D1, t0.Add(time.Hour), "refund_exceeds_sale",
		"line 1: 2 refunded of 1 sold", 3), t0.Add(5*time.Hour), "a price agreed at the till", 4)
	b, h := ExceptionBatch("S1", "b-1", rows, refund, other, over)
	rc := MustPut(t, s, b, h, at1)
	if rc.Exceptions != 3 || rc.New != len(rows) || rc.Rows != len(rows) || rc.Duplicate {
		t.Fatalf("receipt %+v, want %d new rows and 3 exceptions", rc, len(rows))
	}
	CheckRows(t, rowsOf(t, s, D1, "S1"), storedAll("S1", rows, at1))
	want := []hqstore.StoredException{StoredException("S1", over, at1), StoredException("S1", other, at1),
		StoredException("S1", refund, at1)}
	CheckExceptions(t, exceptionsOf(t, s, D1, "S1"), want)
	CheckExceptions(t, exceptionsOf(t, s, D1, ""), want)
}

// testExceptionsByChange: a state of a higher change number replaces the one held, every
// field and the receive time; one of the same or a lower change number changes nothing
// and does not count as applied.
func testExceptionsByChange(t *testing.T, s hqstore.Storage) {
	open := Oversell("T1", 1, "SKU-0001", D1, t0, 2, 5)
	putExceptions(t, s, "S1", "b-1", 1, 1, open)

	lower := Resolved(open, t0.Add(time.Hour), "counted the shelf", 4)
	same := open
	same.QtyShort = 7
	other := RefundException("T2", 3, D1, t0, "refund_sale_unknown", "", 1)
	putExceptions(t, s, "S1", "b-2", 2, 0, lower)
	putExceptions(t, s, "S1", "b-3", 3, 0, same)
	putExceptions(t, s, "S1", "b-4", 4, 1, lower, other) // one held higher, one new
	CheckExceptions(t, exceptionsOf(t, s, D1, "S1"), []hqstore.StoredException{
		StoredException("S1", open, at(1)), StoredException("S1", other, at(4))})

	higher := Resolved(open, t0.Add(2*time.Hour), "goods found in the back room", 9)
	putExceptions(t, s, "S1", "b-5", 5, 1, higher)
	CheckExceptions(t, exceptionsOf(t, s, D1, "S1"), []hqstore.StoredException{
		StoredException("S1", higher, at(5)), StoredException("S1", other, at(4))})
}

// testExceptionsWithdrawn: a withdrawn exception is not read back, and a state of a lower
// or the same change number arriving after it does not bring it back; one of a higher
// change number does. A withdrawal HQ gets first (it never saw the exception open) is
// kept as well.
func testExceptionsWithdrawn(t *testing.T, s hqstore.Storage) {
	x := RefundException("T1", 7, D1, t0, "refund_sale_unknown", "sale T1/3 is not the one accepted at seq 3", 2)
	putExceptions(t, s, "S1", "b-1", 1, 1, x)
	putExceptions(t, s, "S1", "b-2", 2, 1, Withdrawn(x, 3))
	CheckExceptions(t, exceptionsOf(t, s, D1, ""), nil)

	putExceptions(t, s, "S1", "b-3", 3, 0, x)
	putExceptions(t, s, "S1", "b-4", 4, 0, Resolved(x, t0.Add(time.Hour), "the sale came late", 3))
	CheckExceptions(t, exceptionsOf(t, s, D1, "S1"), nil)

	gone := Oversell("T2", 4, "SKU-0001", D1, t0, 1, 9)
	putExceptions(t, s, "S1", "b-5", 5, 1, Withdrawn(gone, 9))
	putExceptions(t, s, "S1", "b-6", 6, 0, gone)
	putExceptions(t, s, "S1", "b-7", 6, 0, Withdrawn(gone, 8))
	CheckExceptions(t, exceptionsOf(t, s, D1, ""), nil)

	again := x
	again.Change = 4
	putExceptions(t, s, "S1", "b-8", 7, 1, again)
	CheckExceptions(t, exceptionsOf(t, s, D1, ""), []hqstore.StoredException{StoredException("S1", again, at(7))})
}

// testExceptionsFiltering: exceptions of one date, of all stores or one, in (store, kind,
// terminal, seq, sku) order, byte-wise for text and numeric for seq.
func testExceptionsFiltering(t *testing.T, s hqstore.Storage) {
	want := map[string][]hqstore.StoredException{} // by date, then "date/store"
	for i, store := range []string{"S2", "S10", "S1"} {
		ordered := []hqwire.Exception{
			Oversell("T1", 2, "SKU-9", D1, t0, 1, 1),
			Oversell("T10", 3, "SKU-1", D1, t0, 1, 2),
			Oversell("T2", 2, "SKU-1", D1, t0, 1, 3),
			Oversell("T2", 10, "SKU-1", D1, t0, 1, 4),
			Oversell("T2", 10, "SKU-10", D1, t0, 1, 5),
			Oversell("T2", 10, "SKU-2", D1, t0, 1, 6),
			RefundException("T1", 1, D1, t0, "refund_sale_unknown", "", 7),
		}
		later := RefundException("T1", 50, D2, t0.Add(24*time.Hour), "refund_exceeds_sale", "", 8)
		gone := Withdrawn(Oversell("T1", 1, "SKU-1", D1, t0, 1, 9), 9)
		xs := append(slices.Clone(ordered), later, gone)
		slices.Reverse(xs)
		putExceptions(t, s, store, "b", i+1, len(xs), xs...)
		for _, x := range ordered {
			sx := StoredException(store, x, at(i+1))
			want[D1] = append(want[D1], sx)
			want[D1+"/"+store] = append(want[D1+"/"+store], sx)
		}
		want[D2+"/"+store] = []hqstore.StoredException{StoredException(store, later, at(i+1))}
	}
	byStore := func(xs []hqstore.StoredException) []hqstore.StoredException { // S1, S10, S2
		out := slices.Clone(xs)
		slices.SortStableFunc(out, func(a, b hqstore.StoredException) int { return cmpStr(a.Store, b.Store) })
		return out
	}
	CheckExceptions(t, exceptionsOf(t, s, D1, ""), byStore(want[D1]))
	CheckExceptions(t, exceptionsOf(t, s, D2, ""), []hqstore.StoredException{want[D2+"/S1"][0], want[D2+"/S10"][0],
		want[D2+"/S2"][0]})
	for _, store := range []string{"S1", "S10", "S2"} {
		CheckExceptions(t, exceptionsOf(t, s, D1, store), want[D1+"/"+store])
		CheckExceptions(t, exceptionsOf(t, s, D2, store), want[D2+"/"+store])
	}
	CheckExceptions(t, exceptionsOf(t, s, D1, "S3"), nil)
	CheckExceptions(t, exceptionsOf(t, s, "2025-03-03", ""), nil)
}

// testOpenExceptions: the exceptions neither withdrawn nor resolved, of every date, of all
// stores or one, by date first, then store, kind, terminal, seq and SKU.
func testOpenExceptions(t *testing.T, s hqstore.Storage) {
	open1 := Oversell("T1", 2, "SKU-1", D1, t0, 1, 1)
	open2 := RefundException("T2", 7, D2, t0.Add(24*time.Hour), "refund_exceeds_sale", "", 2)
	resolved := Resolved(Oversell("T1", 3, "SKU-1", D1, t0, 1, 3), t0.Add(time.Hour), "counted", 3)
	gone := Withdrawn(RefundException("T1", 9, D1, t0, "refund_sale_unknown", "", 4), 4)
	putExceptions(t, s, "S2", "b", 1, 4, open2, gone, resolved, open1)
	putExceptions(t, s, "S1", "b", 2, 2, open2, resolved)
	open := func(store string) []hqstore.StoredException {
		t.Helper()
		xs, err := s.OpenExceptions(context.Background(), store)
		if err != nil {
			t.Fatal(err)
		}
		return xs
	}
	CheckExceptions(t, open(""), []hqstore.StoredException{StoredException("S2", open1, at(1)),
		StoredException("S1", open2, at(2)), StoredException("S2", open2, at(1))})
	CheckExceptions(t, open("S1"), []hqstore.StoredException{StoredException("S1", open2, at(2))})
	CheckExceptions(t, open("S3"), nil)
}

// testExceptionsReplay: a replayed batch answers its original receipt and applies none of
// its exceptions again, even over a later state.
func testExceptionsReplay(t *testing.T, s hqstore.Storage) {
	x := Oversell("T1", 1, "SKU-0001", D1, t0, 2, 1)
	b, h := ExceptionBatch("S1", "b-1", Sales("S1", "T1", 1, 3, D1, t0), x)
	first := MustPut(t, s, b, h, at1)
	if first.Exceptions != 1 {
		t.Fatalf("receipt %+v, want 1 exception", first)
	}
	putExceptions(t, s, "S1", "b-2", 2, 1, Resolved(x, t0.Add(time.Hour), "counted the shelf", 2))
	before := Take(t, s, D1)
	again := MustPut(t, s, b, h, at3)
	if !again.Duplicate || again.Exceptions != first.Exceptions || again.New != first.New ||
		!again.StoredAt.Equal(first.StoredAt) {
		t.Fatalf("replay: %+v, want the original %+v", again, first)
	}
	before.MustEqual(t, Take(t, s, D1), "after a replay")
}

// testExceptionsOnly: a batch of exceptions alone, without rows or days, is a batch.
func testExceptionsOnly(t *testing.T, s hqstore.Storage) {
	x := Oversell("T1", 1, "SKU-0001", D1, t0, 2, 1)
	y := RefundException("T1", 2, D1, t0, "refund_sale_unknown", "", 2)
	rc := putExceptions(t, s, "S1", "b-1", 1, 2, x, y)
	if rc.Rows != 0 || rc.New != 0 || rc.Days != 0 || rc.Duplicate {
		t.Fatalf("receipt %+v", rc)
	}
	CheckExceptions(t, exceptionsOf(t, s, D1, "S1"), []hqstore.StoredException{
		StoredException("S1", x, at(1)), StoredException("S1", y, at(1))})
	if rows, days := rowsOf(t, s, D1, ""), daysOf(t, s, D1, ""); len(rows) != 0 || len(days) != 0 {
		t.Fatalf("%d rows and %d days, want none", len(rows), len(days))
	}
	if sn := Take(t, s); sn.Batches != 1 {
		t.Fatalf("%d batches, want 1", sn.Batches)
	}
	last, err := s.LastBatches(context.Background(), []string{"S1"})
	if err != nil || !last["S1"].Equal(at(1).Truncate(time.Millisecond)) {
		t.Fatalf("last batch of S1: %v (%v), want %v", last, err, at(1))
	}
}

// testExceptionsRefused: a batch refused for a row conflict stores none of its exceptions;
// an engine refuses a batch listing an exception twice, or one whose text holds a NUL
// character, and stores nothing of it.
func testExceptionsRefused(t *testing.T, s hqstore.Storage) {
	all := Sales("S1", "T1", 1, 5, D1, t0)
	b1, h1 := NewBatch("S1", "b-1", all[:3])
	MustPut(t, s, b1, h1, at1)
	before := Take(t, s, D1)

	x := Oversell("T1", 4, "SKU-0001", D1, t0, 2, 1)
	changed := Sale("S1", "T1", 2, D1, t0, 777, wire.MethodCash)
	b2, h2 := ExceptionBatch("S1", "b-2", []hqwire.Row{all[3], changed}, x)
	_, err := s.PutBatch(context.Background(), b2, h2, at2)
	mustCode(t, err, perr.Conflict, hqwire.CodeRowConflict)

	twice, ht := ExceptionBatch("S1", "b-2", all[3:], x, Resolved(x, t0, "counted", 2))
	_, err = s.PutBatch(context.Background(), twice, ht, at2)
	mustCode(t, err, perr.Invalid, hqwire.CodeBatchInvalid)

	nul := x
	nul.SKU = "SKU\x000001"
	bn, hn := ExceptionBatch("S1", "b-2", all[3:], nul)
	_, err = s.PutBatch(context.Background(), bn, hn, at2)
	mustCode(t, err, perr.Invalid, hqwire.CodeBatchInvalid)
	before.MustEqual(t, Take(t, s, D1), "after refused batches with exceptions")

	b3, h3 := ExceptionBatch("S1", "b-2", all[3:], x)
	if rc := MustPut(t, s, b3, h3, at3); rc.New != 2 || rc.Exceptions != 1 {
		t.Fatalf("corrected batch: %+v", rc)
	}
	CheckExceptions(t, exceptionsOf(t, s, D1, "S1"), []hqstore.StoredException{StoredException("S1", x, at3)})
}

// testExceptionsConcurrent: batches carrying states of the same exceptions, in different
// orders and at different change numbers, stored at once: each exception ends at its
// highest change number, whatever order the batches committed in.
func testExceptionsConcurrent(t *testing.T, s hqstore.Storage) {
	const batches, keys = 4, 60
	var wg sync.WaitGroup
	errs := make([]error, batches)
	for i := range batches {
		xs := make([]hqwire.Exception, keys)
		for k := range xs {
			xs[k] = Oversell(fmt.Sprintf("T%d", k%3), int64(k), "SKU-0001", D1, t0, int64(i+1), int64(i+1))
		}
		if i%2 == 1 {
			slices.Reverse(xs)
		}
		b, h := ExceptionBatch("S1", fmt.Sprintf("b-%d", i), nil, xs...)
		wg.Go(func() { _, errs[i] = s.PutBatch(context.Background(), b, h, at1) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
	}
	got := exceptionsOf(t, s, D1, "S1")
	if len(got) != keys {
		t.Fatalf("%d exceptions, want %d", len(got), keys)
	}
	for _, x := range got {
		if x.Change != batches || x.QtyShort != batches {
			t.Fatalf("exception %s at change %d (qty_short %d), want the highest, %d", x.Key(), x.Change, x.QtyShort, batches)
		}
	}
}
