// Package storetest is the one test suite every HQ storage engine (hqstore/sqlite,
// hqstore/postgres) runs against a real database, plus the benchmarks they share and
// generators of valid rows, days and batches.
//
// An engine's _test.go calls Run with a function that opens a fresh, empty store. The
// package never mocks a database: the suite is only as good as the engine it is given.
package storetest

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/posgate/posgate/hq-sync/hqstore"
	"github.com/posgate/posgate/internal/hqwire"
	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/perr"
	"github.com/posgate/posgate/internal/wire"
)

// BatchCounter is implemented by both engines: the suite counts stored batches to prove
// that a refused batch left nothing behind.
type BatchCounter interface {
	BatchCount(ctx context.Context) (int64, error)
}

// PartsCounter is implemented by both engines: the suite counts the parts kept aside to
// prove that a completed, replaced or outranked declaration in parts leaves nothing behind.
type PartsCounter interface {
	PartsKept(ctx context.Context) (days, txns int64, err error)
}

// Dates and times the suite uses.
const (
	D1 = "2025-03-01"
	D2 = "2025-03-02"
)

// T0 is the business time of the suite's first sale (store time, UTC+08:00).
var T0 = t0

var (
	t0  = time.Date(2025, 3, 1, 10, 0, 0, 0, time.FixedZone("UTC+08:00", 8*3600))
	at1 = time.Date(2025, 3, 2, 1, 0, 0, 123456789, time.UTC) // HQ's receive times
	at2 = at1.Add(time.Hour)
	at3 = at2.Add(time.Hour)
)

// Run runs the suite. open must return a fresh, empty store that implements BatchCounter
// and PartsCounter and is closed when its test ends.
func Run(t *testing.T, open func(t *testing.T) hqstore.Storage) {
	cases := []struct {
		name string
		f    func(t *testing.T, s hqstore.Storage)
	}{
		{"NewBatch", testNewBatch},
		{"Replay", testReplay},
		{"BatchIDReused", testBatchIDReused},
		{"RowsUniqueAcrossBatches", testRowsUnique},
		{"RowConflict", testRowConflict},
		{"TwinRowsInBatch", testTwinRows},
		{"DayRevisions", testDayRevisions},
		{"Filtering", testFiltering},
		{"ConcurrentSameBatch", testConcurrentSameBatch},
		{"ConcurrentOverlappingBatches", testConcurrentOverlapping},
		{"BigBatch", testBigBatch},
		{"UnknownMethod", testUnknownMethod},
		{"DayParts", testDayParts},
		{"DayPartsDropped", testDayPartsDropped},
		{"DayPartsRestart", testDayPartsRestart},
		{"DayPartsAndWhole", testDayPartsAndWhole},
		{"DayPartsInterleaved", testDayPartsInterleaved},
		{"DayPartsNumbered", testDayPartsNumbered},
		{"DayPartsAbandoned", testDayPartsAbandoned},
		{"LastBatches", testLastBatches},
		{"Exceptions", testExceptions},
		{"ExceptionsByChange", testExceptionsByChange},
		{"ExceptionsWithdrawn", testExceptionsWithdrawn},
		{"ExceptionsFiltering", testExceptionsFiltering},
		{"OpenExceptions", testOpenExceptions},
		{"ExceptionsReplay", testExceptionsReplay},
		{"ExceptionsOnly", testExceptionsOnly},
		{"ExceptionsRefused", testExceptionsRefused},
		{"ExceptionsConcurrent", testExceptionsConcurrent},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := open(t)
			if _, ok := s.(BatchCounter); !ok {
				t.Fatalf("%T does not implement storetest.BatchCounter", s)
			}
			if _, ok := s.(PartsCounter); !ok {
				t.Fatalf("%T does not implement storetest.PartsCounter", s)
			}
			c.f(t, s)
		})
	}
}

// MustPut stores a batch and fails the test on an error.
func MustPut(tb testing.TB, s hqstore.Storage, b *hqwire.Batch, hash string, at time.Time) hqwire.Receipt {
	tb.Helper()
	rc, err := s.PutBatch(context.Background(), b, hash, at)
	if err != nil {
		tb.Fatalf("PutBatch %s/%s: %v", b.Store, b.ID, err)
	}
	return rc
}

