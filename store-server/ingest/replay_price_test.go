package ingest

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/stack"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/client"
	"github.com/posgate/posgate/store-server/gate"
	"github.com/posgate/posgate/store-server/ledger"
)

// aPriced is a catalog of version 3 selling A at 2.50 (testSale's price).
type aPriced struct{}

func (aPriced) Has(sku string) bool   { return sku == "A" }
func (aPriced) Known(sku string) bool { return sku == "A" }
func (aPriced) PriceList() (int64, map[string]money.Fen) {
	return 3, map[string]money.Fen{"A": 250}
}

// startPricedRun is startGapRun with the store's catalog priced (aPriced).
func startPricedRun(t *testing.T, s *stack.Stack, led *ledger.Ledger) *gapRun {
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
	in := New(Config{Store: testStore, Gate: g.Load(), Ledger: led, Out: out, Catalog: aPriced{}})
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

// replayAt sends terminal's sale at seq as a replay of an accepted event, its line of A at
// unit (its total and cash payment to match), and returns its ack.
func (r *gapRun) replayAt(t *testing.T, terminal string, seq int64, at time.Time, unit money.Fen, rp *wire.Replay) wire.Ack {
	t.Helper()
	var env wire.Envelope
	if err := json.Unmarshal(testSale(terminal, seq, at, true), &env); err != nil {
		t.Fatal(err)
	}
	var p wire.SalePayload
	if err := json.Unmarshal(env.Payload, &p); err != nil {
		t.Fatal(err)
	}
	p.Lines[0].UnitPrice, p.Lines[0].Amount, p.Total, p.Payments[0].Amount = unit, unit, unit, unit
	body, err := json.Marshal(&p)
	if err != nil {
		t.Fatal(err)
	}
	env = wire.NewEnvelope(wire.KindSale, testStore, terminal, seq, at, body)
	env.Offline, env.Replay = true, rp
	msg, err := json.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	r.out.mu.Lock()
	n := len(r.out.msgs)
	r.out.mu.Unlock()
	r.in.Handle(wire.UpTopic(testStore, terminal), msg)
	acks := acksOf(t, r.out, n)
	if len(acks) != 1 {
		t.Fatalf("%s:%d: acks %+v", terminal, seq, acks)
	}
	return acks[0]
}

// TestReplayedPriceIsChecked: the store lost its ledger and asks a till to send its events
// again; the till replays them as accepted, with the flow numbers it was given. A replayed
// sale is held to the store's catalog like an offline one: one whose line carries another
// price than the catalog's (0.99 for A at 2.50) is booked as the customer paid it, with its
// flow number, and flagged as a price exception (price_mismatch, the difference named); one
// at the catalog's price is booked with none. A replay cannot book a price silently.
func TestReplayedPriceIsChecked(t *testing.T) {
	s := stack.Run(t, stack.Options{Redis: true})
	ctx := context.Background()
	first := startPricedRun(t, s, newLedger(t, 100))
	at := time.Now()
	flows := map[int64]int64{}
	for seq := int64(1); seq <= 2; seq++ {
		a := first.send(t, "T01", seq, at)
		wantAck(t, a, wire.AckAccepted, 0)
		flows[seq] = a.Result.FlowNo
	}
	first.stop()

	led := newLedger(t, 100) // the data directory lost
	r := startPricedRun(t, s, led)
	wantAck(t, r.send(t, "T01", 3, at), wire.AckOutOfOrder, 1)
	if rq := r.resendOf(t, 0); rq.From != 1 || rq.To != 2 {
		t.Fatalf("resend request %+v, want T01 1..2", rq)
	}
	date := led.BusinessDate(at)
	for i, unit := range []money.Fen{99, 250} {
		seq := int64(i + 1)
		a := r.replayAt(t, "T01", seq, at, unit, &wire.Replay{Status: wire.ReplayAccepted, FlowNo: flows[seq], BusinessDate: date})
		if a.Status != wire.AckAccepted || a.Result == nil || a.Result.FlowNo != flows[seq] {
			t.Fatalf("replay of T01:%d at %d fen: %+v, want accepted with flow %d", seq, unit, a, flows[seq])
		}
	}
	ex, err := led.PriceExceptions(ctx, date, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(ex) != 1 || ex[0].Terminal != "T01" || ex[0].Seq != 1 || ex[0].SKU != "A" || ex[0].Code != ledger.CodePriceMismatch ||
		ex[0].SoldPrice != 99 || ex[0].CatalogPrice != 250 || ex[0].Difference != 151 {
		t.Fatalf("price exceptions %+v, want T01:1 A sold at 0.99 against 2.50 (price_mismatch, 1.51)", ex)
	}
	if st := r.in.Stats(); st.Replayed != 2 {
		t.Fatalf("replayed %d, want 2", st.Replayed)
	}
}
