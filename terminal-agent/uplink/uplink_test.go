package uplink

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/terminal-agent/outbox"
)

// milkOutbox returns a new outbox of terminal T1 of store S1 whose catalog sells MILK, and
// the path of its database.
func milkOutbox(t *testing.T) (*outbox.Store, string) {
	t.Helper()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "outbox.db")
	st, err := outbox.Open(ctx, path, outbox.Config{Store: "S1", Terminal: "T1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if _, err := st.ReplaceCatalog(ctx, wire.Catalog{V: 1, Store: "S1", Version: 1,
		Items: []wire.CatalogItem{{SKU: "MILK", Name: "Milk", Price: 1250}}}); err != nil {
		t.Fatal(err)
	}
	return st, path
}

// liveScan returns an outbox holding one live scan event waiting for its verdict, and its
// seq.
func liveScan(t *testing.T) (*outbox.Store, int64) {
	t.Helper()
	ctx := context.Background()
	st, _ := milkOutbox(t)
	id, _, _, err := st.Do(ctx, "", "", outbox.Mode{}, func(tx *outbox.Tx) (string, error) { return tx.OpenSale() })
	if err != nil {
		t.Fatal(err)
	}
	_, seq, _, err := st.Do(ctx, "k1", "fp", outbox.Mode{Live: true}, func(tx *outbox.Tx) (string, error) {
		_, err := tx.AddLine(id, "MILK", "", 1)
		return id, err
	})
	if err != nil {
		t.Fatal(err)
	}
	return st, seq
}

// awaitTwice has two requests wait on the verdict of seq, the second joining 30 ms after
// the first (a double click, a retry), runs between() while both wait, and returns what
// each got.
func awaitTwice(t *testing.T, u *Uplink, seq int64, between func()) [2]Verdict {
	t.Helper()
	var got [2]chan Verdict
	for i := range got {
		got[i] = make(chan Verdict, 1)
		go func() { got[i] <- u.Await(context.Background(), seq) }()
		time.Sleep(30 * time.Millisecond)
	}
	between()
	var out [2]Verdict
	for i := range got {
		select {
		case out[i] = <-got[i]:
		case <-time.After(5 * time.Second):
			t.Fatalf("request %d waiting on seq %d was never answered", i+1, seq)
		}
	}
	return out
}

// TestAwaitSharedByRetries: requests that wait on the same live event at once (a cashier's
// double click) all get its verdict, or all learn that it was decided locally; before, the
// second took the first's place and one of them waited for ever.
func TestAwaitSharedByRetries(t *testing.T) {
	t.Run("verdict", func(t *testing.T) {
		st, seq := liveScan(t)
		u := New(Config{Store: "S1", Terminal: "T1", VerdictTimeout: time.Second}, st)
		v := awaitTwice(t, u, seq, func() {
			u.onDown(context.Background(), fmt.Appendf(nil, `{"v":1,"kind":"acks","store":"S1","terminal":"T1",`+
				`"acks":[{"seq":%d,"key":%q,"status":"accepted","live":true,"result":{"flow_no":7}}]}`, seq, wire.Key("T1", seq)))
		})
		for i, x := range v {
			if x.Ack == nil || x.Ack.Status != wire.AckAccepted || x.Refused {
				t.Errorf("request %d: %+v, want the store's acceptance", i+1, x)
			}
		}
	})
	t.Run("decided locally", func(t *testing.T) {
		st, seq := liveScan(t)
		u := New(Config{Store: "S1", Terminal: "T1", VerdictTimeout: 100 * time.Millisecond}, st)
		v := awaitTwice(t, u, seq, func() {})
		for i, x := range v {
			if x.Ack != nil {
				t.Errorf("request %d: %+v, want decided locally", i+1, x)
			}
		}
		if s, err := st.EventState(context.Background(), seq); err != nil || !s.Offline {
			t.Errorf("event %d: %+v (%v), want offline", seq, s, err)
		}
	})
}

// TestLiveConflictParked: a live event answered conflict (its key held by the store with
// other content: an outbox restored from a backup reuses seqs) is parked and its step
// stands, as the store parks its content; it is not a live refusal that undoes the step,
// which would leave the store listing as kept by the till a step the till took back, and
// the till unable to sell or close its day until its seqs pass the store's.
func TestLiveConflictParked(t *testing.T) {
	st, seq := liveScan(t)
	u := New(Config{Store: "S1", Terminal: "T1", VerdictTimeout: time.Second}, st)
	v := awaitTwice(t, u, seq, func() {
		u.onDown(context.Background(), fmt.Appendf(nil, `{"v":1,"kind":"acks","store":"S1","terminal":"T1",`+
			`"acks":[{"seq":%d,"key":%q,"status":"conflict","live":true,"code":"idempotency_conflict"}]}`,
			seq, wire.Key("T1", seq)))
	})
	for i, x := range v {
		if x.Ack == nil || x.Ack.Status != wire.AckConflict || x.Refused || !x.Parked {
			t.Errorf("request %d: %+v, want the conflict, parked", i+1, x)
		}
	}
	if s, err := st.EventState(context.Background(), seq); err != nil || s.State != "parked" {
		t.Errorf("event %d: %+v (%v), want parked", seq, s, err)
	}
}
