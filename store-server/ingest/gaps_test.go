package ingest

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/posgate/posgate/internal/stack"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/client"
	"github.com/posgate/posgate/store-server/gate"
	"github.com/posgate/posgate/store-server/ledger"
	"github.com/redis/go-redis/v9"
)

// gapRun is an ingest on a given ledger, stopped by stop (or when the test ends).
type gapRun struct {
	in   *Ingest
	out  *sent
	stop func()
}

func startGapRun(t *testing.T, s *stack.Stack, led *ledger.Ledger) *gapRun {
	t.Helper()
	var g atomic.Pointer[gate.Gate]
	rdb := redis.NewClient(&redis.Options{Addr: s.Redis[0].Addr(), DialTimeout: 500 * time.Millisecond,
		ReadTimeout: time.Second, WriteTimeout: time.Second, MaxRetries: 1, DialerRetries: 1,
		OnConnect: func(ctx context.Context, cn *redis.Conn) error {
			if g := g.Load(); g != nil {
				return g.Connected(ctx, cn)
			}
			return nil
		}})
	g.Store(gate.New(rdb, testStore, gate.Options{}))
	out := &sent{got: make(chan struct{}, 100)}
	in := New(Config{Store: testStore, Gate: g.Load(), Ledger: led, Out: out})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- in.Run(ctx) }()
	var once atomic.Bool
	stop := func() {
		if once.Swap(true) {
			return
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		rdb.Close()
	}
	t.Cleanup(stop)
	waitMode(t, in, client.ModeRedis)
	return &gapRun{in: in, out: out, stop: stop}
}

// send sends one sale of terminal at seq, made at at, and returns its ack.
func (r *gapRun) send(t *testing.T, terminal string, seq int64, at time.Time) wire.Ack {
	t.Helper()
	r.out.mu.Lock()
	n := len(r.out.msgs)
	r.out.mu.Unlock()
	r.in.Handle(wire.UpTopic(testStore, terminal), testSale(terminal, seq, at, true))
	acks := acksOf(t, r.out, n)
	if len(acks) != 1 {
		t.Fatalf("%s:%d: acks %+v", terminal, seq, acks)
	}
	return acks[0]
}

func wantAck(t *testing.T, a wire.Ack, status wire.AckStatus, expect int64) {
	t.Helper()
	if a.Status != status || a.Expect != expect {
		t.Fatalf("ack %s: %s expect %d, want %s expect %d", a.Key, a.Status, a.Expect, status, expect)
	}
}

func gapsOf(t *testing.T, led *ledger.Ledger, terminal string) []ledger.SeqGap {
	t.Helper()
	gaps, err := led.SeqGaps(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return gaps[terminal]
}
