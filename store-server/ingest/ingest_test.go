package ingest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/stack"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/lua"
	"github.com/posgate/posgate/store-server/client"
	"github.com/posgate/posgate/store-server/gate"
	"github.com/posgate/posgate/store-server/ledger"
	"github.com/posgate/posgate/store-server/store"
	"github.com/redis/go-redis/v9"
)

// Ingest runs here against a real Redis and a real SQLite ledger; only the outgoing side is
// a recorder, because what is under test is which acks messages ingest sends.

const testStore = "S1"

// sent records the down messages ingest publishes.
type sent struct {
	mu      sync.Mutex
	msgs    []wire.Acks
	resends []wire.Resend // resend requests, beside the acks
	got     chan struct{}
}

func (s *sent) Publish(topic string, payload []byte) error {
	d, err := wire.DecodeDown(payload)
	if err != nil {
		return err
	}
	if r := d.Resend; r != nil {
		if topic != wire.DownTopic(r.Store, r.Terminal) {
			return fmt.Errorf("resend for %s published on %s", r.Terminal, topic)
		}
		s.mu.Lock()
		s.resends = append(s.resends, *r)
		s.mu.Unlock()
		return nil
	}
	a := *d.Acks
	if topic != wire.DownTopic(a.Store, a.Terminal) {
		return fmt.Errorf("acks for %s published on %s", a.Terminal, topic)
	}
	s.mu.Lock()
	s.msgs = append(s.msgs, a)
	s.mu.Unlock()
	s.got <- struct{}{}
	return nil
}

func testSale(terminal string, seq int64, at time.Time, offline bool) []byte {
	p := wire.SalePayload{SaleID: fmt.Sprintf("%s-%d", terminal, seq), OpenedAt: at.Add(-time.Minute),
		Lines:    []wire.Line{{Line: 1, SKU: "A", Name: "A", Qty: 1, UnitPrice: 250, Amount: 250}},
		Payments: []wire.Payment{{Method: wire.MethodCash, Amount: 250}}, Total: 250}
	body, err := json.Marshal(&p)
	if err != nil {
		panic(err)
	}
	env := wire.NewEnvelope(wire.KindSale, testStore, terminal, seq, at, body)
	env.Offline = offline
	out, err := json.Marshal(env)
	if err != nil {
		panic(err)
	}
	return out
}

// TestOneAcksMessagePerTerminalPerGroup queues several single-event up messages of two
// terminals before ingest runs, so that one group decides them all: each terminal gets one
// acks message answering its events in seq order.
func TestOneAcksMessagePerTerminalPerGroup(t *testing.T) {
	in, _, out := newIngest(t)

	at := time.Now()
	const perTerminal = 5
	for seq := int64(1); seq <= perTerminal; seq++ {
		for _, term := range []string{"T1", "T2"} {
			in.Handle(wire.UpTopic(testStore, term), testSale(term, seq, at, seq%2 == 0))
		}
	}
	runIngest(t, in)
	for range 2 {
		select {
		case <-out.got:
		case <-time.After(20 * time.Second):
			t.Fatal("no acks within 20s")
		}
	}
	time.Sleep(100 * time.Millisecond) // a third message would be a failure
	out.mu.Lock()
	defer out.mu.Unlock()
	if len(out.msgs) != 2 {
		t.Fatalf("%d acks messages for one group of two terminals, want 2: %+v", len(out.msgs), out.msgs)
	}
	for i, term := range []string{"T1", "T2"} {
		m := out.msgs[i]
		if m.Terminal != term || len(m.Acks) != perTerminal {
			t.Fatalf("message %d: terminal %s with %d acks, want %s with %d", i, m.Terminal, len(m.Acks), term, perTerminal)
		}
		for j, a := range m.Acks {
			if a.Seq != int64(j+1) || a.Status != wire.AckAccepted || a.Live != (a.Seq%2 == 1) || a.Result == nil {
				t.Errorf("%s ack %d: %+v", term, j, a)
			}
		}
	}
	if st := in.Stats(); st.Groups != 1 || st.Accepted != 2*perTerminal {
		t.Errorf("stats %+v: want 1 group, %d accepted", st, 2*perTerminal)
	}
}

