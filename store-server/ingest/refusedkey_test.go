package ingest

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/posgate/posgate/internal/wire"
)

// TestRestoredTillReusesARefusedSeq: a till's live sale T1:1 was refused (a SKU dropped
// from the catalog) and the till undid it. The till is then restored from a backup taken
// before it, and numbers its next sale T1:1 again, with other content. The store's record
// of the key is a live refusal that binds nothing (the till that was refused undid the
// step); the till keeps the new sale (answered conflict, the agent parks it and counts it),
// so the store must hold it too: recorded, or parked for the manager and HQ. It held it
// nowhere, and the till's day close declared a sale the store and HQ never heard of.
func TestRestoredTillReusesARefusedSeq(t *testing.T) {
	for _, offline := range []bool{true, false} {
		t.Run(fmt.Sprintf("offline=%t", offline), func(t *testing.T) {
			in, led, out := newIngest(t)
			in.cfg.Catalog = retired{known: true}
			ctx := context.Background()
			if _, _, err := led.Adjust(ctx, "open-B", "B", 10, "opening"); err != nil {
				t.Fatal(err)
			}
			runIngest(t, in)
			at := time.Now()
			if a := sendWait(t, in, out, testSale("T1", 1, at, false))[0]; a.Status != wire.AckRejected || !a.Live {
				t.Fatalf("live sale of a dropped SKU: %+v, want a live refusal", a)
			}
			// The restored till's T1:1: another sale, of a SKU the catalog has.
			p := wire.SalePayload{SaleID: "T1-restored-1", OpenedAt: at,
				Lines:    []wire.Line{{Line: 1, SKU: "B", Name: "B", Qty: 1, UnitPrice: 300, Amount: 300}},
				Payments: []wire.Payment{{Method: wire.MethodCash, Amount: 300}}, Total: 300}
			body, err := json.Marshal(&p)
			if err != nil {
				t.Fatal(err)
			}
			env := wire.NewEnvelope(wire.KindSale, testStore, "T1", 1, at.Add(time.Minute), body)
			env.Offline = offline
			msg, err := json.Marshal(env)
			if err != nil {
				t.Fatal(err)
			}
			a := sendWait(t, in, out, msg)[0]
			// The sale's own date: at and a minute later may straddle the store's midnight.
			tot, err := led.Totals(ctx, led.BusinessDate(env.At))
			if err != nil {
				t.Fatal(err)
			}
			parked, err := led.Parked(ctx, 0, true)
			if err != nil {
				t.Fatal(err)
			}
			if tot["T1"].Sales != 1 && len(parked) != 1 {
				t.Fatalf("the restored till's T1:1 answered %s %s; the store holds %d sale(s) of T1 and "+
					"%d parked event(s): the sale the till keeps is nowhere at the store",
					a.Status, a.Code, tot["T1"].Sales, len(parked))
			}
			if a.Status != wire.AckAccepted {
				t.Fatalf("the restored till's T1:1 answered %s %s, want accepted (the key's record was a "+
					"live refusal)", a.Status, a.Code)
			}
		})
	}
}
