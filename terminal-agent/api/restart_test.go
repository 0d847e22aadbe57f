//go:build unix

package api_test

import (
	"context"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/posgate/posgate/internal/stack"
	"github.com/posgate/posgate/internal/storesim"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/terminal-agent/api"
	"github.com/posgate/posgate/terminal-agent/client"
	"github.com/posgate/posgate/terminal-agent/outbox"
	"github.com/posgate/posgate/terminal-agent/uplink"
)

// offsetClock is the device's wall clock: real time plus a settable step (an NTP correction).
type offsetClock struct{ off atomic.Int64 }

func (c *offsetClock) Now() time.Time       { return time.Now().Add(time.Duration(c.off.Load())) }
func (c *offsetClock) Step(d time.Duration) { c.off.Add(int64(d)) }

// noonClock is a device's wall clock running from noon of today in loc: a test that sells and
// closes a day by it stays within one business day at whatever time of day it runs.
func noonClock(loc *time.Location) func() time.Time {
	start := time.Now()
	y, m, d := start.In(loc).Date()
	noon := time.Date(y, m, d, 12, 0, 0, 0, loc)
	return func() time.Time { return noon.Add(time.Since(start)) }
}

// agentOpts are the settings startAgent gives an agent; zero values are the defaults.
type agentOpts struct {
	caps           outbox.Caps
	ackTimeout     time.Duration
	verdictTimeout time.Duration
	now            func() time.Time
}

// startAgent starts uplink + API over the outbox file at path (a start, or a restart, of the
// agent) and waits until it is online with the catalog. stop kills it (also at cleanup).
func startAgent(t *testing.T, brokerURL, path string, o agentOpts) (a *agent, up *uplink.Uplink, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	store, err := outbox.Open(ctx, path, outbox.Config{Store: "S1", Terminal: "T1", Caps: o.caps, Now: o.now})
	if err != nil {
		t.Fatal(err)
	}
	up = uplink.New(uplink.Config{BrokerURL: brokerURL, Store: "S1", Terminal: "T1", AckTimeout: o.ackTimeout,
		VerdictTimeout: o.verdictTimeout, Now: o.now}, store)
	done := make(chan struct{})
	go func() { defer close(done); up.Run(ctx) }()
	srv := httptest.NewServer(api.New(store, up, nil, testAccess))
	var once sync.Once
	stop = func() {
		once.Do(func() { srv.CloseClientConnections(); srv.Close(); cancel(); <-done; store.Close() })
	}
	t.Cleanup(stop)
	waitOnline(t, store, up)
	return newAgent(t, srv, store, path, nil), up, stop
}

// waitOnline waits until the agent has the catalog (version 1) and is online.
func waitOnline(t *testing.T, store *outbox.Store, up *uplink.Uplink) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if v, _ := store.CatalogVersion(context.Background()); v == 1 && up.Status().Online {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the agent did not get the catalog and come online")
		}
	}
}

