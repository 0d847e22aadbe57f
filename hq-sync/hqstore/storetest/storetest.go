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

	"github.com/posgate/posgate/hq-sync/hq"
	"github.com/posgate/posgate/hq-sync/hqstore"
	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/perr"
	"github.com/posgate/posgate/internal/wire"
)

// BatchCounter is implemented by both engines: the suite counts stored batches to prove
// that a refused batch left nothing behind.
type BatchCounter interface {
	BatchCount(ctx context.Context) (int64, error)
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
// and is closed when its test ends.
func Run(t *testing.T, open func(t *testing.T) hq.Storage) {
	cases := []struct {
		name string
		f    func(t *testing.T, s hq.Storage)
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
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := open(t)
			if _, ok := s.(BatchCounter); !ok {
				t.Fatalf("%T does not implement storetest.BatchCounter", s)
			}
			c.f(t, s)
		})
	}
}

// MustPut stores a batch and fails the test on an error.
func MustPut(tb testing.TB, s hq.Storage, b *hq.Batch, hash string, at time.Time) hq.Receipt {
	tb.Helper()
	rc, err := s.PutBatch(context.Background(), b, hash, at)
	if err != nil {
		tb.Fatalf("PutBatch %s/%s: %v", b.Store, b.ID, err)
	}
	return rc
}

// Snapshot is everything a store holds of some dates, to compare before and after.
type Snapshot struct {
	Rows    map[string][]hq.StoredRow
	Days    map[string][]hq.StoredDay
	Batches int64
}

// Take returns the snapshot of s for dates (of all stores).
func Take(tb testing.TB, s hq.Storage, dates ...string) Snapshot {
	tb.Helper()
	ctx := context.Background()
	sn := Snapshot{Rows: map[string][]hq.StoredRow{}, Days: map[string][]hq.StoredDay{}}
	for _, d := range dates {
		rows, err := s.Rows(ctx, d, "")
		if err != nil {
			tb.Fatal(err)
		}
		days, err := s.Days(ctx, d, "")
		if err != nil {
			tb.Fatal(err)
		}
		sn.Rows[d], sn.Days[d] = rows, days
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
	}
}

// Stored returns the row as HQ should hold it, received at.
func Stored(store string, r hq.Row, at time.Time) hq.StoredRow {
	sr := hq.StoredRow{Store: store, Terminal: r.Terminal, Seq: r.Seq, Kind: r.Kind, BusinessDate: r.BusinessDate,
		FlowNo: r.FlowNo, Amount: r.Amount, ByMethod: r.ByMethod, ReceivedAt: time.UnixMilli(at.UnixMilli()).UTC()}
	if len(sr.ByMethod) == 0 {
		sr.ByMethod = nil
	}
	if r.Kind == hq.KindDayClose {
		sr.Payload = r.Payload
	}
	return sr
}

