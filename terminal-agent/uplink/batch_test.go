package uplink

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/broker"
	"github.com/posgate/posgate/terminal-agent/outbox"
)

// TestBacklogOfLargeSalesGoes: a terminal comes back with 250 offline sales of 120 lines each
// (Chinese product names of 20 characters), each event well under wire.MaxEventBytes. The
// lane sends them in messages under wire.MaxMessageBytes. It put all 250 in one batch (no
// byte budget) of 4.4 MB: the embedded broker refused the packet and dropped the connection
// at every try, and the backlog never reached the store.
func TestBacklogOfLargeSalesGoes(t *testing.T) {
	ctx := context.Background()
	st, err := outbox.Open(ctx, filepath.Join(t.TempDir(), "outbox.db"), outbox.Config{Store: "S1", Terminal: "T1"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	name := "蒙牛特仑苏纯牛奶二百五十毫升乘十二盒装"
	maxEvent := 0
	for i := 0; i < 250; i++ {
		p := &wire.SalePayload{SaleID: fmt.Sprintf("T1-sale-%04d", i), OpenedAt: time.Now().Add(-time.Hour).Truncate(time.Millisecond)}
		for l := 1; l <= 120; l++ {
			p.Lines = append(p.Lines, wire.Line{Line: l, SKU: fmt.Sprintf("SKU%06d", l), Name: name, Qty: 1, UnitPrice: 1250, Amount: 1250})
		}
		p.Total = money.Fen(1250 * 120)
		p.Payments = []wire.Payment{{Method: wire.MethodCash, Amount: p.Total}}
		if _, err := st.Enqueue(ctx, wire.KindSale, p); err != nil {
			t.Fatal(err)
		}
	}
	evs, _ := st.Pending(ctx, 0, 1)
	b, _ := json.Marshal(evs[0].Envelope("S1", "T1"))
	maxEvent = len(b)
	var ups, events, largest atomic.Int64
	br, err := broker.Start(broker.Config{Addr: "127.0.0.1:0", Store: "S1", OnUp: func(_ string, b []byte) {
		ups.Add(1)
		if up, err := wire.DecodeUp(b); err == nil {
			events.Add(int64(len(up.Items)))
		}
		for l := largest.Load(); int64(len(b)) > l && !largest.CompareAndSwap(l, int64(len(b))); l = largest.Load() {
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer br.Close()
	u := New(Config{BrokerURL: br.URL(), Store: "S1", Terminal: "T1"}, st)
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { u.Run(rctx); close(done) }()
	defer func() { cancel(); <-done }()
	for deadline := time.Now().Add(15 * time.Second); events.Load() < 250; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("one event is %d bytes (limit %d); in 15 s the store was handed %d up messages, %d of the 250 events (broker packet limit %d)",
				maxEvent, wire.MaxEventBytes, ups.Load(), events.Load(), broker.MaxPacketBytes)
		}
	}
	if l := largest.Load(); l > wire.MaxMessageBytes {
		t.Fatalf("an up message of %d bytes, over the %d a message may be", l, wire.MaxMessageBytes)
	}
}
