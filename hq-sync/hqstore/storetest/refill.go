package storetest

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/posgate/posgate/hq-sync/hqstore"
	"github.com/posgate/posgate/internal/hqwire"
	"github.com/posgate/posgate/internal/perr"
)

// RefillStorage is an engine with what a refill of a store reads from it.
type RefillStorage interface {
	hqstore.Storage
	hqstore.Refiller
}

// RunRefill runs the refill suite against a fresh engine from open for each test: rows come
// back as the store sent them, payloads included, page by page in key order; moves are
// kept once per id, a move with other content refuses its call whole; days come back with
// their revision and the number of their transactions; exceptions and flow exceptions come
// back page by page in key order, each in the state HQ holds, only the store's own.
func RunRefill(t *testing.T, open func(t *testing.T) RefillStorage) {
	t.Run("RowsAsSent", func(t *testing.T) { testExportRows(t, open(t)) })
	t.Run("Moves", func(t *testing.T) { testMoves(t, open(t)) })
	t.Run("Days", func(t *testing.T) { testExportDays(t, open(t)) })
	t.Run("Exceptions", func(t *testing.T) { testExportExceptions(t, open(t)) })
	t.Run("FlowExceptions", func(t *testing.T) { testExportFlows(t, open(t)) })
}

func testExportRows(t *testing.T, s RefillStorage) {
	ctx := context.Background()
	sent := append(Sales("S1", "T1", 1, 7, D1, T0), Sales("S1", "T2", 1, 5, D2, T0)...)
	sent = append(sent, Refund("S1", "T1", 8, D1, T0.Add(time.Hour), 2, 50, "cash"))
	b, h := NewBatch("S1", "b-1", sent)
	MustPut(t, s, b, h, T0)
	other, oh := NewBatch("S2", "b-1", Sales("S2", "T1", 1, 3, D1, T0))
	MustPut(t, s, other, oh, T0)
	var got []hqwire.Row
	term, seq := "", int64(0)
	for pages := 0; ; pages++ {
		page, err := s.ExportRows(ctx, "S1", term, seq, 4)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			if pages != 4 { // 13 rows by 4
				t.Errorf("%d pages, want 4", pages)
			}
			break
		}
		got = append(got, page...)
		term, seq = page[len(page)-1].Terminal, page[len(page)-1].Seq
	}
	if len(got) != len(sent) {
		t.Fatalf("%d rows exported, %d sent", len(got), len(sent))
	}
	want := map[string]hqwire.Row{}
	for _, r := range sent {
		want[r.Key("S1")] = r
	}
	for i, r := range got {
		w := want[r.Key("S1")]
		if i > 0 && (got[i-1].Terminal > r.Terminal || got[i-1].Terminal == r.Terminal && got[i-1].Seq >= r.Seq) {
			t.Errorf("row %d %s out of key order", i, r.Key("S1"))
		}
		if r.Kind != w.Kind || r.Hash != w.Hash || !r.At.Equal(w.At) || r.FlowNo != w.FlowNo || r.Amount != w.Amount ||
			r.BusinessDate != w.BusinessDate || !bytes.Equal(r.Payload, w.Payload) || !sameMethods(r.ByMethod, w.ByMethod) {
			t.Errorf("exported %+v, sent %+v", r, w)
		}
	}
}

func sameMethods[M ~map[string]V, V comparable](a, b M) bool {
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	for k, v := range b {
		if a[k] != v {
			return false
		}
	}
	return true
}

func testMoves(t *testing.T, s RefillStorage) {
	ctx := context.Background()
	counted := int64(12)
	moves := []hqwire.StockMove{
		{N: 1, ID: "open-A", SKU: "A", Delta: 100, Reason: hqwire.MoveOpening, At: T0},
		{N: 2, ID: "adj-1", SKU: "A", Delta: -3, Reason: hqwire.MoveAdjust, At: T0.Add(time.Minute)},
		{N: 3, ID: "count-1", SKU: "B", Delta: 2, Reason: hqwire.MoveAdjust, At: T0.Add(2 * time.Minute), Counted: &counted},
	}
	fresh, maxN, err := s.PutMoves(ctx, "S1", "m-1", moves[:2], T0)
	if err != nil || fresh != 2 || maxN != 2 {
		t.Fatalf("put: %d new, max %d, %v", fresh, maxN, err)
	}
	if fresh, maxN, err = s.PutMoves(ctx, "S1", "m-2", moves, T0); err != nil || fresh != 1 || maxN != 3 {
		t.Fatalf("put again with one more: %d new, max %d, %v", fresh, maxN, err)
	}
	changed := []hqwire.StockMove{{N: 4, ID: "adj-2", SKU: "C", Delta: 1, Reason: hqwire.MoveAdjust, At: T0}, moves[1]}
	changed[1].Delta = -4
	_, _, err = s.PutMoves(ctx, "S1", "m-3", changed, T0)
	mustCode(t, err, perr.Conflict, hqwire.CodeMoveConflict)
	if _, _, err := s.PutMoves(ctx, "S2", "m-1", moves[:1], T0); err != nil {
		t.Fatal(err)
	}
	page, err := s.ExportMoves(ctx, "S1", 0, 2)
	if err != nil || len(page) != 2 || page[0].N != 1 || page[1].N != 2 {
		t.Fatalf("first page: %+v, %v", page, err)
	}
	page, err = s.ExportMoves(ctx, "S1", 2, 10)
	if err != nil || len(page) != 1 {
		t.Fatalf("second page: %+v, %v (adj-2 of the refused call must not be stored)", page, err)
	}
	if !hqstore.SameMove(&page[0], &moves[2]) || page[0].Counted == nil || *page[0].Counted != 12 {
		t.Errorf("count exported as %+v, sent %+v", page[0], moves[2])
	}
}

func testExportDays(t *testing.T, s RefillStorage) {
	ctx := context.Background()
	rows := Sales("S1", "T1", 1, 3, D1, T0)
	b, h := NewBatch("S1", "b-1", rows, Day(D1, 2, T0.Add(time.Hour), rows))
	MustPut(t, s, b, h, T0)
	days, _, err := s.ExportDays(ctx, "S1")
	if err != nil || len(days) != 1 || days[0].BusinessDate != D1 || days[0].Revision != 2 || days[0].Txns != 3 ||
		!days[0].ClosedAt.Equal(T0.Add(time.Hour)) {
		t.Fatalf("days: %+v, %v", days, err)
	}
	if days, _, err := s.ExportDays(ctx, "S2"); err != nil || len(days) != 0 {
		t.Fatalf("another store's days: %+v, %v", days, err)
	}
}
