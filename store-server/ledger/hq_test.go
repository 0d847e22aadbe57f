package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/posgate/posgate/internal/hqwire"
	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/client"
	"github.com/posgate/posgate/store-server/store"
)

// hqDay commits a day of mixed events to l and returns the records, in commit order: a
// cash sale with change, a split card + cash sale whose change eats all the cash, a QR
// sale, a sale at 23:59 and one at 00:01 the next day, a refund by card, a day close, and a
// scan and a heartbeat (which HQ never sees).
func hqDay(tb testing.TB, l *Ledger) []Record {
	tb.Helper()
	late := time.Date(2025, 3, 1, 23, 59, 0, 0, shanghai)
	recs := []Record{
		withFlow(accepted("T1", 1, day, salePayload("s1", []item{{"A", 2, 1000}, {"B", 1, 550}}, cash(3000))), 1),
		withFlow(accepted("T1", 2, day.Add(time.Minute), salePayload("s2", []item{{"A", 1, 1000}}, cash(500), card(1000))), 2),
		withFlow(accepted("T2", 1, day.Add(2*time.Minute), salePayload("s3", []item{{"B", 2, 550}}, qr(1100))), 3),
		accepted("T2", 2, day, &wire.ScanPayload{SaleID: "s9", Line: 1, SKU: "A", Qty: 1, UnitPrice: 1000}),
		withFlow(accepted("T1", 3, day.Add(3*time.Minute), refundPayload("r1", "s1", 1, true, wire.MethodCard, []item{{"A", 1, 1000}})), 4),
		withFlow(accepted("T2", 3, late, salePayload("s4", []item{{"A", 1, 1000}}, cash(1000))), 5),
		withFlow(accepted("T2", 4, late.Add(2*time.Minute), salePayload("s5", []item{{"A", 1, 1000}}, cash(2000))), 1),
		accepted("T1", 4, late, &wire.DayClosePayload{BusinessDate: dayDate, SaleCount: 2, SaleAmount: 3550,
			RefundCount: 1, RefundAmount: 1000, Methods: []wire.MethodTotal{}}),
		accepted("T2", 5, late, &wire.HeartbeatPayload{Backlog: 1}),
	}
	for _, o := range MustCommit(tb, l, recs...) {
		if o.Err != nil || o.Status != wire.AckAccepted {
			tb.Fatalf("outcome %+v", o)
		}
	}
	return recs
}

