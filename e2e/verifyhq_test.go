package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/posgate/posgate/hq-sync/hqstore/sqlite"
	"github.com/posgate/posgate/internal/hqwire"
	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/ledger"
)

// flowSale is an accepted sale of one unit of A by terminal:seq at the store S1, under flow
// number flow.
func flowSale(terminal string, seq int64, at time.Time, flow int64) ledger.Record {
	p := &wire.SalePayload{SaleID: fmt.Sprintf("s-%s-%d", terminal, seq), OpenedAt: at, Total: 100,
		Lines:    []wire.Line{{Line: 1, SKU: "A", Name: "item A", Qty: 1, UnitPrice: 100, Amount: 100}},
		Payments: []wire.Payment{{Method: wire.MethodCash, Amount: 100}}}
	body, err := json.Marshal(p)
	if err != nil {
		panic(err)
	}
	return ledger.Record{Terminal: terminal, Seq: seq, Kind: wire.KindSale, At: at, Payload: body,
		Hash: wire.Hash(wire.KindSale, "S1", terminal, seq, at, body), Status: wire.AckAccepted, Final: true,
		FlowNo: flow, Sale: p}
}

// storeAndHQ is a store S1's real ledger and a real HQ database, for the comparisons.
type storeAndHQ struct {
	ledger     *ledger.Ledger
	path, hqDB string // the ledger's file and HQ's
	hq         *sqlite.Store
	loc        *time.Location // the store's zone
	day        time.Time      // 2025-03-01 10:00 there
}

// openStoreAndHQ opens a new ledger of store S1 in Asia/Shanghai and a new HQ database,
// both closed at the test's end.
func openStoreAndHQ(t *testing.T) storeAndHQ {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	loc, err := time.LoadLocation("Asia/Shanghai")
	if err != nil {
		t.Fatal(err)
	}
	p := storeAndHQ{path: filepath.Join(dir, "ledger.db"), hqDB: filepath.Join(dir, "hq.db"), loc: loc,
		day: time.Date(2025, 3, 1, 10, 0, 0, 0, loc)}
	if p.ledger, err = ledger.Open(ctx, p.path, "S1", loc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.ledger.Close() })
	if p.hq, err = sqlite.Open(ctx, p.hqDB); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.hq.Close() })
	return p
}