// CheckRows fails the test unless got holds exactly want, in (store, terminal, seq) order.
func CheckRows(tb testing.TB, got, want []hq.StoredRow) {
	tb.Helper()
	want = slices.Clone(want)
	slices.SortFunc(want, func(a, b hq.StoredRow) int {
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
func CheckDay(tb testing.TB, got hq.StoredDay, store string, want hq.StoreDay, received, first time.Time) {
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

func mustCode(tb testing.TB, err error, kind perr.Kind, code string) {
	tb.Helper()
	if err == nil {
		tb.Fatalf("no error, want %s %s", kind, code)
	}
	if perr.KindOf(err) != kind || perr.CodeOf(err) != code {
		tb.Fatalf("error %v is %s %s, want %s %s", err, perr.KindOf(err), perr.CodeOf(err), kind, code)
	}
}

func rowsOf(tb testing.TB, s hq.Storage, date, store string) []hq.StoredRow {
	tb.Helper()
	rows, err := s.Rows(context.Background(), date, store)
	if err != nil {
		tb.Fatal(err)
	}
	return rows
}

func daysOf(tb testing.TB, s hq.Storage, date, store string) []hq.StoredDay {
	tb.Helper()
	days, err := s.Days(context.Background(), date, store)
	if err != nil {
		tb.Fatal(err)
	}
	return days
}

func storedAll(store string, rows []hq.Row, at time.Time) []hq.StoredRow {
	out := make([]hq.StoredRow, len(rows))
	for i, r := range rows {
		out[i] = Stored(store, r, at)
	}
	return out
}

// mixedRows returns sales of two terminals, a refund, a day close and a sale whose
// by_method names a method with 0.00 (which must read back as sent).
func mixedRows(store, date string) []hq.Row {
	rows := Sales(store, "T1", 1, 5, date, t0)
	rows = append(rows, Sales(store, "T2", 1, 3, date, t0)...)
	rows = append(rows, Refund(store, "T1", 6, date, t0.Add(time.Hour), 2, rows[1].Amount, wire.MethodCard))
	split := Sale(store, "T2", 4, date, t0.Add(2*time.Hour), 1000, wire.MethodCash)
	split.ByMethod = map[string]money.Fen{"cash": 1000, "qr": 0}
	rows = append(rows, split)
	rows = append(rows, DayClose(store, "T1", 7, date, t0.Add(3*time.Hour), rows))
	return rows
}

func testNewBatch(t *testing.T, s hq.Storage) {
	rows := mixedRows("S1", D1)
	day := Day(D1, 1, t0.Add(4*time.Hour), rows)
	b, h := NewBatch("S1", "b-1", rows, day)
	rc := MustPut(t, s, b, h, at1)
	want := hq.Receipt{Store: "S1", BatchID: "b-1", Rows: len(rows), New: len(rows), Days: 1, StoredAt: at1}
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

func testReplay(t *testing.T, s hq.Storage) {
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

func testBatchIDReused(t *testing.T, s hq.Storage) {
	rows := Sales("S1", "T1", 1, 5, D1, t0)
	b, h := NewBatch("S1", "b-1", rows)
	first := MustPut(t, s, b, h, at1)
	before := Take(t, s, D1, D2)

	other := Sales("S1", "T1", 6, 5, D2, t0) // new rows under the same id
	b2, h2 := NewBatch("S1", "b-1", other, Day(D2, 1, t0, other))
	_, err := s.PutBatch(context.Background(), b2, h2, at2)
	mustCode(t, err, perr.Conflict, hqstore.CodeBatchIDReused)
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

func testRowsUnique(t *testing.T, s hq.Storage) {
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

func testRowConflict(t *testing.T, s hq.Storage) {
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
	mustCode(t, err, perr.Conflict, hqstore.CodeRowConflict)
	before.MustEqual(t, Take(t, s, D1), "after a row conflict")

	// The batch id was not taken: the corrected batch under the same id is stored.
	b3, h3 := NewBatch("S1", "b-2", all[10:], Day(D1, 2, t0, all))
	if rc := MustPut(t, s, b3, h3, at3); rc.New != 10 || rc.Days != 1 {
		t.Fatalf("corrected batch: %+v", rc)
	}
}

func testTwinRows(t *testing.T, s hq.Storage) {
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
	mustCode(t, err, perr.Conflict, hqstore.CodeRowConflict)
	before.MustEqual(t, Take(t, s, D1), "after twin rows with different content")
}

func testDayRevisions(t *testing.T, s hq.Storage) {
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

func testFiltering(t *testing.T, s hq.Storage) {
	var want = map[string][]hq.StoredRow{} // by date, then "date/store"
	var decl = map[string]hq.StoreDay{}
	for i, store := range []string{"S2", "S10", "S1"} { // byte order: S1 < S10 < S2
		var rows []hq.Row
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

func testConcurrentSameBatch(t *testing.T, s hq.Storage) {
	rows := Sales("S1", "T1", 1, 500, D1, t0)
	b, h := NewBatch("S1", "b-1", rows, Day(D1, 1, t0, rows))
	const n = 4
	var wg sync.WaitGroup
	rcs := make([]hq.Receipt, n)
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
	var orig hq.Receipt
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

func testConcurrentOverlapping(t *testing.T, s hq.Storage) {
	// Four batches sharing rows, in different orders, stored at once: every row once, and
	// the new counts add up to the number of distinct rows.
	all := Sales("S1", "T1", 1, 400, D1, t0)
	all = append(all, Sales("S1", "T2", 1, 400, D1, t0)...)
	var wg sync.WaitGroup
	rcs := make([]hq.Receipt, 4)
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

func testBigBatch(t *testing.T, s hq.Storage) {
	var rows []hq.Row
	for i := range 5 {
		rows = append(rows, Sales("S1", fmt.Sprintf("T%d", i), 1, hq.MaxBatchRows/5, D1, t0)...)
	}
	b, h := NewBatch("S1", "big", rows, Day(D1, 1, t0, rows))
	if rc := MustPut(t, s, b, h, at1); rc.New != hq.MaxBatchRows || rc.Rows != hq.MaxBatchRows {
		t.Fatalf("big batch: %+v", rc)
	}
	CheckRows(t, rowsOf(t, s, D1, ""), storedAll("S1", rows, at1))
	days := daysOf(t, s, D1, "S1")
	CheckDay(t, days[0], "S1", Day(D1, 1, t0, rows), at1, at1)
	// Its replay is recognized as a whole.
	if rc := MustPut(t, s, b, h, at2); !rc.Duplicate || rc.New != hq.MaxBatchRows {
		t.Fatalf("replay of the big batch: %+v", rc)
	}
}

func testUnknownMethod(t *testing.T, s hq.Storage) {
	r := Sale("S1", "T1", 1, D1, t0, 100, wire.MethodCash)
	r.ByMethod = map[string]money.Fen{"voucher": 100}
	b, h := NewBatch("S1", "b-1", []hq.Row{r})
	before := Take(t, s, D1)
	_, err := s.PutBatch(context.Background(), b, h, at1)
	mustCode(t, err, perr.Invalid, hqstore.CodeBatchInvalid)
	before.MustEqual(t, Take(t, s, D1), "after an unknown method")
}
