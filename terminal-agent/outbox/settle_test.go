package outbox

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/posgate/posgate/internal/perr"
	"github.com/posgate/posgate/internal/wire"
)

// TestStepOnAnUndecidedStep: a payment on a sale whose scan waits for the store's live
// verdict, and a refund of a sale whose completion does, are refused (verdict_pending)
// until the verdict has come or the step was decided locally.
func TestStepOnAnUndecidedStep(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "outbox.db"), Config{Store: "S1", Terminal: "T1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if _, err := s.ReplaceCatalog(ctx, wire.Catalog{V: 1, Store: "S1", Version: 1,
		Items: []wire.CatalogItem{{SKU: "MILK", Name: "Milk", Price: 1250}}}); err != nil {
		t.Fatal(err)
	}
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
	refund := func(tx *Tx) (string, error) { return tx.Refund(sale, nil, "", "", true) }
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
