package storetest

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/posgate/posgate/hq-sync/hqstore"
	"github.com/posgate/posgate/internal/hqwire"
	"github.com/posgate/posgate/internal/perr"
)

func testDayRevisions(t *testing.T, s hqstore.Storage) {
	rows := Sales("S1", "T1", 1, 6, D1, t0)
	rev1 := Day(D1, 1, t0.Add(time.Hour), rows[:4])
	b1, h1 := NewBatch("S1", "b-1", rows[:4], rev1)
	if rc := MustPut(t, s, b1, h1, at1); rc.Days != 1 || rc.DaysHeld != nil {
		t.Fatalf("first declaration: %+v", rc)
	}
	CheckDay(t, daysOf(t, s, D1, "S1")[0], "S1", rev1, at1, at1)

	// Late offline sales: revision 3 replaces revision 1 and its transactions; the day was
	// first declared at at1.
	rev3 := Day(D1, 3, t0.Add(2*time.Hour), rows)
	b2, h2 := NewBatch("S1", "b-2", rows[4:], rev3)
	if rc := MustPut(t, s, b2, h2, at2); rc.Days != 1 || rc.New != 2 {
		t.Fatalf("revision 3: %+v", rc)
	}
	CheckDay(t, daysOf(t, s, D1, "S1")[0], "S1", rev3, at2, at1)

	// A lower revision arriving late, and the same revision again with other content,
	// change nothing.
	before := Take(t, s, D1)
	rev2 := Day(D1, 2, t0.Add(90*time.Minute), rows[:5])
	b3, h3 := NewBatch("S1", "b-3", nil, rev2)
	// Each receipt says which revision HQ kept, and a replay gives the same answer.
	held := map[string]int64{D1: 3}
	if rc := MustPut(t, s, b3, h3, at3); rc.Days != 0 || !maps.Equal(rc.DaysHeld, held) {
		t.Fatalf("revision 2 after 3: %+v, want 0 days stored and %v held", rc, held)
	}
	if rc := MustPut(t, s, b3, h3, at3); !rc.Duplicate || !maps.Equal(rc.DaysHeld, held) {
		t.Fatalf("revision 2 after 3 replayed: %+v, want the original receipt", rc)
	}
	rev3b := Day(D1, 3, t0, rows[:1])
	b4, h4 := NewBatch("S1", "b-4", nil, rev3b)
	if rc := MustPut(t, s, b4, h4, at3); rc.Days != 0 || !maps.Equal(rc.DaysHeld, held) {
		t.Fatalf("revision 3 again: %+v, want 0 days stored and %v held", rc, held)
	}
	after := Take(t, s, D1)
	before.Batches += 2
	before.MustEqual(t, after, "after older revisions")

	// A declaration without transactions, and two days in one batch.
	empty := Day(D2, 1, t0, nil)
	b5, h5 := NewBatch("S2", "b-5", nil, empty, Day("2025-02-28", 1, t0, nil))
	if rc := MustPut(t, s, b5, h5, at3); rc.Days != 2 {
		t.Fatalf("two declarations: %+v", rc)
	}
	days := daysOf(t, s, D2, "")
	if len(days) != 1 || days[0].Day.Txns == nil {
		t.Fatalf("days of %s: %+v, want one with an empty (not nil) transaction list", D2, days)
	}
	CheckDay(t, days[0], "S2", empty, at3, at3)
}

// mustCount fails the test unless rc counts days stored and parts kept aside as given, and
// names the days held and the parts dropped.
func mustCount(tb testing.TB, rc hqwire.Receipt, days, parts int, held, dropped map[string]int64) {
	tb.Helper()
	if rc.Days != days || rc.DayParts != parts || !maps.Equal(rc.DaysHeld, held) || !maps.Equal(rc.PartsDropped, dropped) {
		tb.Fatalf("receipt %+v, want %d days, %d parts, held %v, dropped %v", rc, days, parts, held, dropped)
	}
}

