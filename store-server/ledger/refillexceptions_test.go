package ledger

import (
	"context"
	"database/sql"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/posgate/posgate/internal/hqwire"
	"github.com/posgate/posgate/internal/wire"
)

// lostLedger returns a ledger that flagged an exception of every kind, as a store's did
// before it lost its data directory: an oversell (T1:1), a price exception (T2:1, resolved),
// a refund exception (T4:1, resolved), two contents parked under T5:3 (a refusal, then
// another content), a seq gap (T6:1-4) and a flow exception (T7:1, given 7 that T1:2 holds).
func lostLedger(t *testing.T) *Ledger {
	t.Helper()
	ctx := context.Background()
	l := MustOpen(t, day)
	MustAdjust(t, l, "open-A", "A", 1)
	MustAdjust(t, l, "open-B", "B", 100)
	MustAdjust(t, l, "open-MILK", "MILK", 100)
	MustCommit(t, l, offline(accepted("T1", 1, day, salePayload("s1", []item{{"A", 3, 100}}))))
	MustCommit(t, l, withFlow(accepted("T1", 2, day, salePayload("s2", []item{{"B", 1, 100}})), 7))
	price := offline(accepted("T2", 1, day, salePayload("s3", []item{{"MILK", 2, 1100}})))
	price.Prices = []PriceException{{SKU: "MILK", Code: CodePriceChanged, Qty: 2, SoldPrice: 1100, CatalogPrice: 1250,
		Difference: 300, SaleVersion: 6, StoreVersion: 7}}
	MustCommit(t, l, price)
	MustCommit(t, l, withFlow(accepted("T4", 1, day, refundPayload("r1", "nowhere", 9, false, wire.MethodCard,
		[]item{{"B", 1, 100}})), 0))
	MustCommit(t, l, refused(accepted("T5", 3, day, salePayload("s5", []item{{"B", 1, 100}})), wire.AckRejected, true,
		"line_invalid"))
	MustCommit(t, l, accepted("T5", 3, day, salePayload("s5-again", []item{{"B", 2, 100}}))) // a conflict: parked too
	gap := accepted("T6", 5, day, salePayload("s6", []item{{"B", 1, 100}}))
	gap.Gap = &SeqGap{From: 1, To: 4, Reason: GapPruned}
	MustCommit(t, l, gap)
	MustCommit(t, l, replayed(accepted("T7", 1, day, salePayload("s7", []item{{"B", 1, 100}})), 7))
	if _, _, err := l.ResolvePrice(ctx, "T2", 1, "MILK", "the price changed at noon"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := l.ResolveRefundException(ctx, "T4", 1, "a sale of another store"); err != nil {
		t.Fatal(err)
	}
	return l
}

// sameState reports how got, an exception state the uploader reads, differs from want, the
// state HQ held (change numbers aside); "" if it does not.
func sameState(got, want hqwire.Exception) string {
	if got.Kind != want.Kind || got.Terminal != want.Terminal || got.Seq != want.Seq || got.SKU != want.SKU ||
		got.BusinessDate != want.BusinessDate || got.Withdrawn != want.Withdrawn || got.Code != want.Code ||
		got.Detail != want.Detail || got.QtyShort != want.QtyShort || !got.At.Equal(want.At) ||
		got.Resolved != want.Resolved || !got.ResolvedAt.Equal(want.ResolvedAt) || got.Resolution != want.Resolution {
		return "\n got " + brief(got) + " " + got.Detail + "\nwant " + brief(want) + " " + want.Detail
	}
	return ""
}

// TestRestoreExceptions: a ledger refilled from HQ books the exceptions HQ held of every kind
// as HQ holds them, open ones open and resolved ones with their note, without the sale
// logic: the manager's lists show them, the uploader reads each back in the state HQ held,
// numbered above every change HQ held; a withdrawn one, an unknown kind and a detail this
// release cannot read are not booked. A manager resolves a restored oversell and flow
// exception as any other, each a change above the rest. A parked content restored without
// its payload takes the till's replay of it: one exception still, its resolution kept.
func TestRestoreExceptions(t *testing.T) {
	ctx := context.Background()
	lost := lostLedger(t)
	held, _ := exceptionsAfter(t, lost, 0, 100) // what HQ holds: the uploader sent it
	flows, _, err := lost.FlowExceptionsAfter(ctx, 0, 100)
	if err != nil || len(held) != 6 || len(flows) != 1 {
		t.Fatalf("the lost ledger's exceptions: %q, flows %+v, %v", briefs(held), flows, err)
	}
	var top int64
	for _, x := range held {
		top = max(top, x.Change)
	}
	// HQ also holds one withdrawn under a change of a clock ahead, one of a kind of a later
	// release, and a price exception whose detail a later release wrote otherwise.
	ahead := top + 5_000_000_000
	hq := append(slices.Clone(held),
		hqwire.Exception{Change: ahead, Kind: hqwire.ExceptionRefund, Terminal: "T9", Seq: 1, BusinessDate: dayDate, Withdrawn: true},
		hqwire.Exception{Change: 3, Kind: "mystery", Terminal: "T9", Seq: 2, BusinessDate: dayDate, Code: "x"},
		hqwire.Exception{Change: 4, Kind: hqwire.ExceptionPrice, Terminal: "T9", Seq: 3, SKU: "TEA", BusinessDate: dayDate,
			Code: CodePriceMismatch, Detail: "sold cheap"})
	rows, err := lost.OutboxAfter(ctx, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	hqRows := make([]hqwire.Row, len(rows))
	for i := range rows {
		hqRows[i] = rows[i].Row
	}

	l := MustOpen(t, day.Add(48*time.Hour)) // the refill
	if out, err := l.RestoreRows(ctx, hqRows); err != nil || len(out) != len(hqRows) {
		t.Fatalf("restore rows: %+v, %v", out, err)
	}
	if err := l.ForgetRefillExceptions(ctx); err != nil {
		t.Fatal(err)
	}
	sum, err := l.RestoreExceptions(ctx, hq)
	if err != nil {
		t.Fatal(err)
	}
	// HQ also holds one whose holder no refilled ledger has (its day dropped at HQ): the
	// holder stays HQ's.
	archived := flows[0]
	archived.Seq, archived.FlowGiven, archived.FlowBooked, archived.HeldBy = 2, 3, 12, "T8:1"
	fsum, err := l.RestoreFlowExceptions(ctx, append(slices.Clone(flows), archived))
	if err != nil {
		t.Fatal(err)
	}
	sum.Add(fsum)
	if err := l.NumberChangesAbove(ctx, ahead, flows[0].Change); err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"oversell": 1, "price": 1, "refund": 1, "parked": 2, "seq_gap": 1, "flow": 2}
	if !equalCounts(sum.Booked, want) || sum.Open != 6 || sum.Resolved != 2 || sum.Withdrawn != 1 || sum.Held != 0 ||
		len(sum.NotBooked) != 2 || !strings.Contains(sum.NotBooked[0], "mystery") || !strings.Contains(sum.NotBooked[1], "sold cheap") {
		t.Fatalf("restored %+v, want %v booked, 6 open, 2 resolved, 1 withdrawn, 2 not booked", sum, want)
	}

	// The uploader reads back each in the state HQ held, numbered above all HQ held.
	back, last := exceptionsAfter(t, l, 0, 100)
	if len(back) != len(held) || last < ahead {
		t.Fatalf("read back %q, last change %d; want %d states, the last above %d", briefs(back), last, len(held), ahead)
	}
	byKey := map[string]hqwire.Exception{}
	for _, x := range back {
		byKey[x.Key()] = x
	}
	for _, w := range held {
		if d := sameState(byKey[w.Key()], w); d != "" {
			t.Errorf("%s:%s", w.Key(), d)
		}
	}
	fback, flast, err := l.FlowExceptionsAfter(ctx, 0, 100)
	if err != nil || len(fback) != 2 || flast < flows[0].Change {
		t.Fatalf("flow exceptions read back %+v (last %d), %v", fback, flast, err)
	}
	slices.SortFunc(fback, func(a, b hqwire.FlowException) int { return int(a.Seq - b.Seq) })
	if fback[1].HeldBy != "T8:1" || fback[1].FlowGiven != 3 {
		t.Errorf("the flow exception whose holder HQ dropped: %+v", fback[1])
	}
	if f, w := fback[0], flows[0]; f.Terminal != w.Terminal || f.Seq != w.Seq || f.Kind != w.Kind || f.FlowGiven != 7 ||
		f.FlowBooked != w.FlowBooked || f.HeldBy != "T1:2" || !f.At.Equal(w.At) || f.BusinessDate != w.BusinessDate || f.Resolved {
		t.Errorf("flow exception read back %+v, HQ held %+v", f, w)
	}

	checkRestoredLists(t, l)

	// The manager resolves what the store lists open: changes above the rest, for HQ.
	if _, applied, err := l.ResolveOversell(ctx, "T1", 1, "A", "two found in the back room"); err != nil || !applied {
		t.Fatalf("resolve the restored oversell: %v %v", applied, err)
	}
	if xs, l2 := exceptionsAfter(t, l, last, 100); len(xs) != 1 || xs[0].Kind != hqwire.ExceptionOversell ||
		!xs[0].Resolved || xs[0].Resolution != "two found in the back room" || xs[0].Change <= last || l2 != xs[0].Change {
		t.Fatalf("after the resolution: %q", briefs(xs))
	}
	if _, applied, err := l.ResolveFlow(ctx, "T7", 1, "T7's receipt reprinted"); err != nil || !applied {
		t.Fatalf("resolve the restored flow exception: %v %v", applied, err)
	}
	if fx, _, err := l.FlowExceptionsAfter(ctx, flast, 100); err != nil || len(fx) != 1 || !fx[0].Resolved || fx[0].Change <= flast {
		t.Fatalf("flow exception after the resolution: %+v, %v", fx, err)
	}
	checkParkedAdopted(t, l, last)
}

func equalCounts(got, want map[string]int) bool {
	if len(got) != len(want) {
		return false
	}
	for k, n := range want {
		if got[k] != n {
			return false
		}
	}
	return true
}

// checkRestoredLists checks what the manager's API lists of the restored exceptions.
func checkRestoredLists(t *testing.T, l *Ledger) {
	t.Helper()
	ctx := context.Background()
	if o, err := l.Oversells(ctx, "", false); err != nil || len(o) != 1 || o[0].Terminal != "T1" || o[0].SKU != "A" ||
		o[0].Short != 2 || o[0].Resolved {
		t.Errorf("open oversells: %+v, %v", o, err)
	}
	var oversold int
	if err := l.db.R.QueryRowContext(ctx, `SELECT (SELECT oversold FROM events WHERE terminal = 'T1' AND seq = 1) +
		(SELECT oversold FROM sales WHERE terminal = 'T1' AND seq = 1)`).Scan(&oversold); err != nil || oversold != 2 {
		t.Errorf("the oversold sale's event and sale say oversold: %d, %v", oversold, err)
	}
	if p, err := l.PriceExceptions(ctx, "", true); err != nil || len(p) != 1 || p[0].Qty != 2 || p[0].SoldPrice != 1100 ||
		p[0].CatalogPrice != 1250 || p[0].Difference != 300 || p[0].SaleVersion != 6 || p[0].StoreVersion != 7 ||
		!p[0].Resolved || p[0].Resolution != "the price changed at noon" {
		t.Errorf("price exceptions: %+v, %v", p, err)
	}
	if r, err := l.RefundExceptions(ctx, "", true); err != nil || len(r) != 1 || r[0].Code != CodeRefundSaleUnknown ||
		!r[0].Resolved {
		t.Errorf("refund exceptions: %+v, %v", r, err)
	}
	if p, err := l.Parked(ctx, 0, false); err != nil || len(p) != 2 || p[0].Kind != wire.KindSale || p[1].Kind != wire.KindSale ||
		!strings.HasPrefix(p[0].Message, `sale "s5`) {
		t.Errorf("open parked: %+v, %v", p, err)
	}
	if g, err := l.SeqGaps(ctx); err != nil || len(g["T6"]) != 1 || g["T6"][0].From != 1 || g["T6"][0].To != 4 {
		t.Errorf("seq gaps: %+v, %v", g, err)
	}
	if f, err := l.FlowExceptions(ctx, "", false); err != nil || len(f) != 2 || f[0].HeldBy != "T1:2" || f[1].HeldBy != "T8:1" {
		t.Errorf("open flow exceptions: %+v, %v", f, err)
	}
}

// checkParkedAdopted: the first content parked under T5:3, restored without its hash, is
// resolved by naming no hash; the till's replay of it (catch-up) takes its row: still two
// contents, the first with its hash and payload, resolved as before, sent to HQ once more
// under its key with the detail of its payload.
func checkParkedAdopted(t *testing.T, l *Ledger, after int64) {
	t.Helper()
	ctx := context.Background()
	if p, applied, err := l.ResolveParked(ctx, "T5", 3, "", "voided with the customer"); err != nil || !applied || p.Hash != "" {
		t.Fatalf("resolve the restored first content: %+v %v %v", p, applied, err)
	}
	_, last := exceptionsAfter(t, l, after, 100)
	replay := refused(accepted("T5", 3, day, salePayload("s5", []item{{"B", 1, 100}})), wire.AckRejected, true, "line_invalid")
	MustCommit(t, l, replay)
	p, err := l.Parked(ctx, 0, true)
	if err != nil || len(p) != 2 {
		t.Fatalf("parked after the replay: %+v, %v", p, err)
	}
	for _, c := range p {
		if c.Hash == replay.Hash && (!c.Resolved || c.Resolution != "voided with the customer" || c.Code != "line_invalid") {
			t.Errorf("the replayed content: %+v", c)
		}
		if c.Hash == "" {
			t.Errorf("a content still without its hash: %+v", c)
		}
	}
	xs, last := exceptionsAfter(t, l, last, 100)
	if len(xs) != 1 || xs[0].Kind != hqwire.ExceptionParked || xs[0].SKU != "" || !xs[0].Resolved ||
		!strings.HasPrefix(xs[0].Detail, `sale "s5" of 1.00 (card 1.00): refused: line_invalid`) {
		t.Fatalf("to HQ after the replay: %q %+v", briefs(xs), xs)
	}
	// The other content, replayed behind it, is a conflict again: it takes its restored row
	// (its payload back), and is sent once more; delivered again, it changes nothing.
	other := accepted("T5", 3, day, salePayload("s5-again", []item{{"B", 2, 100}}))
	MustCommit(t, l, other)
	MustCommit(t, l, other)
	xs, _ = exceptionsAfter(t, l, last, 100)
	if len(xs) != 1 || xs[0].SKU != other.Hash || !strings.HasPrefix(xs[0].Detail, `sale "s5-again" of 2.00`) {
		t.Fatalf("to HQ after the other content's replay: %q %+v", briefs(xs), xs)
	}
	if p, _ := l.Parked(ctx, 0, true); len(p) != 2 {
		t.Fatalf("parked after the other content's replay: %+v", p)
	}
}

// TestRestoredDetails: the details a refill reads back are those the ledger writes.
func TestRestoredDetails(t *testing.T) {
	d := priceDetail(CodePriceMismatch, 3, -120, 35, 465, 0, 12)
	if p, ok := parsePriceDetail(d, CodePriceMismatch); !ok || p.Qty != 3 || p.SoldPrice != -120 || p.CatalogPrice != 35 ||
		p.Difference != 465 || p.SaleVersion != 0 || p.StoreVersion != 12 {
		t.Errorf("price detail %q read back %+v, %v", d, p, ok)
	}
	if _, ok := parsePriceDetail(d, CodePriceChanged); ok {
		t.Errorf("price detail %q read as of another code", d)
	}
	for _, g := range []struct {
		term     string
		from, to int64
	}{{"T1", 7, 7}, {"T: 2", 1, 40}} {
		d := seqGapDetail(g.term, g.from, g.to, GapPruned)
		if to, ok := parseSeqGapDetail(d, g.term, g.from); !ok || to != g.to {
			t.Errorf("seq gap detail %q read back %d, %v", d, to, ok)
		}
		if _, ok := parseSeqGapDetail(d, g.term, g.from+1); ok {
			t.Errorf("seq gap detail %q read as of another first seq", d)
		}
	}
	for detail, kind := range map[string]string{
		parkedDetail(wire.KindRefund, "m", []byte(`{"refund_id":"r"}`)): "refund",
		parkedDetail(wire.KindDayClose, "m", []byte(`{}`)):              "day_close",
		parkedDetail(wire.KindHeartbeat, "m", nil):                      "heartbeat",
		parkedDetail("", "m", nil):                                      "",
	} {
		if got := parkedKind(detail); got != kind {
			t.Errorf("parkedKind(%q) = %q, want %q", detail, got, kind)
		}
	}
}

// TestParkedOnV010Ledger: a parked event of a ledger made by v0.1.0's migration alone reads
// the same for HQ before this release's migrations (an uploader upgraded before its
// store-server reads it as it is) and after them (007 adds the HQ detail, empty for it).
func TestParkedOnV010Ledger(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	v010Ledger(t, path)
	db, err := sql.Open("sqlite3", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO parked (terminal, seq, hash, sku, kind, code, message, payload, at, parked_ms,
		business_date) VALUES ('T1', 9, 'h9', '', 'sale', 'line_invalid', 'bad line', '{"sale_id":"s9"}',
		'2025-01-10T03:00:00Z', 0, '2025-01-10')`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	read := func(l *Ledger) hqwire.Exception {
		t.Helper()
		xs, _ := exceptionsAfter(t, l, 0, 10)
		if len(xs) != 1 || xs[0].Kind != hqwire.ExceptionParked {
			t.Fatalf("exceptions: %q", briefs(xs))
		}
		return xs[0]
	}
	r, err := OpenReader(ctx, path, "S1", shanghai)
	if err != nil {
		t.Fatal(err)
	}
	before := read(r)
	r.Close()
	after := read(mustOpenAt(t, path, day))
	if before.Detail != `sale "s9" of 0.00 (): bad line` || sameState(after, before) != "" {
		t.Fatalf("before the migrations %+v, after %+v", before, after)
	}
}
