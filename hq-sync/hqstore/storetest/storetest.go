// Package storetest is the one test suite every HQ storage engine (hqstore/sqlite,
// hqstore/postgres) runs against a real database, plus the benchmarks they share and
// generators of valid rows, days and batches.
//
// An engine's _test.go calls Run with a function that opens a fresh, empty store. The
// package never mocks a database: the suite is only as good as the engine it is given.
package storetest

import (
	"context"
	"maps"
	"reflect"
	"slices"
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
		{"ConflictAcrossDays", testConflictAcrossDays},
		{"RowBelowHeld", testRowBelowHeld},
		{"DateStores", testDateStores},
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
		{"FlowExceptions", testFlowExceptions},
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

// at returns HQ's k-th receive time of the parts cases, an hour apart.
func at(k int) time.Time { return at1.Add(time.Duration(k-1) * time.Hour) }

// put stores a batch of store holding only days, received at(k).
func put(tb testing.TB, s hqstore.Storage, store, id string, k int, days ...hqwire.StoreDay) hqwire.Receipt {
	tb.Helper()
	b, h := NewBatch(store, id, nil, days...)
	return MustPut(tb, s, b, h, at(k))
}