// TestCompareFlows: a store's real ledger books a flow exception and a manager resolves it,
// its changes go to a real HQ database as the uploader sends them, and the comparison of
// the ledger's flow exceptions with HQ's holds while HQ has every change, and fails, naming
// the difference, for each way HQ can disagree: a resolution HQ has not received, a flow
// exception it lacks, one it holds that the ledger does not, and a holder it lost. Another
// store's flow exception at HQ is not the store's.
func TestCompareFlows(t *testing.T) {
	ctx := context.Background()
	p := openStoreAndHQ(t)
	l, hq, hqDB, day := p.ledger, p.hq, p.hqDB, p.day
	if _, _, err := l.Adjust(ctx, "open-A", "A", 10, ledger.ReasonOpening); err != nil {
		t.Fatal(err)
	}
	commit := func(recs ...ledger.Record) {
		t.Helper()
		out, err := l.Commit(ctx, recs)
		if err != nil {
			t.Fatal(err)
		}
		for i, o := range out {
			if o.Err != nil || o.Status != wire.AckAccepted {
				t.Fatalf("%s:%d: %+v", recs[i].Terminal, recs[i].Seq, o)
			}
		}
	}
	// The uploader's round: the states of the flow exceptions changed since the last it sent.
	var sent int64
	upload := func() {
		t.Helper()
		xs, last, err := l.FlowExceptionsAfter(ctx, sent, hqwire.MaxFlowBatch)
		if err != nil {
			t.Fatal(err)
		}
		if len(xs) > 0 {
			if _, err := hq.PutFlowExceptions(ctx, "S1", fmt.Sprintf("f-%d-%d", xs[0].Change, last), xs, time.Now()); err != nil {
				t.Fatal(err)
			}
		}
		sent = last
	}
	// compare reads both sides as VerifyFlowsAtHQ does and wants the report ok, or failing
	// with a line holding each of fails.
	compare := func(step string, fails ...string) {
		t.Helper()
		led, err := l.FlowExceptions(ctx, "", true)
		if err != nil {
			t.Fatal(err)
		}
		at, err := hqFlows(ctx, hqDB, "S1")
		if err != nil {
			t.Fatal(err)
		}
		rep := Report{OK: true}
		CompareFlows(&rep, "S1", led, at)
		wantReport(t, step, rep, fails...)
	}

	// T1:1 holds flow number 7; T2:1, replayed with 7, is booked as 8: a flow exception.
	commit(flowSale("T1", 1, day, 7))
	replay := flowSale("T2", 1, day, 7)
	replay.Replayed, replay.Offline = true, true
	commit(replay)
	compare("booked, not sent", `flow exception T2:1 of 2025-03-01 (flow 7 booked as 8): in the store's ledger, not at HQ`)
	upload()
	compare("booked and sent")
	if got, _ := hqFlows(ctx, hqDB, "S1"); len(got) != 1 || got[0].HeldBy != "T1:1" {
		t.Fatalf("HQ holds %+v, want T2:1 held by T1:1", got)
	}

	if _, _, err := l.ResolveFlow(ctx, "T2", 1, "receipt 7 of T2 reprinted as 8"); err != nil {
		t.Fatal(err)
	}
	compare("resolved, not sent", `flow exception T2:1 of 2025-03-01: the ledger's and HQ's differ in resolved (ledger true, HQ false)`)
	upload()
	compare("resolved and sent")

	// A state HQ took without the holder (as it did from an uploader that read the holder
	// from events archived since).
	lost := hqwireState(t, l, "T2", 1)
	lost.HeldBy, lost.Change = "", lost.Change+1
	if _, err := hq.PutFlowExceptions(ctx, "S1", "f-lost", []hqwire.FlowException{lost}, time.Now()); err != nil {
		t.Fatal(err)
	}
	compare("holder lost at HQ", `flow exception T2:1 of 2025-03-01: the ledger's and HQ's differ in held_by (ledger "T1:1", HQ "")`)
	lost.HeldBy, lost.Change = "T1:1", lost.Change+1
	if _, err := hq.PutFlowExceptions(ctx, "S1", "f-found", []hqwire.FlowException{lost}, time.Now()); err != nil {
		t.Fatal(err)
	}
	compare("holder sent again")

	// Another store's flow exception at HQ is not this store's; one of this store's that its
	// ledger never booked is a difference.
	other := hqwire.FlowException{Change: 1, Terminal: "T3", Seq: 1, Kind: hqwire.FlowSale, FlowGiven: 2, FlowBooked: 3,
		At: day, BusinessDate: "2025-03-01"}
	if _, err := hq.PutFlowExceptions(ctx, "S2", "f-s2", []hqwire.FlowException{other}, time.Now()); err != nil {
		t.Fatal(err)
	}
	compare("another store's at HQ")
	if _, err := hq.PutFlowExceptions(ctx, "S1", "f-extra", []hqwire.FlowException{other}, time.Now()); err != nil {
		t.Fatal(err)
	}
	compare("one at HQ the ledger lacks", `flow exception T3:1 of 2025-03-01 (flow 2 booked as 3): at HQ, not in the store's ledger`)
}

// hqwireState returns the state the ledger holds of terminal:seq's flow exception, as the
// uploader sends it.
func hqwireState(t *testing.T, l *ledger.Ledger, terminal string, seq int64) hqwire.FlowException {
	t.Helper()
	xs, _, err := l.FlowExceptionsAfter(context.Background(), 0, hqwire.MaxFlowBatch)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range xs {
		if x.Terminal == terminal && x.Seq == seq {
			return x
		}
	}
	t.Fatalf("no flow exception %s:%d in the ledger", terminal, seq)
	return hqwire.FlowException{}
}

