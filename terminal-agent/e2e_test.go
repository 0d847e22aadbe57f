//go:build unix

package main

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/posgate/posgate/e2e"
	"github.com/posgate/posgate/internal/stack"
	"github.com/posgate/posgate/internal/storesim"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/terminal-agent/client"
)

var testCatalog = wire.Catalog{V: 1, Store: "S1", Version: 1, Items: []wire.CatalogItem{
	{SKU: "MILK", Barcode: "6901234567890", Name: "Milk 1L", Price: 1250},
	{SKU: "BREAD", Name: "Bread", Price: 899},
	{SKU: "EGGS", Name: "Eggs x10", Price: 1590},
	{SKU: "BAD", Name: "An item the store refuses", Price: 100},
	{SKU: "LIMITED", Name: "An item the store rate-limits live", Price: 500},
}}

// freeAddr returns a free loopback address.
func freeAddr(t testing.TB) string {
	t.Helper()
	addr, err := e2e.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// waitDrained waits until the agent has no backlog left.
func waitDrained(t testing.TB, c *e2e.Cashier, d time.Duration) client.StatusAnswer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	st, err := c.WaitDrained(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func status(t testing.TB, c *e2e.Cashier) client.StatusAnswer {
	t.Helper()
	st, err := c.Status()
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// checkExactlyOnce asserts that every event answered 2xx reached the store exactly once (or
// is parked with the store's reason), that the store accepted nothing else, and that it
// accepted each terminal's events in seq order.
func checkExactlyOnce(t *testing.T, c *e2e.Cashier, r *storesim.Responder, terminal string, parked map[string]bool) {
	t.Helper()
	accepted := r.Accepted(terminal)
	seen := map[string]int{}
	var last int64
	for _, e := range accepted {
		seen[e.Key]++
		if e.Seq <= last {
			t.Errorf("store accepted seq %d after %d: out of order", e.Seq, last)
		}
		last = e.Seq
	}
	missing := 0
	ok := c.OK()
	for key := range ok {
		switch {
		case parked[key]:
			if seen[key] != 0 {
				t.Errorf("parked event %s was also accepted", key)
			}
		case seen[key] != 1 || r.AcceptCount(key) != 1:
			missing++
			if missing < 10 {
				t.Errorf("event %s answered 2xx reached the store %d times", key, seen[key])
			}
		}
	}
	if missing > 0 {
		t.Errorf("%d of %d acknowledged events not delivered exactly once", missing, len(ok))
	}
	if st := r.Stats(); st.Conflicts != 0 {
		t.Errorf("store saw %d conflicts: a seq was reused for other content", st.Conflicts)
	}
	t.Logf("%d events answered 2xx, %d accepted by the store, %d parked; store stats %+v",
		len(ok), len(accepted), len(parked), r.Stats())
}

func startResponder(t *testing.T, s *stack.Stack, decide storesim.DecideFunc) *storesim.Responder {
	t.Helper()
	r, err := storesim.Start(context.Background(), storesim.Options{BrokerURL: s.MQTTURL(), Store: "S1", Decide: decide})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	if err := r.PublishCatalog(testCatalog); err != nil {
		t.Fatal(err)
	}
	return r
}

// runAgent runs the agent in-process with the real wiring and returns a cashier of its API.
func runAgent(t *testing.T, broker, dataDir string, extra ...string) *e2e.Cashier {
	t.Helper()
	m := NewMain()
	args := append([]string{"--store", "S1", "--terminal", "T1", "--broker", broker, "--data-dir", dataDir,
		"--listen", "127.0.0.1:0", "--ack-timeout", "1s", "--heartbeat", "0", "--log-level", "warn"}, extra...)
	if err := m.ParseFlags(args); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case addr := <-m.Addr:
		tok, err := client.ReadToken(filepath.Join(dataDir, TokenFile))
		if err != nil {
			t.Fatal(err)
		}
		return e2e.NewCashier(addr, tok)
	case err := <-done:
		t.Fatalf("agent stopped: %v", err)
	}
	return nil
}

func waitCatalog(t *testing.T, c *e2e.Cashier) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.WaitCatalog(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestSyncExactlyOnce runs a cashier against the agent while the store acks, rejects,
// rate-limits, duplicates acks, delays, goes silent, and the broker is stopped and restarted.
func TestSyncExactlyOnce(t *testing.T) {
	s := stack.Run(t, stack.Options{MQTT: true})
	var mu sync.Mutex
	limited := map[string]bool{}
	r := startResponder(t, s, func(env wire.Envelope, live bool) *wire.Ack {
		switch {
		case bytes.Contains(env.Payload, []byte(`"sku":"BAD"`)) && env.Kind == wire.KindSale:
			return &wire.Ack{Status: wire.AckRejected, Code: "bad_item", Message: "this item may not be sold"}
		case bytes.Contains(env.Payload, []byte(`"sku":"LIMITED"`)) && live:
			return &wire.Ack{Status: wire.AckRateLimited, Code: "rate_limited", RetryAfterMs: 100}
		case !live && env.Seq%7 == 0: // pace the sync lane now and then, once per event
			mu.Lock()
			defer mu.Unlock()
			if !limited[env.Key] {
				limited[env.Key] = true
				return &wire.Ack{Status: wire.AckRateLimited, Code: "store_busy", RetryAfterMs: 50}
			}
		}
		return nil
	})
	c := runAgent(t, s.MQTTURL(), t.TempDir())
	waitCatalog(t, c)
	basket := func(i int) []string { return [][]string{{"MILK"}, {"BREAD", "EGGS"}, {"MILK", "MILK", "BREAD"}}[i%3] }
	method := func(i int) string { return []string{"cash", "card", "qr"}[i%3] }
	sell := func(n int, extra ...string) {
		for i := 0; i < n; i++ {
			if err := c.Sale(append(basket(i), extra...), method(i)); err != nil {
				t.Fatal(err)
			}
		}
	}

	// Online, with duplicated acks.
	r.SetDuplicateAcks(true)
	sell(20)
	// A live refusal is an answer to the cashier, and the event is never delivered.
	ctx := context.Background()
	sa, err := c.Client().OpenSale(ctx, client.NewKey())
	if err != nil {
		t.Fatalf("open a sale: %v", err)
	}
	_, err = c.Client().AddLine(ctx, client.NewKey(), sa.Sale.ID, client.AddLineRequest{SKU: "LIMITED", Qty: 1})
	var refused *client.Error
	if !errors.As(err, &refused) || refused.Status != 429 || refused.Code != "rate_limited" || refused.RetryAfter() != 100*time.Millisecond {
		t.Fatalf("live rate limit: %v", err)
	}
	r.SetDuplicateAcks(false)

	// The store goes silent: sales decide locally past the verdict deadline.
	r.SetSilent(true)
	sell(5)
	r.SetSilent(false)

	// Acks slower than the verdict deadline.
	r.SetAckDelay(400 * time.Millisecond)
	sell(3)
	r.SetAckDelay(0)

	// The broker goes away: offline sales, one with an item the store will refuse.
	if err := s.Mosquitto.Stop(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	sell(10)
	if err := c.Sale([]string{"BAD"}, "cash"); err != nil {
		t.Fatal(err)
	}
	sell(5)
	if st := status(t, c); st.Online || st.Backlog < 30 {
		t.Fatalf("offline status: %+v", st)
	}
	if err := s.Mosquitto.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	sell(10)
	waitDrained(t, c, 60*time.Second)

	// The refused offline sale is parked with the store's reason; nothing else is.
	p, err := c.Client().Parked(ctx)
	if err != nil {
		t.Fatal(err)
	}
	parked := map[string]bool{}
	for _, e := range p.Parked {
		parked[e.Key] = true
		if e.Code != "bad_item" || e.Kind != wire.KindSale {
			t.Errorf("parked %+v", e)
		}
	}
	if len(parked) != 1 {
		t.Fatalf("want 1 parked event, got %+v", p.Parked)
	}
	checkExactlyOnce(t, c, r, "T1", parked)
}

// TestCrashRecovery kills the agent process with SIGKILL at 20 random moments under a
// scripted cashier load; every event answered 2xx must reach the store exactly once.
func TestCrashRecovery(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test runs the agent binary 20 times")
	}
	bin := filepath.Join(t.TempDir(), "terminal-agent")
	if out, err := exec.Command("go", "build", "-race", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build agent: %v\n%s", err, out)
	}
	s := stack.Run(t, stack.Options{MQTT: true})
	r := startResponder(t, s, nil)
	dataDir := t.TempDir()
	addr := freeAddr(t)
	logf, err := os.Create(filepath.Join(dataDir, "agent.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	start := func() *exec.Cmd {
		cmd := exec.Command(bin, "--store", "S1", "--terminal", "T1", "--broker", s.MQTTURL(), "--data-dir", dataDir,
			"--listen", addr, "--ack-timeout", "1s", "--heartbeat", "0", "--log-level", "warn")
		cmd.Stdout, cmd.Stderr = logf, logf
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 200; i++ {
			if conn, err := net.Dial("tcp", addr); err == nil {
				conn.Close()
				return cmd
			}
			time.Sleep(25 * time.Millisecond)
		}
		cmd.Process.Kill()
		t.Fatal("agent did not start listening")
		return nil
	}
	rng := rand.New(rand.NewPCG(1, uint64(time.Now().UnixNano())))
	cmd := start()
	tok, err := client.ReadToken(filepath.Join(dataDir, TokenFile))
	if err != nil {
		t.Fatal(err)
	}
	c := e2e.NewCashier(addr, tok)
	waitCatalog(t, c)
	skus := []string{"MILK", "BREAD", "EGGS"}
	const rounds, perRound = 20, 5
	for round := 0; round < rounds; round++ {
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for w := 0; w < 2; w++ { // two POS app threads
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					if err := c.Sale(skus[:1+(i+w)%3], []string{"cash", "card", "qr"}[i%3]); err != nil {
						return // the agent died under us: that request's outcome is unknown
					}
				}
			}()
		}
		r.SetAckDelay(time.Duration(rng.IntN(30)) * time.Millisecond)
		// Each round's kill comes after a random time and after at least perRound more
		// events were answered, however busy the machine: the rounds, not the clock, make
		// the load.
		before := len(c.OK())
		time.Sleep(time.Duration(100+rng.IntN(500)) * time.Millisecond)
		for deadline := time.Now().Add(20 * time.Second); len(c.OK()) < before+perRound && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
		}
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
		close(stop)
		wg.Wait()
		cmd = start()
	}
	r.SetAckDelay(0)
	waitDrained(t, c, 60*time.Second)
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	cmd.Wait()
	if len(c.OK()) < rounds*perRound {
		if b, err := os.ReadFile(filepath.Join(dataDir, "agent.log")); err == nil {
			t.Logf("agent log:\n%s", b[:min(len(b), 6000)])
		}
		t.Fatalf("only %d events answered 2xx: the load did not run", len(c.OK()))
	}
	checkExactlyOnce(t, c, r, "T1", nil)
	// Seqs have no repeats and no holes the store did not see: every seq it accepted is
	// distinct, and the highest is the number of events it decided.
	acc := r.Accepted("T1")
	seqs := make([]int64, len(acc))
	for i, e := range acc {
		seqs[i] = e.Seq
	}
	if !slices.IsSorted(seqs) || len(slices.Compact(slices.Clone(seqs))) != len(seqs) {
		t.Fatal("accepted seqs repeat or are out of order")
	}
}