// TestHandleAfterStop: once ingest is stopped, Handle returns even with the queue full, so
// that the embedded broker's connection goroutines can end when it closes.
func TestHandleAfterStop(t *testing.T) {
	in := New(Config{Store: testStore, QueueLen: 1})
	msg := testSale("T1", 1, time.Now(), false)
	in.Handle(wire.UpTopic(testStore, "T1"), msg) // fills the queue
	done := make(chan struct{})
	go func() {
		in.Handle(wire.UpTopic(testStore, "T1"), msg)
		close(done)
	}()
	select {
	case <-done:
		t.Fatal("Handle returned with the queue full and ingest running")
	case <-time.After(50 * time.Millisecond):
	}
	in.Stop()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Handle still waits after Stop")
	}
	in.Stop() // twice is fine
	in.Handle(wire.UpTopic(testStore, "T1"), msg)
}

// TestCommitFailureIsVisible: when the ledger cannot commit (here it is closed under a
// running ingest), the event is not acked, and the stats say that commits fail, with what
// SQLite answered and when.
func TestCommitFailureIsVisible(t *testing.T) {
	in, led, out := newIngest(t)
	runIngest(t, in)
	for deadline := time.Now().Add(20 * time.Second); in.Mode() != client.ModeRedis; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("mode %s, want %s", in.Mode(), client.ModeRedis)
		}
	}
	if err := led.Close(); err != nil {
		t.Fatal(err)
	}
	before := time.Now().UTC()
	in.Handle(wire.UpTopic(testStore, "T1"), testSale("T1", 1, time.Now(), false))
	for deadline := time.Now().Add(20 * time.Second); in.Stats().CommitError == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no commit error counted: %+v", in.Stats())
		}
	}
	st := in.Stats()
	if !strings.Contains(st.LastCommitError, "closed") || st.LastCommitErrorAt.Before(before) {
		t.Errorf("stats %+v: want the closed ledger's error, at or after %v", st, before)
	}
	select {
	case <-out.got:
		t.Fatalf("an ack was sent for an event the ledger did not commit: %+v", out.msgs)
	case <-time.After(200 * time.Millisecond):
	}
}

// newIngest returns an Ingest (not running) on a real Redis and a fresh ledger holding
// 1000 of SKU "A", with the ledger (closed when the test ends) and the recorder of what it
// publishes.
func newIngest(t *testing.T) (*Ingest, *ledger.Ledger, *sent) {
	t.Helper()
	return newIngestOn(t, stack.Run(t, stack.Options{Redis: true}))
}

// newIngestOn is newIngest on the Redis of s, its client wired to the gate as the
// store-server wires it (gate.Gate.Connected on each new connection).
func newIngestOn(t *testing.T, s *stack.Stack) (*Ingest, *ledger.Ledger, *sent) {
	t.Helper()
	var g atomic.Pointer[gate.Gate]
	// Failing fast as the store-server's client does (main.redisClient).
	rdb := redis.NewClient(&redis.Options{Addr: s.Redis[0].Addr(), DialTimeout: 500 * time.Millisecond,
		ReadTimeout: time.Second, WriteTimeout: time.Second, MaxRetries: 1, DialerRetries: 1,
		OnConnect: func(ctx context.Context, cn *redis.Conn) error {
			if g := g.Load(); g != nil {
				return g.Connected(ctx, cn)
			}
			return nil
		}})
	t.Cleanup(func() { _ = rdb.Close() })
	led := newLedger(t, 1000)
	out := &sent{got: make(chan struct{}, 100)}
	g.Store(gate.New(rdb, testStore, gate.Options{}))
	return New(Config{Store: testStore, Gate: g.Load(), Ledger: led, Out: out}), led, out
}

