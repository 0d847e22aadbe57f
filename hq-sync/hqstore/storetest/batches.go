package storetest

import (
	"context"
	"fmt"
	"maps"
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
