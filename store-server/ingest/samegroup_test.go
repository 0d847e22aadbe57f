package ingest

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/posgate/posgate/internal/wire"
)

// otherSale is another sale under terminal's seq: one B for 300 fen.
func otherSale(t *testing.T, terminal string, seq int64, at time.Time, offline bool) ([]byte, string) {
	t.Helper()
	p := wire.SalePayload{SaleID: terminal + "-other", OpenedAt: at,
		Lines:    []wire.Line{{Line: 1, SKU: "B", Name: "B", Qty: 1, UnitPrice: 300, Amount: 300}},
		Payments: []wire.Payment{{Method: wire.MethodCash, Amount: 300}}, Total: 300}
	body, err := json.Marshal(&p)
	if err != nil {
		t.Fatal(err)
	}
	env := wire.NewEnvelope(wire.KindSale, testStore, terminal, seq, at.Add(time.Minute), body)
	env.Offline = offline
	msg, err := json.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	return msg, env.Hash
}

// TestOtherContentInTheSameGroupIsParked: two devices with one terminal id (or a restored
// till and its old self) send T1:1 with different content, and one group decides both.
// The first is recorded; the other is answered conflict, and the till that sent it keeps
// it and counts it in its day close. The store must park it, as it does when the other
// content comes in a later group. It answered the conflict and kept it nowhere.
func TestOtherContentInTheSameGroupIsParked(t *testing.T) {
	in, led, out := newIngest(t)
	ctx := context.Background()
	at := time.Now()
	other, hash := otherSale(t, "T1", 1, at, true)
	in.Handle(wire.UpTopic(testStore, "T1"), testSale("T1", 1, at, true))
	in.Handle(wire.UpTopic(testStore, "T1"), other)
	in.Handle(wire.UpTopic(testStore, "T1"), other) // redelivered in the same group
	runIngest(t, in)
	acks := acksOf(t, out, 0)
	if len(acks) != 3 || acks[0].Status != wire.AckAccepted || acks[1].Status != wire.AckConflict ||
		acks[2].Status != wire.AckConflict {
		t.Fatalf("acks %+v: want accepted, conflict, conflict", acks)
	}
	if st := in.Stats(); st.Groups != 1 {
		t.Fatalf("%d groups, want the one that decides both contents", st.Groups)
	}
	parked, err := led.Parked(ctx, 0, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(parked) != 1 || parked[0].Terminal != "T1" || parked[0].Seq != 1 || parked[0].Code != "idempotency_conflict" {
		t.Fatalf("parked %+v: want the other content of T1:1, parked once", parked)
	}
	if got := parked[0]; got.Hash != hash {
		t.Errorf("parked content %s, want the other sale's %s", got.Hash, hash)
	}
	tot, err := led.Totals(ctx, led.BusinessDate(at))
	if err != nil {
		t.Fatal(err)
	}
	if tot["T1"].Sales != 1 || tot["T1"].Amount != 250 {
		t.Errorf("T1's totals %+v: want the first sale alone", tot["T1"])
	}
}

// TestOtherContentAfterALiveRefusalInTheSameGroup: in one group, a live sale of T1:1 is
// refused (a SKU dropped from the catalog) and other content of T1:1 follows. The refusal
// binds nothing, so the other content is not parked behind it: it goes unanswered, and
// resent it is recorded as T1:1, as it is when it comes in a later group.
func TestOtherContentAfterALiveRefusalInTheSameGroup(t *testing.T) {
	in, led, out := newIngest(t)
	in.cfg.Catalog = retired{known: true}
	ctx := context.Background()
	if _, _, err := led.Adjust(ctx, "open-B", "B", 10, "opening"); err != nil {
		t.Fatal(err)
	}
	at := time.Now()
	other, _ := otherSale(t, "T1", 1, at, true)
	in.Handle(wire.UpTopic(testStore, "T1"), testSale("T1", 1, at, false))
	in.Handle(wire.UpTopic(testStore, "T1"), other)
	runIngest(t, in)
	acks := acksOf(t, out, 0)
	if len(acks) != 1 || acks[0].Status != wire.AckRejected || !acks[0].Live {
		t.Fatalf("acks %+v: want only the live refusal (the other content unanswered)", acks)
	}
	if a := sendWait(t, in, out, other)[0]; a.Status != wire.AckAccepted {
		t.Fatalf("the other content resent: %+v, want accepted", a)
	}
	if parked, err := led.Parked(ctx, 0, true); err != nil || len(parked) != 0 {
		t.Fatalf("parked %+v, %v: want none", parked, err)
	}
}