// mustKeep fails the test unless s keeps parts of days store-days, holding txns transactions.
func mustKeep(tb testing.TB, s hqstore.Storage, days, txns int64) {
	tb.Helper()
	c, ok := s.(PartsCounter)
	if !ok {
		tb.Fatalf("%T does not implement storetest.PartsCounter", s)
	}
	gotDays, gotTxns, err := c.PartsKept(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	if gotDays != days || gotTxns != txns {
		tb.Fatalf("parts kept of %d days holding %d transactions, want %d days, %d transactions", gotDays, gotTxns, days, txns)
	}
}

// testDayParts: a revision in three parts stands only with its last part, whole and in
// order; until then the revision held before stands.
func testDayParts(t *testing.T, s hqstore.Storage) {
	rows := Sales("S1", "T1", 1, 200, D1, t0)
	rev1 := Day(D1, 1, t0.Add(time.Hour), rows[:10])
	b1, h1 := NewBatch("S1", "b-1", rows, rev1)
	mustCount(t, MustPut(t, s, b1, h1, at(1)), 1, 0, nil, nil)

	rev2 := Day(D1, 2, t0.Add(2*time.Hour), rows) // 67 + 67 + 66 transactions
	p := Parts(rev2, 3)
	mustCount(t, put(t, s, "S1", "b-2", 2, p[0]), 0, 1, nil, nil)
	CheckDay(t, daysOf(t, s, D1, "S1")[0], "S1", rev1, at(1), at(1))
	mustKeep(t, s, 1, 67)
	mustCount(t, put(t, s, "S1", "b-3", 3, p[1]), 0, 1, nil, nil)
	CheckDay(t, daysOf(t, s, D1, "")[0], "S1", rev1, at(1), at(1))
	mustKeep(t, s, 1, 134)

	// Replays of parts 1 and 2 answer their original receipts: part 1 does not start the
	// revision over, part 2 is not appended twice.
	for k, id := range []string{"b-2", "b-3"} {
		rc := put(t, s, "S1", id, 4, p[k])
		if !rc.Duplicate {
			t.Fatalf("replay of %s: %+v is not a duplicate", id, rc)
		}
		mustCount(t, rc, 0, 1, nil, nil)
	}
	mustKeep(t, s, 1, 134)

	// The last part: revision 2 stands, received with it, the day first declared at(1).
	mustCount(t, put(t, s, "S1", "b-4", 5, p[2]), 1, 0, nil, nil)
	days := daysOf(t, s, D1, "")
	if len(days) != 1 {
		t.Fatalf("%d days, want 1", len(days))
	}
	CheckDay(t, days[0], "S1", rev2, at(5), at(1))
	mustKeep(t, s, 0, 0)
	before := Take(t, s, D1)

	// Its replay, and any part of revision 2 again, change nothing; a part of a revision no
	// higher than the one held is held, not dropped.
	if rc := put(t, s, "S1", "b-4", 6, p[2]); !rc.Duplicate || rc.Days != 1 {
		t.Fatalf("replay of the last part: %+v", rc)
	}
	held := map[string]int64{D1: 2}
	mustCount(t, put(t, s, "S1", "b-5", 6, p[0]), 0, 0, held, nil)
	mustCount(t, put(t, s, "S1", "b-6", 6, p[1]), 0, 0, held, nil)
	old := Parts(Day(D1, 1, t0, rows[:20]), 2)
	mustCount(t, put(t, s, "S1", "b-7", 6, old[1]), 0, 0, held, nil)
	mustKeep(t, s, 0, 0)
	before.Batches += 3
	before.MustEqual(t, Take(t, s, D1), "after parts of revisions held")

	// A day never declared before, in two parts: it stands with its last part and was first
	// declared with its first (the store's list was taken before it: a row that reaches HQ
	// after it is late).
	first := Day(D2, 1, t0, Sales("S1", "T2", 1, 5, D2, t0))
	q := Parts(first, 2)
	mustCount(t, put(t, s, "S1", "b-8", 7, q[0]), 0, 1, nil, nil)
	if days := daysOf(t, s, D2, ""); len(days) != 0 {
		t.Fatalf("days of %s after its first part: %+v, want none", D2, days)
	}
	mustCount(t, put(t, s, "S1", "b-9", 8, q[1]), 1, 0, nil, nil)
	CheckDay(t, daysOf(t, s, D2, "S1")[0], "S1", first, at(8), at(7))
	mustKeep(t, s, 0, 0)
}

// testDayPartsDropped: a part k > 1 that does not follow the parts kept (none kept,
// another revision, another number of parts, another split of the same revision and
// number of parts, or none where the parts kept have one, not the next part) is dropped
// whole and leaves the parts kept as they were.
func testDayPartsDropped(t *testing.T, s hqstore.Storage) {
	rev2 := Day(D1, 2, t0, Sales("S1", "T1", 1, 9, D1, t0))
	p := Parts(rev2, 3)
	mustCount(t, put(t, s, "S1", "b-1", 1, p[0]), 0, 1, nil, nil)
	before := Take(t, s, D1, D2)

	otherRev := Parts(Day(D1, 3, t0, Sales("S1", "T1", 1, 9, D1, t0)), 3)[1]
	otherParts := Parts(rev2, 4)[1]
	otherDay := Parts(Day(D2, 1, t0, Sales("S1", "T1", 20, 4, D2, t0)), 2)[1]
	otherSplit := Resplit(p, "again")[1]
	noSplit := Resplit(p, "")[1]
	cases := []struct {
		id      string
		day     hqwire.StoreDay
		dropped map[string]int64
	}{
		{"b-2", otherRev, map[string]int64{D1: 3}},
		{"b-3", otherParts, map[string]int64{D1: 2}},
		{"b-4", p[2], map[string]int64{D1: 2}}, // part 3 after part 1, the last one at that
		{"b-5", otherDay, map[string]int64{D2: 1}},
		{"b-6", otherSplit, map[string]int64{D1: 2}},
		{"b-7", noSplit, map[string]int64{D1: 2}},
	}
	for i, c := range cases {
		mustCount(t, put(t, s, "S1", c.id, 2+i, c.day), 0, 0, nil, c.dropped)
	}
	// The receipt of a batch of dropped parts is answered again as it was.
	if rc := put(t, s, "S1", "b-4", 9, p[2]); !rc.Duplicate || !maps.Equal(rc.PartsDropped, map[string]int64{D1: 2}) {
		t.Fatalf("replay of a dropped part: %+v", rc)
	}
	mustKeep(t, s, 1, 3)
	before.Batches += int64(len(cases))
	before.MustEqual(t, Take(t, s, D1, D2), "after dropped parts")

	// The parts kept still take their next parts, and the day is exactly revision 2.
	mustCount(t, put(t, s, "S1", "b-8", 7, p[1]), 0, 1, nil, nil)
	mustCount(t, put(t, s, "S1", "b-9", 8, p[2]), 1, 0, nil, nil)
	CheckDay(t, daysOf(t, s, D1, "S1")[0], "S1", rev2, at(8), at(1))
	mustKeep(t, s, 0, 0)
	if days := daysOf(t, s, D2, ""); len(days) != 0 {
		t.Fatalf("days of %s: %+v, want none", D2, days)
	}
}

// testDayPartsAbandoned: DropDrafts deletes the parts kept aside whose part 1 came before
// the time given, of every store, and no others; a store that sends the next part after
// all has it dropped, and its day stands once it declares the day anew.
func testDayPartsAbandoned(t *testing.T, s hqstore.Storage) {
	rev := Day(D1, 1, t0, Sales("S1", "T1", 1, 9, D1, t0))
	p := Parts(rev, 3)
	mustCount(t, put(t, s, "S1", "b-1", 1, p[0]), 0, 1, nil, nil)
	other := Day(D1, 1, t0, Sales("S2", "T1", 1, 4, D1, t0))
	q := Parts(other, 2)
	mustCount(t, put(t, s, "S2", "c-1", 3, q[0]), 0, 1, nil, nil)
	mustKeep(t, s, 2, 5)

	drop := func(before time.Time, want int64) {
		t.Helper()
		n, err := s.DropDrafts(context.Background(), before)
		if err != nil {
			t.Fatal(err)
		}
		if n != want {
			t.Fatalf("DropDrafts(%v) dropped %d, want %d", before, n, want)
		}
	}
	drop(at(1), 0) // part 1 came at(1): not before it
	mustKeep(t, s, 2, 5)
	drop(at(2), 1)
	mustKeep(t, s, 1, 2) // S2's part 1 stands
	drop(at(2), 0)

	// S1 sends its part 2 after all: dropped, and the day is not declared.
	mustCount(t, put(t, s, "S1", "b-2", 4, p[1]), 0, 0, nil, map[string]int64{D1: 1})
	if days := daysOf(t, s, D1, "S1"); len(days) != 0 {
		t.Fatalf("days of S1 after a part of dropped parts: %+v, want none", days)
	}
	// It declares the day anew, cut again: the day stands, whole.
	r := Resplit(Parts(rev, 2), "again")
	mustCount(t, put(t, s, "S1", "b-3", 5, r[0]), 0, 1, nil, nil)
	mustCount(t, put(t, s, "S1", "b-4", 6, r[1]), 1, 0, nil, nil)
	CheckDay(t, daysOf(t, s, D1, "S1")[0], "S1", rev, at(6), at(5))
	// S2's parts were left as they were: its last part makes its day.
	mustCount(t, put(t, s, "S2", "c-2", 7, q[1]), 1, 0, nil, nil)
	CheckDay(t, daysOf(t, s, D1, "S2")[0], "S2", other, at(7), at(3))
	mustKeep(t, s, 0, 0)
}

// testDayPartsRestart: part 1 starts the day's parts over, whatever was kept before (of
// the same revision cut otherwise, or of another revision, higher or lower).
func testDayPartsRestart(t *testing.T, s hqstore.Storage) {
	rows := Sales("S1", "T1", 1, 12, D1, t0)
	rev2 := Day(D1, 2, t0, rows)
	in3, in2 := Parts(rev2, 3), Parts(rev2, 2)
	mustCount(t, put(t, s, "S1", "b-1", 1, in3[0]), 0, 1, nil, nil)
	mustCount(t, put(t, s, "S1", "b-2", 2, in3[1]), 0, 1, nil, nil)
	mustCount(t, put(t, s, "S1", "b-3", 3, in2[0]), 0, 1, nil, nil)
	mustKeep(t, s, 1, 6)
	// The cut in three is gone: its last part does not follow the cut in two.
	mustCount(t, put(t, s, "S1", "b-4", 4, in3[2]), 0, 0, nil, map[string]int64{D1: 2})

	// Revision 3 starts over, then revision 2 starts over again (the store lost its state).
	rev3 := Parts(Day(D1, 3, t0, rows[:4]), 2)
	mustCount(t, put(t, s, "S1", "b-5", 5, rev3[0]), 0, 1, nil, nil)
	mustCount(t, put(t, s, "S1", "b-6", 6, in2[0]), 0, 1, nil, nil)
	mustCount(t, put(t, s, "S1", "b-7", 7, rev3[1]), 0, 0, nil, map[string]int64{D1: 3})
	mustKeep(t, s, 1, 6)
	if days := daysOf(t, s, D1, ""); len(days) != 0 {
		t.Fatalf("days of %s before a last part: %+v, want none", D1, days)
	}
	mustCount(t, put(t, s, "S1", "b-8", 8, in2[1]), 1, 0, nil, nil)
	CheckDay(t, daysOf(t, s, D1, "S1")[0], "S1", rev2, at(8), at(6)) // first declared by its part 1
	mustKeep(t, s, 0, 0)
}

// testDayPartsAndWhole: a whole declaration that stands drops the parts kept of its
// revision or lower, and leaves those of a higher one; one that is held leaves them too.
func testDayPartsAndWhole(t *testing.T, s hqstore.Storage) {
	rows := Sales("S1", "T1", 1, 12, D1, t0)
	rev2 := Parts(Day(D1, 2, t0, rows[:6]), 2)
	mustCount(t, put(t, s, "S1", "b-1", 1, rev2[0]), 0, 1, nil, nil)
	rev3 := Day(D1, 3, t0.Add(time.Hour), rows[:8])
	mustCount(t, put(t, s, "S1", "b-2", 2, rev3), 1, 0, nil, nil)
	mustKeep(t, s, 0, 0)
	mustCount(t, put(t, s, "S1", "b-3", 3, rev2[1]), 0, 0, map[string]int64{D1: 3}, nil)
	CheckDay(t, daysOf(t, s, D1, "S1")[0], "S1", rev3, at(2), at(2))

	// Parts of revision 3 kept, then revision 3 whole again: held, the parts stay (and
	// can only be held in turn).
	again := Parts(Day(D1, 3, t0, rows), 2)
	mustCount(t, put(t, s, "S1", "b-4", 4, again[0]), 0, 0, map[string]int64{D1: 3}, nil)
	mustKeep(t, s, 0, 0)

	// Parts of revision 5 kept; revision 4 whole stands below them and leaves them; their
	// last part makes revision 5 stand, the day first declared at(2).
	rev5 := Day(D1, 5, t0.Add(3*time.Hour), rows)
	p5 := Parts(rev5, 2)
	mustCount(t, put(t, s, "S1", "b-5", 5, p5[0]), 0, 1, nil, nil)
	mustCount(t, put(t, s, "S1", "b-6", 6, Day(D1, 4, t0, rows[:10])), 1, 0, nil, nil)
	mustCount(t, put(t, s, "S1", "b-7", 7, Day(D1, 4, t0, rows[:10])), 0, 0, map[string]int64{D1: 4}, nil)
	mustKeep(t, s, 1, 6)
	mustCount(t, put(t, s, "S1", "b-8", 8, p5[1]), 1, 0, nil, nil)
	CheckDay(t, daysOf(t, s, D1, "S1")[0], "S1", rev5, at(8), at(2))
	mustKeep(t, s, 0, 0)

	// A part 1 of a revision no higher than the one held keeps nothing.
	mustCount(t, put(t, s, "S1", "b-9", 9, Parts(Day(D1, 5, t0, rows), 3)[0]), 0, 0, map[string]int64{D1: 5}, nil)
	mustKeep(t, s, 0, 0)

	// Parts of revision 6 kept, then revision 6 whole: it stands and the parts are gone.
	rev6 := Day(D1, 6, t0.Add(4*time.Hour), rows[:11])
	p6 := Parts(rev6, 2)
	mustCount(t, put(t, s, "S1", "b-10", 10, p6[0]), 0, 1, nil, nil)
	mustCount(t, put(t, s, "S1", "b-11", 11, rev6), 1, 0, nil, nil)
	mustKeep(t, s, 0, 0)
	mustCount(t, put(t, s, "S1", "b-12", 12, p6[1]), 0, 0, map[string]int64{D1: 6}, nil)
	CheckDay(t, daysOf(t, s, D1, "S1")[0], "S1", rev6, at(11), at(2))
}

// testDayPartsInterleaved: the parts of two dates travel in the same batches, and the
// parts of two stores of one date, each independent of the others.
func testDayPartsInterleaved(t *testing.T, s hqstore.Storage) {
	d1 := Day(D1, 1, t0, Sales("S1", "T1", 1, 90, D1, t0))
	d2 := Day(D2, 4, t0.Add(time.Hour), Sales("S1", "T1", 100, 10, D2, t0))
	o1 := Day(D1, 2, t0, Sales("S2", "T1", 1, 7, D1, t0))
	p1, p2, q1 := Parts(d1, 3), Parts(d2, 2), Parts(o1, 2)
	mustCount(t, put(t, s, "S1", "b-1", 1, p1[0], p2[0]), 0, 2, nil, nil)
	mustCount(t, put(t, s, "S2", "b-1", 1, q1[0]), 0, 1, nil, nil)
	mustKeep(t, s, 3, 30+5+4)
	// S2's part 2 of 2 does not fit S1's draft of D2 in another store.
	mustCount(t, put(t, s, "S2", "b-2", 2, p2[1]), 0, 0, nil, map[string]int64{D2: 4})
	mustCount(t, put(t, s, "S1", "b-2", 2, p2[1], p1[1]), 1, 1, nil, nil)
	CheckDay(t, daysOf(t, s, D2, "")[0], "S1", d2, at(2), at(1))
	if days := daysOf(t, s, D1, ""); len(days) != 0 {
		t.Fatalf("days of %s: %+v, want none", D1, days)
	}
	mustCount(t, put(t, s, "S2", "b-3", 3, q1[1]), 1, 0, nil, nil)
	mustCount(t, put(t, s, "S1", "b-3", 4, p1[2]), 1, 0, nil, nil)
	days := daysOf(t, s, D1, "")
	if len(days) != 2 {
		t.Fatalf("%d days of %s, want 2", len(days), D1)
	}
	CheckDay(t, days[0], "S1", d1, at(4), at(1))
	CheckDay(t, days[1], "S2", o1, at(3), at(1))
	mustKeep(t, s, 0, 0)
}

// testDayPartsNumbered: an engine refuses parts numbered outside 1 ≤ part ≤ parts ≤
// hqwire.MaxDayParts, or with a split id that is not an id, as hq-sync serve does, and stores
// nothing of the batch.
func testDayPartsNumbered(t *testing.T, s hqstore.Storage) {
	before := Take(t, s, D1)
	for _, pp := range [][2]int{{3, 2}, {0, 2}, {1, 0}, {2, hqwire.MaxDayParts + 1}, {1, 2}} {
		d := Day(D1, 1, t0, Sales("S1", "T1", 1, 3, D1, t0))
		d.Part, d.Parts, d.Split = pp[0], pp[1], "s"
		if pp == [2]int{1, 2} {
			d.Split = "not an id"
		}
		b, h := NewBatch("S1", "b-1", Sales("S1", "T1", 1, 3, D1, t0), d)
		_, err := s.PutBatch(context.Background(), b, h, at1)
		mustCode(t, err, perr.Invalid, hqwire.CodeBatchInvalid)
	}
	before.MustEqual(t, Take(t, s, D1), "after parts numbered wrong")
	mustKeep(t, s, 0, 0)
}