// Snapshot is everything a store holds of some dates, to compare before and after.
type Snapshot struct {
	Rows       map[string][]hqstore.StoredRow
	Days       map[string][]hqstore.StoredDay
	Exceptions map[string][]hqstore.StoredException
	Batches    int64
}

// Take returns the snapshot of s for dates (of all stores).
func Take(tb testing.TB, s hqstore.Storage, dates ...string) Snapshot {
	tb.Helper()
	ctx := context.Background()
	sn := Snapshot{Rows: map[string][]hqstore.StoredRow{}, Days: map[string][]hqstore.StoredDay{},
		Exceptions: map[string][]hqstore.StoredException{}}
	for _, d := range dates {
		rows, err := s.Rows(ctx, d, "")
		if err != nil {
			tb.Fatal(err)
		}
		days, err := s.Days(ctx, d, "")
		if err != nil {
			tb.Fatal(err)
		}
		xs, err := s.Exceptions(ctx, d, "")
		if err != nil {
			tb.Fatal(err)
		}
		sn.Rows[d], sn.Days[d], sn.Exceptions[d] = rows, days, xs
	}
	c, ok := s.(BatchCounter)
	if !ok {
		tb.Fatalf("%T does not implement storetest.BatchCounter", s)
	}
	n, err := c.BatchCount(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	sn.Batches = n
	return sn
}

// MustEqual fails the test unless two snapshots are the same.
func (sn Snapshot) MustEqual(tb testing.TB, after Snapshot, what string) {
	tb.Helper()
	if sn.Batches != after.Batches {
		tb.Errorf("%s: %d batches stored, was %d", what, after.Batches, sn.Batches)
	}
	for d := range sn.Rows {
		if !reflect.DeepEqual(sn.Rows[d], after.Rows[d]) {
			tb.Errorf("%s: rows of %s changed: %d rows, was %d", what, d, len(after.Rows[d]), len(sn.Rows[d]))
		}
		if !reflect.DeepEqual(sn.Days[d], after.Days[d]) {
			tb.Errorf("%s: days of %s changed:\n got %+v\nwant %+v", what, d, after.Days[d], sn.Days[d])
		}
		if !reflect.DeepEqual(sn.Exceptions[d], after.Exceptions[d]) {
			tb.Errorf("%s: exceptions of %s changed:\n got %+v\nwant %+v", what, d, after.Exceptions[d], sn.Exceptions[d])
		}
	}
}

// Stored returns the row as HQ should hold it, received at.
func Stored(store string, r hqwire.Row, at time.Time) hqstore.StoredRow {
	sr := hqstore.StoredRow{Store: store, Terminal: r.Terminal, Seq: r.Seq, Kind: r.Kind, BusinessDate: r.BusinessDate,
		FlowNo: r.FlowNo, Amount: r.Amount, ByMethod: r.ByMethod, ReceivedAt: time.UnixMilli(at.UnixMilli()).UTC()}
	if len(sr.ByMethod) == 0 {
		sr.ByMethod = nil
	}
	if r.Kind == hqwire.KindDayClose {
		sr.Payload = r.Payload
	}
	return sr
}

// CheckRows fails the test unless got holds exactly want, in (store, terminal, seq) order.
func CheckRows(tb testing.TB, got, want []hqstore.StoredRow) {
	tb.Helper()
	want = slices.Clone(want)
	slices.SortFunc(want, func(a, b hqstore.StoredRow) int {
		if a.Store != b.Store {
			return cmpStr(a.Store, b.Store)
		}
		if a.Terminal != b.Terminal {
			return cmpStr(a.Terminal, b.Terminal)
		}
		return int(a.Seq - b.Seq)
	})
	if len(got) != len(want) {
		tb.Fatalf("%d rows, want %d", len(got), len(want))
	}
	for i := range got {
		g, w := got[i], want[i]
		if g.Store != w.Store || g.Terminal != w.Terminal || g.Seq != w.Seq || g.Kind != w.Kind ||
			g.BusinessDate != w.BusinessDate || g.FlowNo != w.FlowNo || g.Amount != w.Amount ||
			!maps.Equal(g.ByMethod, w.ByMethod) || !g.ReceivedAt.Equal(w.ReceivedAt) || string(g.Payload) != string(w.Payload) {
			tb.Fatalf("row %d:\n got %+v\nwant %+v", i, g, w)
		}
	}
}

func cmpStr(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// CheckDay fails the test unless got is the declaration want of store, received at
// received and first declared at first.
func CheckDay(tb testing.TB, got hqstore.StoredDay, store string, want hqwire.StoreDay, received, first time.Time) {
	tb.Helper()
	ms := func(t time.Time) time.Time { return time.UnixMilli(t.UnixMilli()) }
	if got.Store != store || got.Day.BusinessDate != want.BusinessDate || got.Day.Revision != want.Revision ||
		!got.Day.ClosedAt.Equal(want.ClosedAt) || !got.ReceivedAt.Equal(ms(received)) || !got.FirstAt.Equal(ms(first)) {
		tb.Fatalf("day:\n got %s %s rev %d closed %v received %v first %v\nwant %s %s rev %d closed %v received %v first %v",
			got.Store, got.Day.BusinessDate, got.Day.Revision, got.Day.ClosedAt, got.ReceivedAt, got.FirstAt,
			store, want.BusinessDate, want.Revision, want.ClosedAt, ms(received), ms(first))
	}
	if len(got.Day.Txns) != len(want.Txns) {
		tb.Fatalf("day %s of %s: %d transactions, want %d", want.BusinessDate, store, len(got.Day.Txns), len(want.Txns))
	}
	for i, g := range got.Day.Txns {
		w := want.Txns[i]
		if g.Terminal != w.Terminal || g.Seq != w.Seq || g.Kind != w.Kind || g.FlowNo != w.FlowNo ||
			g.Amount != w.Amount || !maps.Equal(g.ByMethod, w.ByMethod) {
			tb.Fatalf("day %s of %s: transaction %d:\n got %+v\nwant %+v", want.BusinessDate, store, i, g, w)
		}
	}
}

// StoredException returns the exception as HQ should hold it for store, received at.
func StoredException(store string, x hqwire.Exception, at time.Time) hqstore.StoredException {
	return hqstore.StoredException{Store: store, Exception: x, ReceivedAt: time.UnixMilli(at.UnixMilli()).UTC()}
}

// CheckExceptions fails the test unless got holds exactly want, in want's order.
func CheckExceptions(tb testing.TB, got, want []hqstore.StoredException) {
	tb.Helper()
	if len(got) != len(want) {
		tb.Fatalf("%d exceptions, want %d:\n got %+v\nwant %+v", len(got), len(want), got, want)
	}
	for i := range got {
		g, w := got[i], want[i]
		if g.Store != w.Store || g.Change != w.Change || g.Kind != w.Kind || g.Terminal != w.Terminal || g.Seq != w.Seq ||
			g.SKU != w.SKU || g.BusinessDate != w.BusinessDate || g.Withdrawn != w.Withdrawn || g.Code != w.Code ||
			g.Detail != w.Detail || g.QtyShort != w.QtyShort || !g.At.Equal(w.At) || g.Resolved != w.Resolved ||
			!g.ResolvedAt.Equal(w.ResolvedAt) || g.Resolution != w.Resolution || !g.ReceivedAt.Equal(w.ReceivedAt) {
			tb.Fatalf("exception %d:\n got %+v\nwant %+v", i, g, w)
		}
	}
}

func mustCode(tb testing.TB, err error, kind perr.Kind, code string) {
	tb.Helper()
	if err == nil {
		tb.Fatalf("no error, want %s %s", kind, code)
	}
	if perr.KindOf(err) != kind || perr.CodeOf(err) != code {
		tb.Fatalf("error %v is %s %s, want %s %s", err, perr.KindOf(err), perr.CodeOf(err), kind, code)
	}
}

func rowsOf(tb testing.TB, s hqstore.Storage, date, store string) []hqstore.StoredRow {
	tb.Helper()
	rows, err := s.Rows(context.Background(), date, store)
	if err != nil {
		tb.Fatal(err)
	}
	return rows
}

func daysOf(tb testing.TB, s hqstore.Storage, date, store string) []hqstore.StoredDay {
	tb.Helper()
	days, err := s.Days(context.Background(), date, store)
	if err != nil {
		tb.Fatal(err)
	}
	return days
}

func exceptionsOf(tb testing.TB, s hqstore.Storage, date, store string) []hqstore.StoredException {
	tb.Helper()
	xs, err := s.Exceptions(context.Background(), date, store)
	if err != nil {
		tb.Fatal(err)
	}
	return xs
}

func storedAll(store string, rows []hqwire.Row, at time.Time) []hqstore.StoredRow {
	out := make([]hqstore.StoredRow, len(rows))
	for i, r := range rows {
		out[i] = Stored(store, r, at)
	}
	return out
}

// mixedRows returns sales of two terminals, a refund, a day close and a sale whose
// by_method names a method with 0.00 (which must read back as sent).
func mixedRows(store, date string) []hqwire.Row {
	rows := Sales(store, "T1", 1, 5, date, t0)
	rows = append(rows, Sales(store, "T2", 1, 3, date, t0)...)
	rows = append(rows, Refund(store, "T1", 6, date, t0.Add(time.Hour), 2, rows[1].Amount, wire.MethodCard))
	split := Sale(store, "T2", 4, date, t0.Add(2*time.Hour), 1000, wire.MethodCash)
	split.ByMethod = map[string]money.Fen{"cash": 1000, "qr": 0}
	rows = append(rows, split)
	rows = append(rows, DayClose(store, "T1", 7, date, t0.Add(3*time.Hour), rows))
	return rows
}

func testNewBatch(t *testing.T, s hqstore.Storage) {
	rows := mixedRows("S1", D1)
	day := Day(D1, 1, t0.Add(4*time.Hour), rows)
	b, h := NewBatch("S1", "b-1", rows, day)
	rc := MustPut(t, s, b, h, at1)
	want := hqwire.Receipt{Store: "S1", BatchID: "b-1", Rows: len(rows), New: len(rows), Days: 1, StoredAt: at1}
	if rc.Store != want.Store || rc.BatchID != want.BatchID || rc.Rows != want.Rows || rc.New != want.New ||
		rc.Days != want.Days || rc.Duplicate || !rc.StoredAt.Equal(at1) {
		t.Fatalf("receipt %+v, want %+v", rc, want)
	}
	CheckRows(t, rowsOf(t, s, D1, "S1"), storedAll("S1", rows, at1))
	days := daysOf(t, s, D1, "S1")
	if len(days) != 1 {
		t.Fatalf("%d days, want 1", len(days))
	}
	CheckDay(t, days[0], "S1", day, at1, at1)
	if n := Take(t, s).Batches; n != 1 {
		t.Fatalf("%d batches, want 1", n)
	}
}

func testReplay(t *testing.T, s hqstore.Storage) {
	rows := mixedRows("S1", D1)
	b, h := NewBatch("S1", "b-1", rows, Day(D1, 1, t0, rows))
	first := MustPut(t, s, b, h, at1)
	before := Take(t, s, D1)
	for _, at := range []time.Time{at2, at1} {
		again := MustPut(t, s, b, h, at)
		if !again.Duplicate {
			t.Fatalf("replay: receipt %+v is not a duplicate", again)
		}
		again.Duplicate = false
		if again.Store != first.Store || again.BatchID != first.BatchID || again.Rows != first.Rows ||
			again.New != first.New || again.Days != first.Days || !again.StoredAt.Equal(first.StoredAt) {
			t.Fatalf("replay receipt %+v, want the original %+v", again, first)
		}
	}
	before.MustEqual(t, Take(t, s, D1), "after a replay")
}

func testBatchIDReused(t *testing.T, s hqstore.Storage) {
	rows := Sales("S1", "T1", 1, 5, D1, t0)
	b, h := NewBatch("S1", "b-1", rows)
	first := MustPut(t, s, b, h, at1)
	before := Take(t, s, D1, D2)

	other := Sales("S1", "T1", 6, 5, D2, t0) // new rows under the same id
	b2, h2 := NewBatch("S1", "b-1", other, Day(D2, 1, t0, other))
	_, err := s.PutBatch(context.Background(), b2, h2, at2)
	mustCode(t, err, perr.Conflict, hqwire.CodeBatchIDReused)
	before.MustEqual(t, Take(t, s, D1, D2), "after a reused batch id")

	// The original stands: its replay is still a duplicate of the first receipt.
	again := MustPut(t, s, b, h, at3)
	if !again.Duplicate || again.New != first.New || !again.StoredAt.Equal(first.StoredAt) {
		t.Fatalf("replay of the original after a reuse: %+v, want duplicate of %+v", again, first)
	}
	// The same id in another store is another batch.
	b3, h3 := NewBatch("S2", "b-1", Sales("S2", "T1", 1, 2, D1, t0))
	if rc := MustPut(t, s, b3, h3, at2); rc.Duplicate || rc.New != 2 {
		t.Fatalf("batch b-1 of another store: %+v", rc)
	}
}

func testRowsUnique(t *testing.T, s hqstore.Storage) {
	all := Sales("S1", "T1", 1, 15, D1, t0)
	b1, h1 := NewBatch("S1", "b-1", all[:10])
	if rc := MustPut(t, s, b1, h1, at1); rc.New != 10 || rc.Rows != 10 {
		t.Fatalf("first batch: %+v", rc)
	}
	// A resend of rows 6-10 in another batch, with 5 new rows: only those count as new and
	// the resent rows keep their first receive time.
	b2, h2 := NewBatch("S1", "b-2", all[5:])
	if rc := MustPut(t, s, b2, h2, at2); rc.New != 5 || rc.Rows != 10 || rc.Duplicate {
		t.Fatalf("overlapping batch: %+v, want 5 new of 10", rc)
	}
	want := append(storedAll("S1", all[:10], at1), storedAll("S1", all[10:], at2)...)
	CheckRows(t, rowsOf(t, s, D1, ""), want)
	// A batch of only old rows stores nothing new but is a batch.
	b3, h3 := NewBatch("S1", "b-3", all[:3])
	if rc := MustPut(t, s, b3, h3, at3); rc.New != 0 || rc.Rows != 3 {
		t.Fatalf("batch of old rows: %+v", rc)
	}
	CheckRows(t, rowsOf(t, s, D1, ""), want)
	if n := Take(t, s).Batches; n != 3 {
		t.Fatalf("%d batches, want 3", n)
	}
}

func testRowConflict(t *testing.T, s hqstore.Storage) {
	all := Sales("S1", "T1", 1, 20, D1, t0)
	b1, h1 := NewBatch("S1", "b-1", all[:10], Day(D1, 1, t0, all[:10]))
	MustPut(t, s, b1, h1, at1)
	before := Take(t, s, D1)

	// New rows 11-20 and row 3 again with other content: the whole batch is refused, its
	// new rows and its day declaration included.
	changed := Sale("S1", "T1", 3, D1, t0, 777, wire.MethodCash)
	rows := append(slices.Clone(all[10:]), changed)
	b2, h2 := NewBatch("S1", "b-2", rows, Day(D1, 2, t0, all))
	_, err := s.PutBatch(context.Background(), b2, h2, at2)
	mustCode(t, err, perr.Conflict, hqwire.CodeRowConflict)
	before.MustEqual(t, Take(t, s, D1), "after a row conflict")

	// The batch id was not taken: the corrected batch under the same id is stored.
	b3, h3 := NewBatch("S1", "b-2", all[10:], Day(D1, 2, t0, all))
	if rc := MustPut(t, s, b3, h3, at3); rc.New != 10 || rc.Days != 1 {
		t.Fatalf("corrected batch: %+v", rc)
	}
}

func testTwinRows(t *testing.T, s hqstore.Storage) {
	rows := Sales("S1", "T1", 1, 3, D1, t0)
	// The same row twice in one batch is one row.
	b1, h1 := NewBatch("S1", "b-1", append(slices.Clone(rows), rows[1]))
	if rc := MustPut(t, s, b1, h1, at1); rc.New != 3 || rc.Rows != 4 {
		t.Fatalf("batch with a twin row: %+v, want 3 new of 4", rc)
	}
	before := Take(t, s, D1)
	// The same key twice with different content is a conflict, even when both are new.
	more := Sales("S1", "T1", 4, 2, D1, t0)
	b2, h2 := NewBatch("S1", "b-2", append(slices.Clone(more), Sale("S1", "T1", 5, D1, t0, 1, wire.MethodQR)))
	_, err := s.PutBatch(context.Background(), b2, h2, at2)
	mustCode(t, err, perr.Conflict, hqwire.CodeRowConflict)
	before.MustEqual(t, Take(t, s, D1), "after twin rows with different content")
}

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

func testFiltering(t *testing.T, s hqstore.Storage) {
	var want = map[string][]hqstore.StoredRow{} // by date, then "date/store"
	var decl = map[string]hqwire.StoreDay{}
	for i, store := range []string{"S2", "S10", "S1"} { // byte order: S1 < S10 < S2
		var rows []hqwire.Row
		for _, d := range []string{D1, D2} {
			rows = append(rows, mixedRows(store, d)...)
		}
		// Seqs of one terminal are unique across dates.
		for j := range rows {
			if rows[j].BusinessDate == D2 {
				rows[j].Seq += 100
				rows[j].Hash = fmt.Sprintf("h-%s-%d", store, j)
			}
		}
		d1, d2 := Day(D1, 1, t0, rows), Day(D2, int64(i+1), t0, rows)
		b, h := NewBatch(store, "b", rows, d1, d2)
		MustPut(t, s, b, h, at1)
		for _, r := range rows {
			sr := Stored(store, r, at1)
			want[r.BusinessDate] = append(want[r.BusinessDate], sr)
			want[r.BusinessDate+"/"+store] = append(want[r.BusinessDate+"/"+store], sr)
		}
		decl[D1+"/"+store], decl[D2+"/"+store] = d1, d2
	}
	for _, d := range []string{D1, D2} {
		CheckRows(t, rowsOf(t, s, d, ""), want[d])
		days := daysOf(t, s, d, "")
		if got := []string{days[0].Store, days[1].Store, days[2].Store}; len(days) != 3 || !slices.Equal(got, []string{"S1", "S10", "S2"}) {
			t.Fatalf("days of %s: stores %v, want S1 S10 S2", d, got)
		}
		for _, store := range []string{"S1", "S10", "S2"} {
			CheckRows(t, rowsOf(t, s, d, store), want[d+"/"+store])
			days := daysOf(t, s, d, store)
			if len(days) != 1 {
				t.Fatalf("days of %s/%s: %d", d, store, len(days))
			}
			CheckDay(t, days[0], store, decl[d+"/"+store], at1, at1)
		}
	}
	if rows := rowsOf(t, s, "2025-03-03", ""); len(rows) != 0 {
		t.Fatalf("%d rows of a date without any", len(rows))
	}
	if days := daysOf(t, s, D1, "S3"); len(days) != 0 {
		t.Fatalf("%d days of an unknown store", len(days))
	}
	if rows := rowsOf(t, s, D1, "S3"); len(rows) != 0 {
		t.Fatalf("%d rows of an unknown store", len(rows))
	}
}

func testConcurrentSameBatch(t *testing.T, s hqstore.Storage) {
	rows := Sales("S1", "T1", 1, 500, D1, t0)
	b, h := NewBatch("S1", "b-1", rows, Day(D1, 1, t0, rows))
	const n = 4
	var wg sync.WaitGroup
	rcs := make([]hqwire.Receipt, n)
	errs := make([]error, n)
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			rcs[i], errs[i] = s.PutBatch(context.Background(), b, h, at1.Add(time.Duration(i)*time.Second))
		})
	}
	close(start)
	wg.Wait()
	fresh := 0
	var orig hqwire.Receipt
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("PutBatch %d: %v", i, errs[i])
		}
		if !rcs[i].Duplicate {
			fresh++
			orig = rcs[i]
		}
	}
	if fresh != 1 {
		t.Fatalf("%d receipts are not duplicates, want 1: %+v", fresh, rcs)
	}
	for _, rc := range rcs {
		if rc.New != 500 || rc.Days != 1 || !rc.StoredAt.Equal(orig.StoredAt) {
			t.Fatalf("receipt %+v differs from the original %+v", rc, orig)
		}
	}
	CheckRows(t, rowsOf(t, s, D1, ""), storedAll("S1", rows, orig.StoredAt))
	if n := Take(t, s).Batches; n != 1 {
		t.Fatalf("%d batches, want 1", n)
	}
}

