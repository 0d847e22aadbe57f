package ingest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/posgate/posgate/internal/perr"
	"github.com/posgate/posgate/internal/stack"
	"github.com/posgate/posgate/internal/wire"
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
	waitMode(t, in, ModeRedis)
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
	waitMode(t, in, ModeRedis)
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
	waitMode(t, in, ModeRedis)
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

// TestLimitsKeptInRedisAlone: a store-server of an earlier release kept the manager's limits
// in Redis alone. The first rebuild of this one records them in the ledger, which then keeps
// them through a Redis restart.
func TestLimitsKeptInRedisAlone(t *testing.T) {
	s := stack.Run(t, stack.Options{Redis: true})
	in, led, _ := newIngestOn(t, s)
	ctx := context.Background()
	if err := in.cfg.Gate.SetLimits(ctx, store.Limits{Refund: 1, Terminal: store.DefaultLimits.Terminal}); err != nil {
		t.Fatal(err)
	}
	if err := in.cfg.Gate.SetPromo(ctx, 200, 30*time.Minute); err != nil {
		t.Fatal(err)
	}
	runIngest(t, in)
	waitMode(t, in, ModeRedis)
	p, ok, err := led.Policy(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pct, left := p.Promo(time.Now())
	if !ok || p.Limits != (store.Limits{Refund: 1, Terminal: store.DefaultLimits.Terminal}) || pct != 200 ||
		left <= 29*time.Minute {
		t.Fatalf("the ledger took %+v (set: %v), promo %d%% for %v from Redis; want refund 1, terminal 100, 200%% for 30m",
			p.Limits, ok, pct, left)
	}
	if got, err := in.Limits(ctx); err != nil || got != p {
		t.Fatalf("ingest holds to %+v (%v), the ledger %+v", got, err, p)
	}
}

// TestUpgradeWithRedisHung: a store-server of an earlier release kept the manager's limits
// in Redis alone (pay 1 a minute). This release starts on that ledger while Redis does not
// answer (hung, its data intact), so degraded. The manager's promo is refused
// (limits_unknown) rather than recorded on the defaults, which the first rebuild then gave
// Redis over pay 1 a minute; once Redis answers, the ledger takes its limits, and the promo
// goes in on them.
func TestUpgradeWithRedisHung(t *testing.T) {
	s := stack.Run(t, stack.Options{Redis: true})
	in, led, _ := newIngestOn(t, s)
	in.cfg.ProbeEvery = 50 * time.Millisecond
	ctx := context.Background()
	// What the previous release's PUT /v1/limits left in Redis.
	if err := in.cfg.Gate.SetLimits(ctx, store.Limits{WindowMs: 60_000, Pay: 1}); err != nil {
		t.Fatal(err)
	}
	resume := hang(t, s.Redis[0])
	runIngest(t, in)
	waitMode(t, in, ModeDegraded)
	if _, err := in.SetPromo(ctx, 150, time.Hour); perr.CodeOf(err) != CodeLimitsUnknown {
		t.Fatalf("promo with the limits in a hung Redis alone: %v, want %s", err, CodeLimitsUnknown)
	}
	if _, err := in.Limits(ctx); perr.CodeOf(err) != CodeLimitsUnknown {
		t.Fatalf("limits read with the limits in a hung Redis alone: %v, want %s", err, CodeLimitsUnknown)
	}
	resume()
	waitMode(t, in, ModeRedis)
	if _, err := in.SetPromo(ctx, 150, time.Hour); err != nil {
		t.Fatal(err)
	}
	l, err := in.cfg.Gate.Limits(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p, _, _ := led.Policy(ctx)
	if pct, _, err := in.cfg.Gate.Promo(ctx); err != nil || pct != 150 {
		t.Fatalf("promo in Redis %d%% (%v), want 150%%", pct, err)
	}
	if l.Pay != 1 || l.WindowMs != 60_000 || p.Limits.Pay != 1 || p.PromoPercent != 150 {
		t.Fatalf("after the upgrade's first rebuild Redis holds pay %d per %d ms (ledger: %+v); the manager had set pay 1 per 60000 ms",
			l.Pay, l.WindowMs, p.Limits)
	}
}

// TestReupgradeKeepsLimitsSetByPreviousRelease: this release recorded pay 2 a minute in the
// ledger; the store is rolled back to an earlier release (which keeps the limits in Redis
// alone), under which the manager tightens pay to 1 a minute; then this release starts again
// on the same ledger and Redis. Its first rebuild takes Redis's limits into the ledger: it
// wrote the stale ledger row over them, loosening pay back to 2 without a word.
func TestReupgradeKeepsLimitsSetByPreviousRelease(t *testing.T) {
	s := stack.Run(t, stack.Options{Redis: true})
	in, led, out := newIngestOn(t, s)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- in.Run(ctx) }()
	waitMode(t, in, ModeRedis)
	if _, err := in.SetLimits(ctx, store.Limits{WindowMs: 60_000, Pay: 2}); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// Rolled back: the previous release's PUT /v1/limits writes Redis alone.
	if err := in.cfg.Gate.SetLimits(context.Background(), store.Limits{WindowMs: 60_000, Pay: 1}); err != nil {
		t.Fatal(err)
	}
	// Upgraded again: a new store-server on the same ledger and Redis.
	in2 := New(Config{Store: testStore, Gate: in.cfg.Gate, Ledger: led, Out: out})
	runIngest(t, in2)
	waitMode(t, in2, ModeRedis)
	l, err := in2.cfg.Gate.Limits(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if p, _, _ := led.Policy(context.Background()); l.Pay != 1 || p.Limits.Pay != 1 {
		t.Fatalf("after the re-upgrade Redis holds pay %d a minute; the manager's last setting (under the previous release) was 1", l.Pay)
	}
}

// TestLimitsSetWhileAPromoRunsOut: with a promo running, Redis hangs; the manager tightens
// pay to 1 a minute (the ledger records it, degraded), and the promo runs out while Redis is
// away. When Redis answers again the rebuild gives it the ledger's limits. The promo gone
// from Redis was taken for a change by another release, and Redis's old limits replaced the
// manager's; then, with the mark carrying the promo's end by the store-server's clock, the
// same once that clock was set back 30 s after the promo started.
func TestLimitsSetWhileAPromoRunsOut(t *testing.T) {
	for _, step := range []time.Duration{0, -30 * time.Second} {
		t.Run(fmt.Sprintf("clock stepped %v", step), func(t *testing.T) {
			s := stack.Run(t, stack.Options{Redis: true})
			in, led, _ := newIngestOn(t, s)
			var offset atomic.Int64
			in.cfg.Now = func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
			in.cfg.ProbeEvery = 50 * time.Millisecond
			runIngest(t, in)
			waitMode(t, in, ModeRedis)
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
			waitMode(t, in, ModeDegraded)
			if _, err := in.SetLimits(ctx, store.Limits{WindowMs: 60_000, Pay: 1}); err != nil {
				t.Fatalf("set limits while degraded: %v", err)
			}
			time.Sleep(2500 * time.Millisecond) // the promo runs out
			resume()
			waitMode(t, in, ModeRedis)
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

// TestUpgradeChangeBeforeFirstRebuild: a store-server of an earlier release kept pay 1 a
// minute in Redis alone. This release starts with Redis answering, and the manager starts a
// promo before the first rebuild has run (the API serves before it): the change stands on
// Redis's limits. It was recorded in the ledger alone, and the first rebuild took it for
// the ledger's own and replaced it with Redis's.
func TestUpgradeChangeBeforeFirstRebuild(t *testing.T) {
	s := stack.Run(t, stack.Options{Redis: true})
	in, led, _ := newIngestOn(t, s)
	ctx := context.Background()
	if err := in.cfg.Gate.SetLimits(ctx, store.Limits{WindowMs: 60_000, Pay: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := in.SetPromo(ctx, 150, time.Hour); err != nil {
		t.Fatalf("promo before the first rebuild: %v", err)
	}
	runIngest(t, in)
	waitMode(t, in, ModeRedis)
	p, _, _ := led.Policy(ctx)
	pct, _, err := in.cfg.Gate.Promo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if p.PromoPercent != 150 || pct != 150 || p.Limits.Pay != 1 {
		t.Fatalf("after the first rebuild the ledger's promo is %d%%, Redis's %d%%; the manager set 150%% for an hour (answered 200)",
			p.PromoPercent, pct)
	}
}