func TestOutboxAfter(t *testing.T) {
	ctx := context.Background()
	l := MustOpen(t, day)
	recs := hqDay(t, l)
	var want []hqwire.Row
	for _, r := range recs {
		row := hqwire.Row{Kind: string(r.Kind), Terminal: r.Terminal, Seq: r.Seq, BusinessDate: l.BusinessDate(r.At),
			FlowNo: r.FlowNo, At: r.At.UTC(), Hash: r.Hash, Payload: r.Payload}
		switch r.Kind {
		case wire.KindSale:
			row.Amount, row.ByMethod = r.Sale.Total, store.SaleByMethod(r.Sale)
		case wire.KindRefund:
			row.Amount, row.ByMethod = r.Refund.Amount, map[string]money.Fen{r.Refund.Method: r.Refund.Amount}
		case wire.KindDayClose:
			row.BusinessDate = r.DayClose.BusinessDate
		default:
			continue
		}
		want = append(want, row)
	}
	all, err := l.OutboxAfter(ctx, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != len(want) {
		t.Fatalf("%d rows, want %d", len(all), len(want))
	}
	for i, o := range all {
		if i > 0 && o.ID <= all[i-1].ID {
			t.Errorf("row %d: id %d not after %d", i, o.ID, all[i-1].ID)
		}
		if !reflect.DeepEqual(o.Row, want[i]) {
			t.Errorf("row %d\n got %+v\nwant %+v", i, o.Row, want[i])
		}
		if o.Row.Kind == hqwire.KindSale {
			var sum money.Fen
			for _, a := range o.Row.ByMethod {
				sum += a
			}
			if sum != o.Row.Amount {
				t.Errorf("row %d: by method %v does not add up to %s", i, o.Row.ByMethod, o.Row.Amount)
			}
		}
	}
	if got := all[1].Row.ByMethod; !reflect.DeepEqual(got, map[string]money.Fen{"cash": 0, "card": 1000}) {
		t.Errorf("split sale by method %v, want cash 0 (500 tendered, 500 change) and card 10.00", got)
	}
	// Paging: id order, no row twice, none left out.
	var paged []OutboxRow
	after := int64(0)
	for {
		page, err := l.OutboxAfter(ctx, after, 2)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		paged = append(paged, page...)
		after = page[len(page)-1].ID
	}
	if !reflect.DeepEqual(paged, all) {
		t.Errorf("pages of 2 differ from one read")
	}
	// The keys alone, as the uploader checks a batch sent before: the same rows, in order.
	err = l.ViewHQ(ctx, func(r *HQReader) error {
		keys, err := r.OutboxKeysAfter(ctx, all[0].ID, len(all))
		if err != nil {
			return err
		}
		if len(keys) != len(all)-1 {
			t.Fatalf("%d keys after the first row, want %d", len(keys), len(all)-1)
		}
		for i, k := range keys {
			o := all[i+1]
			if want := (OutboxKey{ID: o.ID, Terminal: o.Row.Terminal, Seq: o.Row.Seq, Hash: o.Row.Hash}); k != want {
				t.Errorf("key %d: %+v, want %+v", i, k, want)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if max, err := l.OutboxMaxID(ctx); err != nil || max != all[len(all)-1].ID {
		t.Errorf("max id %d %v, want %d", max, err, all[len(all)-1].ID)
	}
	// The row JSON is what HQ receives: the payload travels verbatim.
	b, err := json.Marshal(all[0].Row)
	if err != nil {
		t.Fatal(err)
	}
	var back hqwire.Row
	if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back, all[0].Row) {
		t.Errorf("row JSON round trip: %v\n got %+v\nwant %+v", err, back, all[0].Row)
	}
}

func TestDayManifest(t *testing.T) {
	ctx := context.Background()
	l := MustOpen(t, day)
	hqDay(t, l)
	got, err := l.DayManifest(ctx, dayDate)
	if err != nil {
		t.Fatal(err)
	}
	want := []hqwire.Txn{
		{Terminal: "T1", Seq: 1, Kind: hqwire.KindSale, FlowNo: 1, Amount: 2550, ByMethod: map[string]money.Fen{"cash": 2550}},
		{Terminal: "T1", Seq: 2, Kind: hqwire.KindSale, FlowNo: 2, Amount: 1000, ByMethod: map[string]money.Fen{"cash": 0, "card": 1000}},
		{Terminal: "T1", Seq: 3, Kind: hqwire.KindRefund, FlowNo: 4, Amount: 1000, ByMethod: map[string]money.Fen{"card": 1000}},
		{Terminal: "T2", Seq: 1, Kind: hqwire.KindSale, FlowNo: 3, Amount: 1100, ByMethod: map[string]money.Fen{"qr": 1100}},
		{Terminal: "T2", Seq: 3, Kind: hqwire.KindSale, FlowNo: 5, Amount: 1000, ByMethod: map[string]money.Fen{"cash": 1000}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("manifest of %s\n got %+v\nwant %+v", dayDate, got, want)
	}
	next, err := l.DayManifest(ctx, "2025-03-02")
	if err != nil {
		t.Fatal(err)
	}
	if len(next) != 1 || next[0].Seq != 4 || next[0].ByMethod["cash"] != 1000 {
		t.Errorf("manifest of the next day %+v, want T2:4 alone (cash 20.00 less 10.00 change)", next)
	}
	// The manifest adds up to the ledger's own counters.
	totals, err := l.Totals(ctx, dayDate)
	if err != nil {
		t.Fatal(err)
	}
	sum := map[string]client.Counters{}
	for _, tx := range got {
		c := sum[tx.Terminal]
		if c.ByMethod == nil {
			c.ByMethod, c.RefundByMethod = map[string]money.Fen{}, map[string]money.Fen{}
		}
		if tx.Kind == hqwire.KindSale {
			c.Sales++
			c.Amount += tx.Amount
			for m, a := range tx.ByMethod {
				c.ByMethod[m] += a
			}
		} else {
			c.Refunds++
			c.RefundAmount += tx.Amount
			for m, a := range tx.ByMethod {
				c.RefundByMethod[m] += a
			}
		}
		sum[tx.Terminal] = c
	}
	for term, c := range totals {
		if !c.Equal(sum[term]) {
			t.Errorf("terminal %s: manifest sums %+v, ledger totals %+v", term, sum[term], c)
		}
	}
	if empty, err := l.DayManifest(ctx, "2024-01-01"); err != nil || empty == nil || len(empty) != 0 {
		t.Errorf("manifest of a day without sales %v %v, want an empty list", empty, err)
	}
}

func TestOpenReader(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "ledger.db")
	w := mustOpenAt(t, path, day)
	r, err := OpenReader(ctx, path, testStore, shanghai)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()

	hqDay(t, w) // written after the reader opened: the reader sees them
	rows, err := r.OutboxAfter(ctx, 0, 100)
	if err != nil || len(rows) != 7 {
		t.Fatalf("reader sees %d rows (%v), want 7", len(rows), err)
	}
	err = r.ViewHQ(ctx, func(v *HQReader) error {
		if n, err := v.OutboxCountAfter(ctx, rows[2].ID); err != nil || n != 4 {
			t.Errorf("count after the third row %d %v, want 4", n, err)
		}
		// Rows of 2025-03-01 run to the day close (the 7th row); 2025-03-02 holds the 6th.
		for _, c := range []struct {
			date  string
			after int64
			want  bool
		}{
			{dayDate, rows[5].ID, true}, {dayDate, rows[6].ID, false},
			{"2025-03-02", rows[4].ID, true}, {"2025-03-02", rows[5].ID, false}, {"2024-01-01", 0, false},
		} {
			if got, err := v.HasOutboxAfter(ctx, c.date, c.after); err != nil || got != c.want {
				t.Errorf("rows of %s after %d: %v %v, want %v", c.date, c.after, got, err, c.want)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// The reader cannot write.
	if _, err := r.Commit(ctx, []Record{accepted("T9", 1, day, &wire.HeartbeatPayload{})}); err == nil {
		t.Error("a reader committed a record")
	}
	if _, _, err := r.Adjust(ctx, "x", "A", 1, ReasonAdjust); err == nil {
		t.Error("a reader adjusted stock")
	}
	if next, err := w.Next(ctx); err != nil || next["T9"] != 0 {
		t.Errorf("the reader's write reached the ledger: %v %v", next, err)
	}

	// A missing ledger is not created; another store's ledger is refused.
	missing := filepath.Join(dir, "missing.db")
	if _, err := OpenReader(ctx, missing, testStore, shanghai); err == nil {
		t.Error("opened a missing ledger")
	}
	if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("OpenReader created %s: %v", missing, err)
	}
	if _, err := OpenReader(ctx, path, "S2", shanghai); err == nil {
		t.Error("opened store S1's ledger as store S2")
	}
	if _, err := OpenReader(ctx, path, testStore, nil); err == nil {
		t.Error("opened a reader without a time zone")
	}
}

func TestOutboxDateIndex(t *testing.T) {
	l := MustOpen(t, day)
	plan := strings.Join(queryPlan(t, l, `SELECT 1 FROM hq_outbox WHERE business_date = ? AND id > ? LIMIT 1`, dayDate, 0), "; ")
	if want := "USING COVERING INDEX hq_outbox_date"; !strings.Contains(plan, want) {
		t.Errorf("plan %q does not use the date index", plan)
	}
}

// TestFlowQueriesSeek: the flow-number lookups of every group commit seek in the partial
// index events_flow instead of scanning a business date's events.
func TestFlowQueriesSeek(t *testing.T) {
	l := MustOpen(t, day)
	for q, want := range map[string]string{
		selMaxFlow:        "USING COVERING INDEX events_flow (business_date=? AND flow_no>?)",
		selFlowTaken:      "USING COVERING INDEX events_flow (business_date=? AND flow_no=?)",
		selFlows.shape(3): "USING COVERING INDEX events_flow (business_date=? AND flow_no=?)",
	} {
		plan := strings.Join(queryPlan(t, l, q, dayDate, 1, 2, 3), "; ")
		if !strings.Contains(plan, want) {
			t.Errorf("%s\nplan %q, want %q", q, plan, want)
		}
	}
}
