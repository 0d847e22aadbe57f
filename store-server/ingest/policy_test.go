package ingest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/posgate/posgate/internal/stack"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/client"
	"github.com/posgate/posgate/store-server/store"
)

// hang stops the Redis process p (SIGSTOP: it keeps its data and its connections, and answers
// nothing) until resume, which the test's cleanup calls too.
func hang(t *testing.T, p *stack.Proc) (resume func()) {
	t.Helper()
	pid := p.Pid()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	resume = func() { once.Do(func() { _ = syscall.Kill(pid, syscall.SIGCONT) }) }
	t.Cleanup(resume)
	return resume
}

// sendWait hands ingest one up message of T1 and returns the acks of the next acks message.
func sendWait(t *testing.T, in *Ingest, out *sent, body []byte) []wire.Ack {
	t.Helper()
	out.mu.Lock()
	n := len(out.msgs)
	out.mu.Unlock()
	in.Handle(wire.UpTopic(testStore, "T1"), body)
	return acksOf(t, out, n)
}

// TestLimitsSurviveRedisRestart: the manager lowered the live pay limit to 1 a minute and set
// a promo. Redis restarts empty (it runs without persistence) and the store rebuilds its
// projection: Redis has the manager's limits and promo again, and holds live sales to them.
// They lived in Redis alone, and the store went back to the defaults without a word.
func TestLimitsSurviveRedisRestart(t *testing.T) {
	s := stack.Run(t, stack.Options{Redis: true})
	in, _, out := newIngestOn(t, s)
	in.cfg.ProbeEvery = 50 * time.Millisecond
	runIngest(t, in)
	waitMode(t, in, client.ModeRedis)
	ctx := context.Background()
	if _, err := in.SetLimits(ctx, store.Limits{WindowMs: 60_000, Pay: 2}); err != nil {
		t.Fatal(err)
	}
	if _, err := in.SetPromo(ctx, 150, time.Hour); err != nil {
		t.Fatal(err)
	}
	p := s.Redis[0]
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	// An offline sale (never limited) makes the gate meet the new server.
	sendWait(t, in, out, testSale("T1", 1, time.Now(), true))
	waitMode(t, in, client.ModeRedis)
	l, err := in.cfg.Gate.Limits(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pct, left, err := in.cfg.Gate.Promo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if l.WindowMs != 60_000 || l.Pay != 2 || l.Scan != store.DefaultLimits.Scan || pct != 150 ||
		left <= 59*time.Minute || left > time.Hour {
		t.Fatalf("after a Redis restart and rebuild Redis holds limits %+v, promo %d%% for %v; "+
			"the manager set pay 2 a minute and 150%% for an hour", l, pct, left)
	}
	accepted := 0
	for seq := int64(2); seq <= 5; seq++ {
		if a := sendWait(t, in, out, testSale("T1", seq, time.Now(), false))[0]; a.Status == wire.AckAccepted {
			accepted++
		}
	}
	if accepted != 3 { // floor(2 × 150%)
		t.Fatalf("%d of 4 live sales accepted within a minute; the limit is 3 (2 at 150%%)", accepted)
	}
}

// TestDegradedLimiterHoldsToStoreLimits: the manager set the live pay limit to 1 a minute.
// With Redis down the store sells on the ledger with its in-process limiter, at half the
// store's limits (rounded up: 1): it accepted half the defaults, 3 a second.
func TestDegradedLimiterHoldsToStoreLimits(t *testing.T) {
	s := stack.Run(t, stack.Options{Redis: true})
	in, _, out := newIngestOn(t, s)
	runIngest(t, in)
	waitMode(t, in, client.ModeRedis)
	ctx := context.Background()
	if _, err := in.SetLimits(ctx, store.Limits{WindowMs: 60_000, Pay: 1}); err != nil {
		t.Fatal(err)
	}
	if err := s.Redis[0].Kill(); err != nil {
		t.Fatal(err)
	}
	var verdicts []string
	for seq := int64(1); seq <= 3; seq++ {
		a := sendWait(t, in, out, testSale("T1", seq, time.Now(), false))[0]
		verdicts = append(verdicts, string(a.Status)+"/"+string(in.Mode()))
	}
	if want := "[accepted/degraded rate_limited/degraded rate_limited/degraded]"; fmt.Sprint(verdicts) != want {
		t.Fatalf("live sales with Redis down: %v, want %s", verdicts, want)
	}
}

// TestLimitsSetWhileAPromoRunsOut: with a promo running, Redis hangs; the manager tightens
// pay to 1 a minute (the ledger records it, degraded), and the promo runs out while Redis is
// away. When Redis answers again the rebuild gives it the ledger's limits, also with the
// store-server's clock set back 30 s after the promo started.
func TestLimitsSetWhileAPromoRunsOut(t *testing.T) {
	for _, step := range []time.Duration{0, -30 * time.Second} {
		t.Run(fmt.Sprintf("clock stepped %v", step), func(t *testing.T) {
			s := stack.Run(t, stack.Options{Redis: true})
			in, led, _ := newIngestOn(t, s)
			var offset atomic.Int64
			in.cfg.Now = func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
			in.cfg.ProbeEvery = 50 * time.Millisecond
			runIngest(t, in)
			waitMode(t, in, client.ModeRedis)
			ctx := context.Background()
			if _, err := in.SetLimits(ctx, store.Limits{WindowMs: 60_000, Pay: 5}); err != nil {
				t.Fatal(err)
			}
			if _, err := in.SetPromo(ctx, 150, 2*time.Second); err != nil {
				t.Fatal(err)
			}
			offset.Store(int64(step))
			resume := hang(t, s.Redis[0])
			in.Rebuild()
			waitMode(t, in, client.ModeDegraded)
			if _, err := in.SetLimits(ctx, store.Limits{WindowMs: 60_000, Pay: 1}); err != nil {
				t.Fatalf("set limits while degraded: %v", err)
			}
			time.Sleep(2500 * time.Millisecond) // the promo runs out
			resume()
			waitMode(t, in, client.ModeRedis)
			l, err := in.cfg.Gate.Limits(ctx)
			if err != nil {
				t.Fatal(err)
			}
			p, _, _ := led.Policy(ctx)
			if l.Pay != 1 || p.Limits.Pay != 1 {
				t.Fatalf("after Redis came back Redis holds pay %d a minute, the ledger %d; the manager set 1 while Redis was away",
					l.Pay, p.Limits.Pay)
			}
		})
	}
}
