package ingest

import (
	"context"
	"testing"
	"time"

	"github.com/posgate/posgate/internal/stack"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/client"
	"github.com/posgate/posgate/store-server/ledger"
)

// TestJumpWhileRedisIsDown: a till's first event after a restore, a live sale, arrives while
// Redis is down. The store sells on the ledger alone: the sale jumps its gap, is accepted
// with its stock and its gap recorded, and once Redis is back the rebuilt projection holds
// the same stock as the ledger.
func TestJumpWhileRedisIsDown(t *testing.T) {
	ctx := context.Background()
	s := stack.Run(t, stack.Options{Redis: true})
	r, restored := restoreAfter(t, s, []string{"T1"}, func(r *gapRun) {
		for seq := int64(2); seq <= 4; seq++ {
			wantAck(t, r.send(t, "T1", seq), wire.AckAccepted, 0)
		}
	})
	p := s.Redis[0]
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	r.out.mu.Lock()
	n := len(r.out.msgs)
	r.out.mu.Unlock()
	r.in.Handle(wire.UpTopic(testStore, "T1"), testSale("T1", 5, time.Now(), false)) // live
	a := acksOf(t, r.out, n)[0]
	if a.Status != wire.AckAccepted || a.Result == nil || a.Result.FlowNo == 0 {
		t.Fatalf("live jump with Redis down: %+v", a)
	}
	if r.in.Mode() != client.ModeDegraded {
		t.Fatalf("mode %s, want degraded", r.in.Mode())
	}
	wantAck(t, r.send(t, "T1", 6), wire.AckAccepted, 0)
	wantAck(t, r.send(t, "T1", 8), wire.AckOutOfOrder, 7)
	if g := gapsOf(t, restored, "T1"); len(g) != 1 || g[0].From != 2 || g[0].To != 4 || g[0].Reason != ledger.GapRestored {
		t.Fatalf("T1's gaps: %+v, want 2..4 restored", g)
	}
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	waitMode(t, r.in, client.ModeRedis)
	wantStockA(t, r, restored, 997)
}

// TestJumpOverRedisIdempotencyOfTheLostLedger: Redis is not restored with the ledger. The
// lost ledger took T1:2..4 and Redis kept their idempotency records; the till never got the
// ack of 4 and sends it again to the restored ledger. It jumps 2..3 and is decided anew
// (the rebuild at start opened a new idempotency epoch), not answered as a duplicate of a
// sale the ledger does not hold: Redis and the ledger agree on its stock.
func TestJumpOverRedisIdempotencyOfTheLostLedger(t *testing.T) {
	s := stack.Run(t, stack.Options{Redis: true})
	r, restored := restoreAfter(t, s, []string{"T1"}, func(r *gapRun) {
		for seq := int64(2); seq <= 4; seq++ {
			wantAck(t, r.send(t, "T1", seq), wire.AckAccepted, 0)
		}
	})
	wantAck(t, r.send(t, "T1", 4), wire.AckAccepted, 0)
	wantAck(t, r.send(t, "T1", 5), wire.AckAccepted, 0)
	wantStockA(t, r, restored, 997)
}

// wantStockA fails the test unless the ledger and r's Redis both hold want of SKU A.
func wantStockA(t *testing.T, r *gapRun, led *ledger.Ledger, want int64) {
	t.Helper()
	ls, err := led.Stock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	rs, err := r.in.cfg.Gate.Stock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if ls["A"] != want || rs["A"] != want {
		t.Fatalf("stock of A: ledger %d, Redis %d, want %d both", ls["A"], rs["A"], want)
	}
}