// runIngest runs in until the test ends, and fails the test if Run fails.
func runIngest(t *testing.T, in *Ingest) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- in.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

// retired is a catalog that sold SKU "A" in an earlier version only (known is nil) or never
// had it (known is false).
type retired struct{ known bool }

func (retired) Has(sku string) bool     { return sku != "A" }
func (r retired) Known(sku string) bool { return sku != "A" || r.known }

// TestRetiredSKU: a sale of a SKU the manager has since dropped from the catalog, made
// offline from the terminal's copy of the catalog, happened and is recorded (invariant 5);
// a live one is refused unknown_sku, as is an offline one of a SKU the store never had.
func TestRetiredSKU(t *testing.T) {
	for _, tc := range []struct {
		name    string
		known   bool
		offline bool
		status  wire.AckStatus
	}{
		{"offline, an earlier catalog's", true, true, wire.AckAccepted},
		{"live, an earlier catalog's", true, false, wire.AckRejected},
		{"offline, never in a catalog", false, true, wire.AckRejected},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in, led, out := newIngest(t)
			in.cfg.Catalog = retired{known: tc.known}
			runIngest(t, in)
			at := time.Now()
			in.Handle(wire.UpTopic(testStore, "T1"), testSale("T1", 1, at, tc.offline))
			a := firstAck(t, out)
			if a.Status != tc.status || (a.Status == wire.AckRejected && a.Code != CodeUnknownSKU) {
				t.Fatalf("ack %s %s, want %s", a.Status, a.Code, tc.status)
			}
			tot, err := led.Totals(context.Background(), led.BusinessDate(at))
			if err != nil {
				t.Fatal(err)
			}
			if want := map[bool]int64{true: 1}[tc.status == wire.AckAccepted]; tot["T1"].Sales != want {
				t.Fatalf("the ledger holds %d sales of T1, want %d", tot["T1"].Sales, want)
			}
		})
	}
}

// slowRebuild is a Redis client whose Ping fails while down is set and whose rebuild
// script call waits, the first time, until release is closed (a slow rebuild).
type slowRebuild struct {
	*redis.Client
	down    atomic.Bool
	inside  chan struct{}
	release chan struct{}
}

var rebuildSHA = redis.NewScript(lua.Rebuild).Hash()

func (c *slowRebuild) Ping(ctx context.Context) *redis.StatusCmd {
	if c.down.Load() {
		cmd := redis.NewStatusCmd(ctx)
		cmd.SetErr(errors.New("dial tcp: connection refused"))
		return cmd
	}
	return c.Client.Ping(ctx)
}

func (c *slowRebuild) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	if sha == rebuildSHA {
		select {
		case c.inside <- struct{}{}:
			<-c.release
		default:
		}
	}
	return c.Client.EvalSha(ctx, sha, keys, args...)
}

// TestAdjustDuringRebuild: Redis comes back while the store sells on the ledger alone, and
// a manager's stock adjustment or shelf count arrives while the probe's rebuild runs (its
// snapshot taken, the mode still degraded). It waits for the rebuild and then reaches
// Redis too: once the store is quiet, Redis's stock is the ledger's.
func TestAdjustDuringRebuild(t *testing.T) {
	for name, change := range map[string]func(ctx context.Context, in *Ingest) error{
		"adjust": func(ctx context.Context, in *Ingest) error {
			_, _, err := in.AdjustStock(ctx, "damaged-1", "A", -30, "adjust")
			return err
		},
		"count": func(ctx context.Context, in *Ingest) error {
			_, _, _, err := in.CountStock(ctx, "count-1", "A", 70)
			return err
		},
	} {
		t.Run(name, func(t *testing.T) {
			s := stack.Run(t, stack.Options{Redis: true})
			rdb := &slowRebuild{Client: redis.NewClient(&redis.Options{Addr: s.Redis[0].Addr()}),
				inside: make(chan struct{}), release: make(chan struct{})}
			t.Cleanup(func() { _ = rdb.Close() })
			rdb.down.Store(true)
			led := newLedger(t, 100)
			ctx := context.Background()
			g := gate.New(rdb, testStore, gate.Options{})
			in := New(Config{Store: testStore, Gate: g, Ledger: led, Out: &sent{got: make(chan struct{}, 100)},
				ProbeEvery: 50 * time.Millisecond})
			runIngest(t, in)
			waitMode(t, in, client.ModeDegraded)
			rdb.down.Store(false) // Redis is back: the next probe rebuilds
			<-rdb.inside          // the snapshot is taken; the rebuild script waits
			changed := make(chan error, 1)
			go func() { changed <- change(ctx, in) }()
			time.Sleep(100 * time.Millisecond) // the change is under way, waiting or not
			close(rdb.release)
			if err := <-changed; err != nil {
				t.Fatal(err)
			}
			waitMode(t, in, client.ModeRedis)
			rs, err := g.Stock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			ls, err := led.Stock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if rs["A"] != 70 || ls["A"] != 70 {
				t.Fatalf("quiet store: stock of A %d in Redis, %d in the ledger; want 70 in both", rs["A"], ls["A"])
			}
		})
	}
}