func testConcurrentOverlapping(t *testing.T, s hqstore.Storage) {
	// Four batches sharing rows, in different orders, stored at once: every row once, and
	// the new counts add up to the number of distinct rows.
	all := Sales("S1", "T1", 1, 400, D1, t0)
	all = append(all, Sales("S1", "T2", 1, 400, D1, t0)...)
	var wg sync.WaitGroup
	rcs := make([]hqwire.Receipt, 4)
	errs := make([]error, 4)
	for i := range 4 {
		part := slices.Clone(all[i*150 : i*150+350])
		if i%2 == 1 {
			slices.Reverse(part)
		}
		b, h := NewBatch("S1", fmt.Sprintf("b-%d", i), part)
		wg.Go(func() { rcs[i], errs[i] = s.PutBatch(context.Background(), b, h, at1) })
	}
	wg.Wait()
	total := 0
	for i := range 4 {
		if errs[i] != nil {
			t.Fatalf("batch %d: %v", i, errs[i])
		}
		total += rcs[i].New
	}
	distinct := 3*150 + 350
	if total != distinct {
		t.Fatalf("new rows add up to %d, want %d", total, distinct)
	}
	if got := len(rowsOf(t, s, D1, "S1")); got != distinct {
		t.Fatalf("%d rows stored, want %d", got, distinct)
	}
}