func startStore(t *testing.T, o storesim.Options) (*stack.Stack, *storesim.Responder) {
	t.Helper()
	s := stack.Run(t, stack.Options{MQTT: true})
	o.BrokerURL, o.Store = s.MQTTURL(), "S1"
	r, err := storesim.Start(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	if err := r.PublishCatalog(wire.Catalog{V: 1, Store: "S1", Version: 1,
		Items: []wire.CatalogItem{{SKU: "MILK", Name: "Milk", Price: 1250}}}); err != nil {
		t.Fatal(err)
	}
	return s, r
}

// TestClockSetBackAfterRestart: the agent is killed while a live scan waits for its verdict
// (committed, not answered). At the next boot the device's clock is corrected 10 minutes
// back. The live event nobody waits for any more is sent offline, and the sales after it
// follow. The lane took the event's creation time, now "in the future", for an event whose
// request had not started waiting yet, and held back everything behind it until the clock
// caught up: nothing reached the store.
func TestClockSetBackAfterRestart(t *testing.T) {
	s, r := startStore(t, storesim.Options{})
	clk := &offsetClock{}
	path := filepath.Join(t.TempDir(), "outbox.db")

	// First run: commit a live scan, then the agent dies before waiting for its verdict.
	ctx := context.Background()
	st, err := outbox.Open(ctx, path, outbox.Config{Store: "S1", Terminal: "T1", Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.ReplaceCatalog(ctx, wire.Catalog{V: 1, Store: "S1", Version: 1,
		Items: []wire.CatalogItem{{SKU: "MILK", Name: "Milk", Price: 1250}}}); err != nil {
		t.Fatal(err)
	}
	id, _, _, err := st.Do(ctx, "k-open", "fp-open", outbox.Mode{Live: true}, func(tx *outbox.Tx) (string, error) { return tx.OpenSale() })
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := st.Do(ctx, "k-scan", "fp-scan", outbox.Mode{Live: true}, func(tx *outbox.Tx) (string, error) {
		_, err := tx.AddLine(id, "MILK", "", 1)
		return id, err
	}); err != nil {
		t.Fatal(err)
	}
	st.Close() // killed

	// Reboot: NTP steps the clock back ten minutes.
	clk.Step(-10 * time.Minute)
	a, _, _ := startAgent(t, s.MQTTURL(), path, agentOpts{now: clk.Now})

	// The cashier keeps selling: a cash sale after the restart.
	id2 := a.openSale()
	a.addLine(id2, "MILK", 2)
	a.pay(id2, cash("25.00"))

	wctx, cancel := context.WithTimeout(ctx, 8*time.Second)
	defer cancel()
	if err := r.WaitAccepted(wctx, "T1", 1); err != nil {
		b, _ := a.store.Backlog(ctx)
		t.Fatalf("after 8 s online the store has %d of the terminal's events; the terminal still holds %d pending (oldest seq %d): "+
			"the lane holds back everything behind the live event created before the clock was set back", r.AcceptedCount("T1"), b.Count, b.OldestSeq)
	}
}

// TestParkedEventIsNotARefusal: the agent was killed after committing, offline, a cash
// payment that completed a sale, and before answering. After the restart the POS app retries
// with the same Idempotency-Key, and the retry waits on the sale event. The store rejects the
// (offline) sale: the agent parks it, and the sale stands completed (it counts in the day
// totals, the cash is in the drawer). The retry is answered 200 with the event parked. It was
// answered 409 "the store refused this step", recorded for the key: a cashier who believed it
// took the money again.
func TestParkedEventIsNotARefusal(t *testing.T) {
	s, _ := startStore(t, storesim.Options{AckDelay: 300 * time.Millisecond,
		Decide: func(env wire.Envelope, live bool) *wire.Ack {
			if env.Kind == wire.KindSale && !live {
				return &wire.Ack{Status: wire.AckRejected, Code: "sale_invalid", Message: "the store cannot record this sale"}
			}
			return nil
		}})
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "outbox.db")
	a, _, _ := startAgent(t, s.MQTTURL(), path, agentOpts{verdictTimeout: 2 * time.Second})
	id := a.openSale()
	a.addLine(id, "MILK", 1)

	// The payment request as the API commits it while offline; the agent dies before answering.
	body := `{"method":"cash","amount":"20.00"}`
	path2 := "/v1/sales/" + id + "/payments"
	if _, seq, _, err := a.store.Do(ctx, "pay-1", outbox.Fingerprint("POST", path2, []byte(body)),
		outbox.Mode{Disconnected: true, OfflineSince: time.Now()}, func(tx *outbox.Tx) (string, error) {
			return id, tx.Pay(id, "cash", 2000, "")
		}); err != nil || seq == 0 {
		t.Fatal(seq, err)
	}
	// The POS app retries the same request with the same key.
	r1 := a.do("POST", path2, body, "Content-Type", "application/json", "Idempotency-Key", "pay-1")
	sale, err := a.store.Sale(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	totals, _ := a.store.DayTotals(ctx, a.store.BusinessDate(time.Now()))
	t.Logf("retry answered %d %s; sale state %s, paid %s; day totals %d sale(s) %s", r1.Status, r1.Body, sale.State, sale.Paid,
		totals.SaleCount, totals.SaleAmount)
	if sale.State == "completed" && r1.Status != 200 {
		t.Errorf("the sale stands completed (payment taken, counted in the day totals) but the cashier was answered %d: %s", r1.Status, r1.Body)
	}
	if !strings.Contains(string(r1.Body), `"parked":true`) {
		t.Errorf("the answer does not say the event is parked: %s", r1.Body)
	}
	r2 := a.do("POST", path2, body, "Content-Type", "application/json", "Idempotency-Key", "pay-1")
	if r2.Status != 200 {
		t.Errorf("second retry with the same key: %d %s (recorded)", r2.Status, r2.Body)
	}
}

// TestOfflineMaxOutlivesARestart: the broker is up but the store has not answered for longer
// than --offline-max, and card payments are refused with offline_too_long. The agent restarts
// (a crash, the till turned off and on): card payments are still refused, until the store
// answers again. The store's silence was kept in memory alone, and each restart gave the
// till another --offline-max of card payments.
func TestOfflineMaxOutlivesARestart(t *testing.T) {
	s, r := startStore(t, storesim.Options{})
	path := filepath.Join(t.TempDir(), "outbox.db")
	caps := outbox.Caps{MaxCardPayment: 200000, MaxStoredCard: 10000000, MaxOffline: 2 * time.Second}
	a, _, stop := startAgent(t, s.MQTTURL(), path, agentOpts{caps: caps, ackTimeout: 300 * time.Millisecond})
	r.SetSilent(true)
	id := a.openSale()
	a.addLine(id, "MILK", 100)          // sent, never answered
	time.Sleep(2500 * time.Millisecond) // silent for longer than --offline-max
	if res := a.do("POST", "/v1/sales/"+id+"/payments", `{"method":"card","amount":"100.00","reference":"C1"}`); res.Status != 409 || res.code(t) != "offline_too_long" {
		t.Fatalf("before the restart: %d %s, want 409 offline_too_long", res.Status, res.Body)
	}
	stop()

	a, _, _ = startAgent(t, s.MQTTURL(), path, agentOpts{caps: caps, ackTimeout: 300 * time.Millisecond})
	res := a.do("POST", "/v1/sales/"+id+"/payments", `{"method":"card","amount":"100.00","reference":"C2"}`)
	if res.Status != 409 || res.code(t) != "offline_too_long" {
		t.Fatalf("after the restart, the store still silent: card payment answered %d %s, want 409 offline_too_long",
			res.Status, res.Body)
	}

	// The store answers again: the silence ends, and card payments are taken.
	r.SetSilent(false)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if b, _ := a.store.Backlog(context.Background()); b.Count == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the backlog did not drain once the store answered")
		}
	}
	a.pay(id, client.PayRequest{Method: "card", Amount: "100.00", Reference: "C3"})
	if v, err := a.store.KV(context.Background(), outbox.KVSilentSince); err != nil || v != 0 {
		t.Fatalf("the store answers, but the silence is still recorded: %d %v", v, err)
	}
}

// TestOfflineMaxOutlivesARestartWithClockSetBack: as TestOfflineMaxOutlivesARestart, but
// at the reboot the clock is set back ten minutes. The kept silence now lies in the future:
// how long it lasted is unknown, and card payments stay refused until the store answers.
// The store counted as answering, and card payments were taken again.
func TestOfflineMaxOutlivesARestartWithClockSetBack(t *testing.T) {
	s, r := startStore(t, storesim.Options{})
	path := filepath.Join(t.TempDir(), "outbox.db")
	caps := outbox.Caps{MaxCardPayment: 200000, MaxStoredCard: 10000000, MaxOffline: 2 * time.Second}
	clk := &offsetClock{}
	a, _, stop := startAgent(t, s.MQTTURL(), path, agentOpts{caps: caps, ackTimeout: 300 * time.Millisecond, now: clk.Now})
	r.SetSilent(true)
	id := a.openSale()
	a.addLine(id, "MILK", 100)
	time.Sleep(2500 * time.Millisecond)
	if res := a.do("POST", "/v1/sales/"+id+"/payments", `{"method":"card","amount":"100.00","reference":"C1"}`); res.Status != 409 || res.code(t) != "offline_too_long" {
		t.Fatalf("before the restart: %d %s, want 409 offline_too_long", res.Status, res.Body)
	}
	stop()

	clk.Step(-10 * time.Minute)
	a, _, _ = startAgent(t, s.MQTTURL(), path, agentOpts{caps: caps, ackTimeout: 300 * time.Millisecond, now: clk.Now})
	time.Sleep(time.Second)
	res := a.do("POST", "/v1/sales/"+id+"/payments", `{"method":"card","amount":"100.00","reference":"C2"}`)
	if res.Status != 409 {
		silent, _ := a.store.KV(context.Background(), outbox.KVSilentSince)
		t.Fatalf("after the restart with the clock set back 10 min, the store still silent (kept silence %d ms in the future): card payment answered %d %s, want 409 offline_too_long",
			silent-clk.Now().UnixMilli(), res.Status, res.Body)
	}
}