// TestCountStock: in Redis mode a shelf count moves Redis's stock by the delta the ledger
// booked against its own quantity, after live sales: Redis's stock is the ledger's, which
// is what was counted. A retry and a count the ledger agrees with change neither, and the
// latter asks Redis nothing (the gate refuses an adjustment by 0) and starts no rebuild.
func TestCountStock(t *testing.T) {
	in, led, out := newIngest(t)
	runIngest(t, in)
	waitMode(t, in, client.ModeRedis)
	ctx := context.Background()
	at := time.Now()
	for seq := int64(1); seq <= 3; seq++ { // three live sales of one A
		in.Handle(wire.UpTopic(testStore, "T1"), testSale("T1", seq, at, false))
		select {
		case <-out.got:
		case <-time.After(20 * time.Second):
			t.Fatal("no ack")
		}
	}
	same := func(t *testing.T, want int64) {
		t.Helper()
		rs, err := in.cfg.Gate.Stock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ls, err := led.Stock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if rs["A"] != want || ls["A"] != want {
			t.Fatalf("stock of A %d in Redis, %d in the ledger; want %d in both", rs["A"], ls["A"], want)
		}
	}
	same(t, 997)
	rebuilds := in.Stats().Rebuilds
	for _, c := range []struct {
		id             string
		counted, delta int64
		applied        bool
	}{
		{"count-1", 990, -7, true},
		{"count-1", 990, -7, false}, // a retry
		{"count-2", 990, 0, true},   // the ledger agrees
		{"count-3", 1000, 10, true},
	} {
		delta, qty, applied, err := in.CountStock(ctx, c.id, "A", c.counted)
		if err != nil || delta != c.delta || qty != c.counted || applied != c.applied {
			t.Fatalf("CountStock(%s, %d): delta %d qty %d applied %v err %v; want %+d %d %v",
				c.id, c.counted, delta, qty, applied, err, c.delta, c.counted, c.applied)
		}
		same(t, c.counted)
	}
	if in.Mode() != client.ModeRedis || in.Stats().Rebuilds != rebuilds {
		t.Fatalf("mode %s, %d rebuilds after the counts (%d before)", in.Mode(), in.Stats().Rebuilds, rebuilds)
	}
}