// TestCompareExceptions: a store's real ledger books an oversell and a manager resolves it,
// its changes go to a real HQ database in batches as the uploader sends them, and the
// comparison of the ledger's exceptions with HQ's holds while HQ has every change, and
// fails, naming the difference, when HQ lacks a resolution, lacks an exception, or holds
// one the ledger does not.
func TestCompareExceptions(t *testing.T) {
	ctx := context.Background()
	p := openStoreAndHQ(t)
	l, hq, hqDB, day, path, loc := p.ledger, p.hq, p.hqDB, p.day, p.path, p.loc
	if _, _, err := l.Adjust(ctx, "open-A", "A", 1, ledger.ReasonOpening); err != nil {
		t.Fatal(err)
	}
	// sell commits an offline sale of one A: taken whatever the stock, an oversell below 0.
	sell := func(seq int64) {
		t.Helper()
		r := flowSale("T1", seq, day, seq)
		r.Offline = true
		if out, err := l.Commit(ctx, []ledger.Record{r}); err != nil || out[0].Status != wire.AckAccepted {
			t.Fatalf("T1:%d: %+v %v", seq, out, err)
		}
	}
	// The uploader's round: the states of the exceptions changed since the last it sent, in
	// a batch of their own.
	var sent int64
	batches := 0
	put := func(xs []hqwire.Exception) {
		t.Helper()
		batches++
		b := &hqwire.Batch{V: hqwire.Version, Store: "S1", ID: fmt.Sprintf("x-%d", batches), Exceptions: xs, SentAt: day}
		if _, err := hq.PutBatch(ctx, b, fmt.Sprintf("hash-%d", batches), time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	upload := func() {
		t.Helper()
		err := l.ViewHQ(ctx, func(r *ledger.HQReader) error {
			xs, last, _, err := r.ExceptionsAfter(ctx, sent, hqwire.MaxBatchExceptions)
			if err == nil && len(xs) > 0 {
				put(xs)
			}
			sent = last
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	compare := func(step string, fails ...string) {
		t.Helper()
		led, err := ledgerExceptions(ctx, path, "S1", loc)
		if err != nil {
			t.Fatal(err)
		}
		at, err := hqExceptions(ctx, hqDB, "S1")
		if err != nil {
			t.Fatal(err)
		}
		rep := Report{OK: true}
		CompareExceptions(&rep, led, at)
		wantReport(t, step, rep, fails...)
	}

	sell(1) // the last A
	sell(2) // one A short: an oversell of T1:2
	compare("booked, not sent", `exception oversell/T1/2/A of 2025-03-01: in the store's ledger, not at HQ`)
	upload()
	compare("booked and sent")
	if _, _, err := l.ResolveOversell(ctx, "T1", 2, "A", "a shelf count found one more"); err != nil {
		t.Fatal(err)
	}
	compare("resolved, not sent",
		`exception oversell/T1/2/A of 2025-03-01: the ledger's and HQ's differ in resolved (ledger true, HQ false)`)
	upload()
	compare("resolved and sent")

	// One of the store's exceptions at HQ that its ledger never booked.
	put([]hqwire.Exception{{Change: sent + 1, Kind: hqwire.ExceptionRefund, Terminal: "T9", Seq: 1, BusinessDate: "2025-03-01",
		Code: "refund_unknown_sale", Detail: "no such sale", At: day}})
	compare("one at HQ the ledger lacks", `exception refund/T9/1/ of 2025-03-01: at HQ, not in the store's ledger`)
}

// wantReport wants rep ok when fails is empty, and otherwise failing with a line holding
// each of fails.
func wantReport(t *testing.T, step string, rep Report, fails ...string) {
	t.Helper()
	text := rep.String()
	if rep.OK != (len(fails) == 0) {
		t.Fatalf("%s: the comparison says OK %v, want %v:\n%s", step, rep.OK, len(fails) == 0, text)
	}
	for _, f := range fails {
		if !strings.Contains(text, "FAIL "+f) {
			t.Errorf("%s: no line FAIL %q:\n%s", step, f, text)
		}
	}
}

// TestCompareRows: a store's real ledger books three sales, its rows go to a real HQ
// database in a batch as the uploader sends them, and the comparison of the ledger's rows
// with HQ's holds once HQ has them, and fails, naming the row, when HQ lacks one, holds one
// the ledger does not, or holds one with other figures. Another store's rows at HQ are not
// the store's.
func TestCompareRows(t *testing.T) {
	ctx := context.Background()
	p := openStoreAndHQ(t)
	l, hq, hqDB, day, path, loc := p.ledger, p.hq, p.hqDB, p.day, p.path, p.loc
	if _, _, err := l.Adjust(ctx, "open-A", "A", 10, ledger.ReasonOpening); err != nil {
		t.Fatal(err)
	}
	for seq := range int64(3) {
		if out, err := l.Commit(ctx, []ledger.Record{flowSale("T1", seq+1, day.Add(time.Duration(seq)*time.Minute), seq+1)}); err != nil ||
			out[0].Status != wire.AckAccepted {
			t.Fatalf("T1:%d: %+v %v", seq+1, out, err)
		}
	}
	batches := 0
	put := func(store string, rows []hqwire.Row) {
		t.Helper()
		batches++
		b := &hqwire.Batch{V: hqwire.Version, Store: store, ID: fmt.Sprintf("r-%d", batches), Rows: rows, SentAt: day}
		if _, err := hq.PutBatch(ctx, b, fmt.Sprintf("hash-%d", batches), time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	// compare reads both sides as VerifyRowsAtHQ does; edit, if not nil, changes HQ's rows
	// before the comparison.
	compare := func(step string, edit func([]hqwire.Row), fails ...string) {
		t.Helper()
		led, err := LedgerRows(ctx, path, "S1", loc)
		if err != nil {
			t.Fatal(err)
		}
		at, err := HQRows(ctx, hqDB, "S1")
		if err != nil {
			t.Fatal(err)
		}
		if edit != nil {
			edit(at)
		}
		rep := Report{OK: true}
		CompareRows(&rep, led, at)
		wantReport(t, step, rep, fails...)
	}

	compare("booked, not sent", nil, "row T1:1 of 2025-03-01: in the store's ledger, not at HQ")
	rows, err := LedgerRows(ctx, path, "S1", loc)
	if err != nil || len(rows) != 3 {
		t.Fatalf("the ledger's rows: %+v, %v", rows, err)
	}
	put("S1", rows[:2])
	compare("two of three sent", nil, "row T1:3 of 2025-03-01: in the store's ledger, not at HQ")
	put("S1", rows[2:])
	compare("all sent", nil)

	other := rows[0]
	other.Terminal = "T9"
	put("S2", []hqwire.Row{other})
	compare("another store's row at HQ", nil)
	put("S1", []hqwire.Row{other})
	compare("a row at HQ the ledger lacks", nil, "row T9:1 of 2025-03-01: at HQ, not in the store's ledger")

	compare("other figures at HQ", func(at []hqwire.Row) {
		for i := range at {
			if at[i].Terminal == "T1" && at[i].Seq == 2 {
				at[i].Amount, at[i].ByMethod = 90, map[string]money.Fen{wire.MethodCash: 90}
			}
		}
	}, "row T1:2 of 2025-03-01: the ledger's and HQ's differ in amount (ledger 1.00, HQ 0.90), by_method")
}

// TestCompareMoves: a store's real ledger books an opening stock, an adjustment and a
// count, its moves go to a real HQ database as the uploader sends them, and the comparison
// of the ledger's adjustments with HQ's moves holds once HQ has them, and fails, naming the
// move, when HQ lacks one, holds one the ledger does not, or holds one with another figure.
func TestCompareMoves(t *testing.T) {
	ctx := context.Background()
	p := openStoreAndHQ(t)
	l, hq, hqDB, path, loc := p.ledger, p.hq, p.hqDB, p.path, p.loc
	if _, _, err := l.Adjust(ctx, "open-A", "A", 10, ledger.ReasonOpening); err != nil {
		t.Fatal(err)
	}
	if _, _, err := l.Adjust(ctx, "adj-A", "A", -2, "adjust"); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := l.Count(ctx, "count-A", "A", 7); err != nil {
		t.Fatal(err)
	}
	compare := func(step string, edit func([]hqwire.StockMove), fails ...string) {
		t.Helper()
		led, err := ledgerMoves(ctx, path, "S1", loc)
		if err != nil {
			t.Fatal(err)
		}
		at, err := hqMoves(ctx, hqDB, "S1")
		if err != nil {
			t.Fatal(err)
		}
		if edit != nil {
			edit(at)
		}
		rep := Report{OK: true}
		CompareMoves(&rep, led, at)
		wantReport(t, step, rep, fails...)
	}
	compare("booked, not sent", nil, "stock move open-A (A +10): in the store's ledger, not at HQ")
	moves, err := ledgerMoves(ctx, path, "S1", loc)
	if err != nil || len(moves) != 3 || moves[2].Counted == nil {
		t.Fatalf("the ledger's moves: %+v, %v; want 3, the last a count", moves, err)
	}
	put := func(store, id string, ms []hqwire.StockMove) {
		t.Helper()
		if _, _, err := hq.PutMoves(ctx, store, id, ms, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	put("S1", "m-1", moves)
	compare("sent", nil)
	other := moves[1]
	other.ID, other.N = "adj-B", 9
	put("S2", "m-2", []hqwire.StockMove{other})
	compare("another store's move at HQ", nil)
	put("S1", "m-3", []hqwire.StockMove{other})
	compare("a move at HQ the ledger lacks", nil, "stock move adj-B (A -2): at HQ, not in the store's ledger")
	compare("another count at HQ", func(at []hqwire.StockMove) {
		n := int64(8)
		at[2].Counted = &n
	}, "stock move count-A: the ledger's and HQ's differ in counted (ledger 7, HQ 8)")
}
