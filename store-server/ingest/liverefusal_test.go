package ingest

import (
	"context"
	"testing"
	"time"

	"github.com/posgate/posgate/internal/wire"
)

// TestLiveRefusalNotParked: a live sale of a SKU the manager has since dropped from the
// catalog is refused (unknown_sku) as a live verdict: the till waiting on it undoes the
// step and tells the cashier no. The store must not park it as a step the till kept, and
// the same event resent offline (the till decided it locally once its deadline passed) is
// recorded, as an offline sale of an earlier catalog's SKU is.
func TestLiveRefusalNotParked(t *testing.T) {
	in, led, out := newIngest(t)
	in.cfg.Catalog = retired{known: true}
	runIngest(t, in)
	ctx := context.Background()
	at := time.Now()
	in.Handle(wire.UpTopic(testStore, "T1"), testSale("T1", 1, at, false))
	if a := acksOf(t, out, 0)[0]; a.Status != wire.AckRejected || a.Code != CodeUnknownSKU || !a.Live {
		t.Fatalf("live sale: ack %+v, want a live unknown_sku refusal", a)
	}
	parked, err := led.Parked(ctx, 0, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(parked) != 0 {
		t.Errorf("the store parked %d event(s) after a live refusal the till undid: %+v", len(parked), parked)
	}
	in.Handle(wire.UpTopic(testStore, "T1"), testSale("T1", 1, at, true))
	if a := acksOf(t, out, 1)[0]; a.Status != wire.AckAccepted {
		t.Errorf("the same sale resent offline: ack %s %s %q, want accepted", a.Status, a.Code, a.Message)
	}
}