func testBigBatch(t *testing.T, s hqstore.Storage) {
	var rows []hqwire.Row
	for i := range 5 {
		rows = append(rows, Sales("S1", fmt.Sprintf("T%d", i), 1, hqwire.MaxBatchRows/5, D1, t0)...)
	}
	b, h := NewBatch("S1", "big", rows, Day(D1, 1, t0, rows))
	if rc := MustPut(t, s, b, h, at1); rc.New != hqwire.MaxBatchRows || rc.Rows != hqwire.MaxBatchRows {
		t.Fatalf("big batch: %+v", rc)
	}
	CheckRows(t, rowsOf(t, s, D1, ""), storedAll("S1", rows, at1))
	days := daysOf(t, s, D1, "S1")
	CheckDay(t, days[0], "S1", Day(D1, 1, t0, rows), at1, at1)
	// Its replay is recognized as a whole.
	if rc := MustPut(t, s, b, h, at2); !rc.Duplicate || rc.New != hqwire.MaxBatchRows {
		t.Fatalf("replay of the big batch: %+v", rc)
	}
}

func testUnknownMethod(t *testing.T, s hqstore.Storage) {
	r := Sale("S1", "T1", 1, D1, t0, 100, wire.MethodCash)
	r.ByMethod = map[string]money.Fen{"voucher": 100}
	b, h := NewBatch("S1", "b-1", []hqwire.Row{r})
	before := Take(t, s, D1)
	_, err := s.PutBatch(context.Background(), b, h, at1)
	mustCode(t, err, perr.Invalid, hqwire.CodeBatchInvalid)
	before.MustEqual(t, Take(t, s, D1), "after an unknown method")
}

