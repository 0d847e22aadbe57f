package ingest

import (
	"context"
	"path/filepath"
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

// send sends one sale of terminal at seq and returns its ack.
func (r *gapRun) send(t *testing.T, terminal string, seq int64) wire.Ack {
	t.Helper()
	r.out.mu.Lock()
	n := len(r.out.msgs)
	r.out.mu.Unlock()
	r.in.Handle(wire.UpTopic(testStore, terminal), testSale(terminal, seq, time.Now(), true))
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

func openLedgerAt(t *testing.T, path string) *ledger.Ledger {
	t.Helper()
	loc, err := wire.LoadLocation("Asia/Shanghai")
	if err != nil {
		t.Fatal(err)
	}
	led, err := ledger.Open(context.Background(), path, testStore, loc)
	if err != nil {
		t.Fatal(err)
	}
	return led
}

func gapsOf(t *testing.T, led *ledger.Ledger, terminal string) []ledger.SeqGap {
	t.Helper()
	gaps, err := led.SeqGaps(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return gaps[terminal]
}

// TestJumpOnlyWhereTheLedgerLostEvents: a till's event beyond the next the store expects is
// out_of_order in a ledger that holds the till's events and was never restored, however far
// it jumps and however often; a terminal the ledger holds nothing of may start at any seq
// (a data directory lost: its earlier events went with it), once, the gap recorded as
// new_ledger.
func TestJumpOnlyWhereTheLedgerLostEvents(t *testing.T) {
	s := stack.Run(t, stack.Options{Redis: true})
	led := newLedger(t, 1000)
	r := startGapRun(t, s, led)
	wantAck(t, r.send(t, "T1", 1), wire.AckAccepted, 0)
	wantAck(t, r.send(t, "T1", 3), wire.AckOutOfOrder, 2)
	wantAck(t, r.send(t, "T1", 3), wire.AckOutOfOrder, 2)
	wantAck(t, r.send(t, "T1", 100), wire.AckOutOfOrder, 2)

	wantAck(t, r.send(t, "T2", 5), wire.AckAccepted, 0)
	wantAck(t, r.send(t, "T2", 6), wire.AckAccepted, 0)
	wantAck(t, r.send(t, "T2", 8), wire.AckOutOfOrder, 7) // in order after its jump: no more
	if g := gapsOf(t, led, "T2"); len(g) != 1 || g[0].From != 1 || g[0].To != 4 || g[0].Reason != ledger.GapNewLedger {
		t.Fatalf("T2's gaps: %+v, want 1..4 new_ledger", g)
	}
	if g := gapsOf(t, led, "T1"); len(g) != 0 {
		t.Fatalf("T1's gaps: %+v, want none", g)
	}
	if st := r.in.Stats(); st.SeqGaps != 1 || st.OutOfOrder != 4 {
		t.Fatalf("stats %+v: want 1 seq gap, 4 out_of_order", st)
	}
	// Restarted: T2 is known now; its jumps are out of order.
	r.stop()
	r = startGapRun(t, s, led)
	wantAck(t, r.send(t, "T2", 9), wire.AckOutOfOrder, 7)
	wantAck(t, r.send(t, "T1", 3), wire.AckOutOfOrder, 2)
}

// TestRestoredLedgerTakesEachTillsJumpOnce: a ledger restored from a backup (Ledger.Backup)
// lacks the events tills sent after it was made. Each till's first event since the restore is
// taken past them, the gap recorded as restored; a till that traded in order since gets no
// jump, and no till a second one, across restarts. A restart between the restore and a
// till's first event keeps the till's allowance.
func TestRestoredLedgerTakesEachTillsJumpOnce(t *testing.T) {
	ctx := context.Background()
	s := stack.Run(t, stack.Options{Redis: true})
	led := newLedger(t, 1000)
	r := startGapRun(t, s, led)
	for _, term := range []string{"T1", "T2", "T3"} {
		wantAck(t, r.send(t, term, 1), wire.AckAccepted, 0)
	}
	backup := filepath.Join(t.TempDir(), "ledger.db")
	if err := led.Backup(ctx, backup); err != nil {
		t.Fatal(err)
	}
	for seq := int64(2); seq <= 4; seq++ {
		wantAck(t, r.send(t, "T1", seq), wire.AckAccepted, 0)
	}
	wantAck(t, r.send(t, "T3", 2), wire.AckAccepted, 0)
	r.stop()

	// Restored; the store-server is stopped before any till is heard, and started again.
	restored := openLedgerAt(t, backup)
	at, ok, err := restored.RestoredAt(ctx)
	if err != nil || !ok {
		t.Fatalf("restored ledger: RestoredAt %v %v %v", at, ok, err)
	}
	restored.Close()
	restored = openLedgerAt(t, backup)
	t.Cleanup(func() { restored.Close() })
	if again, ok, _ := restored.RestoredAt(ctx); !ok || !again.Equal(at) {
		t.Fatalf("reopened: restored at %v %v, want %v (taken once)", again, ok, at)
	}
	r = startGapRun(t, s, restored)
	wantAck(t, r.send(t, "T1", 5), wire.AckAccepted, 0)
	wantAck(t, r.send(t, "T1", 6), wire.AckAccepted, 0) // in order after its jump: no more
	wantAck(t, r.send(t, "T1", 8), wire.AckOutOfOrder, 7)
	wantAck(t, r.send(t, "T2", 2), wire.AckAccepted, 0) // in order: no gap
	wantAck(t, r.send(t, "T2", 4), wire.AckOutOfOrder, 3)
	if g := gapsOf(t, restored, "T1"); len(g) != 1 || g[0].From != 2 || g[0].To != 4 || g[0].Reason != ledger.GapRestored {
		t.Fatalf("T1's gaps: %+v, want 2..4 restored", g)
	}
	r.stop()
	// After a restart: T1 and T2 were heard since the restore; T3 was not and jumps once.
	r = startGapRun(t, s, restored)
	wantAck(t, r.send(t, "T1", 8), wire.AckOutOfOrder, 7)
	wantAck(t, r.send(t, "T2", 4), wire.AckOutOfOrder, 3)
	wantAck(t, r.send(t, "T3", 3), wire.AckAccepted, 0)
	wantAck(t, r.send(t, "T3", 4), wire.AckAccepted, 0)
	wantAck(t, r.send(t, "T3", 6), wire.AckOutOfOrder, 5)
	if g := gapsOf(t, restored, "T3"); len(g) != 1 || g[0].From != 2 || g[0].To != 2 || g[0].Reason != ledger.GapRestored {
		t.Fatalf("T3's gaps: %+v, want 2..2 restored", g)
	}
	if g := gapsOf(t, restored, "T2"); len(g) != 0 {
		t.Fatalf("T2's gaps: %+v, want none", g)
	}
}

// restoreAfter runs a store on a ledger that is then lost: each of terms sells its seq 1,
// a backup is made (Ledger.Backup), and lost runs on the lost ledger. It returns a run on
// the backup, restored, and the restored ledger.
func restoreAfter(t *testing.T, s *stack.Stack, terms []string, lost func(r *gapRun)) (*gapRun, *ledger.Ledger) {
	t.Helper()
	led := newLedger(t, 1000)
	r := startGapRun(t, s, led)
	for _, term := range terms {
		wantAck(t, r.send(t, term, 1), wire.AckAccepted, 0)
	}
	backup := filepath.Join(t.TempDir(), "ledger.db")
	if err := led.Backup(context.Background(), backup); err != nil {
		t.Fatal(err)
	}
	lost(r)
	r.stop()
	restored := openLedgerAt(t, backup)
	t.Cleanup(func() { restored.Close() })
	return startGapRun(t, s, restored), restored
}
