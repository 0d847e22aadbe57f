package outbox

import (
	"context"
	"testing"
	"time"

	"github.com/posgate/posgate/internal/perr"
	"github.com/posgate/posgate/internal/wire"
)

// TestStepOnAnUndecidedStep: a payment on a sale whose scan waits for the store's live
// verdict, and a refund of a sale whose completion does, are refused (verdict_pending)
// until the verdict has come or the step was decided locally.
func TestStepOnAnUndecidedStep(t *testing.T) {
	ctx := context.Background()
	s := openWithMilk(t)
	live := Mode{Live: true}
	do := func(f func(tx *Tx) (string, error)) (string, int64, error) {
		ref, seq, _, err := s.Do(ctx, "", "", live, f)
		return ref, seq, err
	}
	sale, _, err := do(func(tx *Tx) (string, error) { return tx.OpenSale() })
	if err != nil {
		t.Fatal(err)
	}
	_, scan, err := do(func(tx *Tx) (string, error) { _, err := tx.AddLine(sale, "MILK", "", 2); return sale, err })
	if err != nil {
		t.Fatal(err)
	}
	pay := func(tx *Tx) (string, error) { return sale, tx.Pay(sale, wire.MethodCash, 2500, "") }
	if _, _, err := do(pay); perr.CodeOf(err) != CodeVerdictPending {
		t.Fatalf("payment on a scan waiting for its verdict: %v, want %s", err, CodeVerdictPending)
	}
	if _, err := s.Apply(ctx, []Transition{{Seq: scan, Action: Offline}}); err != nil { // decided locally
		t.Fatal(err)
	}
	_, saleSeq, err := do(pay)
	if err != nil {
		t.Fatalf("payment once the scan is decided: %v", err)
	}
	refund := func(tx *Tx) (string, error) { return tx.Refund(sale, nil, "", "", true, "") }
	if _, _, err := do(refund); perr.CodeOf(err) != CodeVerdictPending {
		t.Fatalf("refund of a sale waiting for its verdict: %v, want %s", err, CodeVerdictPending)
	}
	ack := wire.Ack{Seq: saleSeq, Key: wire.Key("T1", saleSeq), Status: wire.AckAccepted, Live: true,
		Result: &wire.Result{FlowNo: 1}}
	if _, err := s.Apply(ctx, []Transition{{Seq: saleSeq, Ack: ack, Action: Ack}}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := do(refund); err != nil {
		t.Fatalf("refund once the sale is accepted: %v", err)
	}
}

// TestDayCloseIsFinal: once a business day is closed at the terminal, no sale is opened,
// scanned, paid or refunded on it (day_closed): the close declared its totals, and a sale
// after it left the declaration short for good (the day never reconciled at the store or
// headquarters). A day that has not begun is not closed; nor is today while a sale has a
// payment taken and is not complete, nor while a sale waits for the store's live verdict.
func TestDayCloseIsFinal(t *testing.T) {
	ctx := context.Background()
	s := openWithMilk(t)
	// The till's clock stands at noon: the sales, the closes and "today" are one business day
	// whenever the test runs (a run across midnight sold on the day after the one it closed).
	now := time.Now().In(s.cfg.Location)
	noon := time.Date(now.Year(), now.Month(), now.Day(), 12, 0, 0, 0, s.cfg.Location)
	s.cfg.Now = func() time.Time { return noon }
	do := func(mode Mode, f func(tx *Tx) (string, error)) (string, int64, error) {
		ref, seq, _, err := s.Do(ctx, "", "", mode, f)
		return ref, seq, err
	}
	offline, live := Mode{Disconnected: true}, Mode{Live: true}
	today := s.BusinessDate(noon)
	closeDay := func(date string) error {
		_, _, err := do(offline, func(tx *Tx) (string, error) { _, err := tx.DayClose(date); return date, err })
		return err
	}
	sale := func(mode Mode) (string, int64) { // scanned offline, paid in mode
		t.Helper()
		id, _, err := do(offline, func(tx *Tx) (string, error) { return tx.OpenSale() })
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := do(offline, func(tx *Tx) (string, error) { _, err := tx.AddLine(id, "MILK", "", 1); return id, err }); err != nil {
			t.Fatal(err)
		}
		_, seq, err := do(mode, func(tx *Tx) (string, error) { return id, tx.Pay(id, wire.MethodCash, 1250, "") })
		if err != nil {
			t.Fatal(err)
		}
		return id, seq
	}

	tomorrow := s.BusinessDate(noon.AddDate(0, 0, 1))
	if err := closeDay(tomorrow); perr.CodeOf(err) != CodeDayNotStarted {
		t.Errorf("close of %s (today %s): %v, want %s", tomorrow, today, err, CodeDayNotStarted)
	}
	sold, _ := sale(offline)
	// A sale with a payment taken, not complete.
	open, _, _ := do(offline, func(tx *Tx) (string, error) { return tx.OpenSale() })
	do(offline, func(tx *Tx) (string, error) { _, err := tx.AddLine(open, "MILK", "", 2); return open, err })
	do(offline, func(tx *Tx) (string, error) { return open, tx.Pay(open, wire.MethodCash, 1000, "") })
	if err := closeDay(today); perr.CodeOf(err) != CodeSalePaidOpen {
		t.Errorf("close with a sale part paid: %v, want %s", err, CodeSalePaidOpen)
	}
	do(offline, func(tx *Tx) (string, error) { return open, tx.Cancel(open) })
	_, liveSeq := sale(live) // waits for the store's verdict
	if err := closeDay(today); perr.CodeOf(err) != CodeVerdictPending {
		t.Errorf("close with a sale waiting for its verdict: %v, want %s", err, CodeVerdictPending)
	}
	if _, err := s.Apply(ctx, []Transition{{Seq: liveSeq, Action: Offline}}); err != nil {
		t.Fatal(err)
	}
	if err := closeDay(today); err != nil {
		t.Fatalf("close: %v", err)
	}
	for name, step := range map[string]func(tx *Tx) (string, error){
		"open a sale": func(tx *Tx) (string, error) { return tx.OpenSale() },
		"refund":      func(tx *Tx) (string, error) { return tx.Refund(sold, nil, "", "", true, "") },
	} {
		if _, _, err := do(Mode{}, step); perr.CodeOf(err) != CodeDayClosed { // online, not waiting

			t.Errorf("%s after the close: %v, want %s", name, err, CodeDayClosed)
		}
	}
	if err := closeDay(today); err != nil {
		t.Fatalf("closing the day again (the first close answers): %v", err)
	}
	totals, err := s.DayTotals(ctx, today)
	if err != nil || totals.SaleCount != 2 {
		t.Fatalf("day totals after the close: %+v, %v; want the 2 sales before it", totals, err)
	}
}