// at returns HQ's k-th receive time of the parts cases, an hour apart.
func at(k int) time.Time { return at1.Add(time.Duration(k-1) * time.Hour) }

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

// put stores a batch of store holding only days, received at(k).
func put(tb testing.TB, s hqstore.Storage, store, id string, k int, days ...hqwire.StoreDay) hqwire.Receipt {
	tb.Helper()
	b, h := NewBatch(store, id, nil, days...)
	return MustPut(tb, s, b, h, at(k))
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

// testLastBatches: the time HQ stored each store's latest new batch; a replay does not move
// it, and a store without a batch (or not asked for) is not in the answer.
func testLastBatches(t *testing.T, s hqstore.Storage) {
	ctx := context.Background()
	last := func(want map[string]time.Time, stores ...string) {
		t.Helper()
		got, err := s.LastBatches(ctx, stores)
		if err != nil {
			t.Fatal(err)
		}
		if !maps.EqualFunc(got, want, time.Time.Equal) {
			t.Fatalf("last batches of %v: %v, want %v", stores, got, want)
		}
	}
	last(map[string]time.Time{}, "S1", "S2")
	put(t, s, "S1", "b-1", 1)
	put(t, s, "S2", "b-1", 2)
	put(t, s, "S1", "b-2", 3)
	if rc := put(t, s, "S1", "b-1", 4); !rc.Duplicate {
		t.Fatalf("replay: %+v", rc)
	}
	ms := func(k int) time.Time { return at(k).Truncate(time.Millisecond) }
	last(map[string]time.Time{"S1": ms(3), "S2": ms(2)}, "S1", "S2", "S3")
	last(map[string]time.Time{"S2": ms(2)}, "S2")
	last(map[string]time.Time{})
}

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
