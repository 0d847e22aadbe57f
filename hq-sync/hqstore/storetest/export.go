package storetest

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/posgate/posgate/hq-sync/hqstore"
	"github.com/posgate/posgate/internal/hqwire"
)

// exportedAs returns x as the exceptions export gives it back: times in UTC (the zero
// time kept zero).
func exportedAs(x hqwire.Exception) hqwire.Exception {
	if !x.At.IsZero() {
		x.At = x.At.UTC()
	}
	if !x.ResolvedAt.IsZero() {
		x.ResolvedAt = x.ResolvedAt.UTC()
	}
	return x
}

// exportAll pages through the store's exceptions limit at a time and returns them with the
// number of pages read (the last one empty).
func exportAll(t *testing.T, s RefillStorage, store string, limit int) ([]hqwire.Exception, int) {
	t.Helper()
	var got []hqwire.Exception
	var after hqstore.ExceptionKey
	for pages := 1; ; pages++ {
		page, err := s.ExportExceptions(context.Background(), store, after, limit)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			return got, pages
		}
		got = append(got, page...)
		last := page[len(page)-1]
		after = hqstore.ExceptionKey{Kind: last.Kind, Terminal: last.Terminal, Seq: last.Seq, SKU: last.SKU}
	}
}

// testExportExceptions: a store's exceptions come back page by page in key order, each in
// the state HQ holds (resolved with its note, withdrawn, an escaped SKU as sent), and only
// the store's own.
func testExportExceptions(t *testing.T, s RefillStorage) {
	over := Oversell("T1", 2, "MILK", D1, t0, 3, 10)
	nul := Oversell("T1", 2, "A\x1a0B", D1, t0, 1, 11) // a SKU holding a NUL, escaped
	price := hqwire.Exception{Change: 12, Kind: hqwire.ExceptionPrice, Terminal: "T2", Seq: 4, SKU: "TEA", BusinessDate: D1,
		Code: "price_changed", Detail: "2 sold at 0.30, catalog 0.35 (difference 0.10); sale priced from catalog version 3, " +
			"the store's was 4 (price_changed)", At: t0.Add(time.Minute)}
	refund := Resolved(RefundException("T1", 6, D1, t0.Add(time.Hour), "refund_exceeds_sale", "line 1: 2 refunded of 1 sold", 13),
		t0.Add(5*time.Hour), "a price agreed at the till", 14)
	parked := hqwire.Exception{Change: 15, Kind: hqwire.ExceptionParked, Terminal: "T3", Seq: 9, BusinessDate: D2,
		Code: "payload_invalid", Detail: "sale: line 1 has no sku", At: t0.Add(24 * time.Hour)}
	gap := hqwire.Exception{Change: 16, Kind: hqwire.ExceptionSeqGap, Terminal: "T3", Seq: 20, BusinessDate: D2,
		Code: hqwire.SeqGapPruned, Detail: "seqs 20 to 24 of terminal T3: ...", At: t0.Add(25 * time.Hour)}
	gone := Withdrawn(RefundException("T2", 7, D1, t0, "refund_sale_unknown", "", 17), 18)
	putExceptions(t, s, "S1", "b-1", 1, 7, over, nul, price, refund, parked, gap, gone)
	putExceptions(t, s, "S2", "b-1", 1, 1, Oversell("T1", 2, "MILK", D1, t0, 5, 10))

	want := []hqwire.Exception{over, nul, parked, price, refund, gone, gap} // by kind, terminal, seq, sku
	for i := range want {
		want[i] = exportedAs(want[i])
	}
	want[0], want[1] = want[1], want[0] // "A\x1a0B" < "MILK"
	got, pages := exportAll(t, s, "S1", 2)
	if pages != 5 { // 7 by 2, then an empty page
		t.Errorf("%d pages, want 5", pages)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("exported:\n got %+v\nwant %+v", got, want)
	}
	if got, _ := exportAll(t, s, "S3", 10); len(got) != 0 {
		t.Errorf("a store HQ holds nothing of: %+v", got)
	}
	// A page after a key in the middle starts after it.
	page, err := s.ExportExceptions(context.Background(), "S1", hqstore.ExceptionKey{Kind: hqwire.ExceptionPrice,
		Terminal: "T2", Seq: 4, SKU: "TEA"}, 2)
	if err != nil || len(page) != 2 || page[0].Key() != refund.Key() || page[1].Key() != gone.Key() {
		t.Fatalf("after the price exception: %+v, %v", page, err)
	}
}

// testExportFlows: a store's flow exceptions come back page by page in (terminal, seq)
// order, each in the state HQ holds, and only the store's own.
func testExportFlows(t *testing.T, s RefillStorage) {
	x1 := FlowException("T2", 1, D1, t0, 7, 8, "T1:1", 100)
	x2 := FlowException("T1", 5, D1, t0.Add(time.Minute), 9, 10, "", 101)
	x2.Kind = hqwire.FlowRefund
	x3 := ResolvedFlow(FlowException("T2", 3, D2, t0.Add(24*time.Hour), 3, 4, "T1:6", 102), t0.Add(25*time.Hour),
		"receipt 3 of T2 reprinted as 4", 103)
	MustPutFlows(t, s, "S1", "f-1", at1, 3, x1, x2, x3)
	MustPutFlows(t, s, "S2", "f-1", at1, 1, FlowException("T1", 1, D1, t0, 3, 4, "", 50))
	var got []hqwire.FlowException
	term, seq := "", int64(0)
	for pages := 1; ; pages++ {
		page, err := s.ExportFlows(context.Background(), "S1", term, seq, 2)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			if pages != 3 {
				t.Errorf("%d pages, want 3", pages)
			}
			break
		}
		got = append(got, page...)
		term, seq = page[len(page)-1].Terminal, page[len(page)-1].Seq
	}
	want := []hqwire.FlowException{StoredFlow("S1", x2, at1).FlowException, StoredFlow("S1", x1, at1).FlowException,
		StoredFlow("S1", x3, at1).FlowException}
	for i := range got {
		got[i].At, got[i].ResolvedAt = got[i].At.UTC(), got[i].ResolvedAt.UTC()
		if got[i].ResolvedAt.Equal(time.Time{}.UTC()) {
			got[i].ResolvedAt = time.Time{}
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("exported:\n got %+v\nwant %+v", got, want)
	}
	if page, err := s.ExportFlows(context.Background(), "S3", "", 0, 10); err != nil || len(page) != 0 {
		t.Fatalf("a store HQ holds nothing of: %+v, %v", page, err)
	}
}