// TestKilledBetweenGateAndLedgerOnADaysFirstSale: the store decided T1:1 in Redis and was
// killed before its ledger commit, on the first sale of its business date. The rebuild at
// the next start clears that date's counters (the ledger has none), so the redelivered sale
// is counted once: Redis's counters equal the ledger's.
func TestKilledBetweenGateAndLedgerOnADaysFirstSale(t *testing.T) {
	in, led, out := newIngest(t)
	ctx := context.Background()
	at := time.Now()
	date := led.BusinessDate(at)
	op := gate.Op{Kind: gate.OpSale, Terminal: "T1", Seq: 1, Hash: "h1", BusinessDate: date,
		Lines: []store.Line{{SKU: "A", Qty: 1}}, Total: 250, ByMethod: map[string]money.Fen{wire.MethodCash: 250}}
	snap, err := led.Snapshot(ctx) // the run that was killed: its start's rebuild, and T1:1
	if err != nil {
		t.Fatal(err)
	}
	if err := in.cfg.Gate.Rebuild(ctx, snap); err != nil {
		t.Fatal(err)
	}
	if _, err := in.cfg.Gate.Exec(ctx, []gate.Op{op}); err != nil {
		t.Fatal(err)
	}
	runIngest(t, in) // the next start: rebuild, then the terminal sends T1:1 again
	in.Handle(wire.UpTopic(testStore, "T1"), testSale("T1", 1, at, true))
	select {
	case <-out.got:
	case <-time.After(20 * time.Second):
		t.Fatal("no ack")
	}
	red, lc := countersOn(t, in, date)
	if !red["T1"].Equal(lc["T1"]) || lc["T1"].Sales != 1 {
		t.Fatalf("Redis counters %+v, ledger %+v; want one sale in both", red["T1"], lc["T1"])
	}
}

// TestRedisRestartWhileQuiet: Redis restarts, empty, while no event is in flight; nothing
// fails, go-redis reconnects. The next live sale is not refused by the empty projection:
// the gate finds another server behind the address, the store sells on the ledger alone
// for that sale and rebuilds at its next probe.
func TestRedisRestartWhileQuiet(t *testing.T) {
	s := stack.Run(t, stack.Options{Redis: true})
	in, led, out := newIngestOn(t, s)
	in.cfg.ProbeEvery = 50 * time.Millisecond
	runIngest(t, in)
	waitMode(t, in, client.ModeRedis)
	p := s.Redis[0]
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	at := time.Now()
	in.Handle(wire.UpTopic(testStore, "T1"), testSale("T1", 1, at, false)) // live
	a := firstAck(t, out)
	if a.Status != wire.AckAccepted {
		t.Fatalf("live sale of 1 A with 1000 in the ledger: %s %s %s", a.Status, a.Code, a.Message)
	}
	waitMode(t, in, client.ModeRedis) // rebuilt
	rs, err := in.cfg.Gate.Stock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rs["A"] != 999 {
		t.Fatalf("Redis stock of A %d after the rebuild, want 999", rs["A"])
	}
	if tot, _ := led.Totals(context.Background(), led.BusinessDate(at)); tot["T1"].Sales != 1 {
		t.Fatalf("ledger sales of T1: %+v", tot["T1"])
	}
}

// waitMode waits until in is in mode m.
func waitMode(t *testing.T, in *Ingest, m client.Mode) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); in.Mode() != m; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("mode %s, want %s", in.Mode(), m)
		}
	}
}

// firstAck waits for the first acks message and returns its first ack.
func firstAck(t *testing.T, out *sent) wire.Ack {
	t.Helper()
	return acksOf(t, out, 0)[0]
}

// acksOf waits for an acks message and returns the acks of the n-th one sent.
func acksOf(t *testing.T, out *sent, n int) []wire.Ack {
	t.Helper()
	select {
	case <-out.got:
	case <-time.After(20 * time.Second):
		t.Fatal("no ack")
	}
	out.mu.Lock()
	defer out.mu.Unlock()
	return out.msgs[n].Acks
}

// newLedger opens a fresh ledger (closed when the test ends) holding opening units of SKU
// "A".
func newLedger(t *testing.T, opening int64) *ledger.Ledger {
	t.Helper()
	loc, err := wire.LoadLocation("Asia/Shanghai")
	if err != nil {
		t.Fatal(err)
	}
	led, err := ledger.Open(context.Background(), filepath.Join(t.TempDir(), "ledger.db"), testStore, loc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { led.Close() })
	if _, _, err := led.Adjust(context.Background(), "open-A", "A", opening, "opening"); err != nil {
		t.Fatal(err)
	}
	return led
}
