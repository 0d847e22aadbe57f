//go:build unix

package api_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
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

// liveOpts shape newLiveAgent's agent and store.
type liveOpts struct {
	ackDelay   time.Duration       // the simulated store answers after it
	decide     storesim.DecideFunc // its verdicts, if not the default ones
	caps       outbox.Caps         // the agent's offline caps
	ackTimeout time.Duration       // the uplink's AckTimeout (0: its default)
	storeZone  *time.Location      // the store's zone (nil: time.Local)
	tillZone   *time.Location      // the agent's --tz (nil: time.Local)
	now        func() time.Time    // the agent's clock (nil: time.Now)
}

// newLiveAgent starts the API over a real outbox whose uplink reaches a real mosquitto, on
// which a simulated store answers every event.
func newLiveAgent(t *testing.T, o liveOpts) (*agent, *storesim.Responder) {
	t.Helper()
	s := stack.Run(t, stack.Options{MQTT: true})
	r, err := storesim.Start(context.Background(), storesim.Options{BrokerURL: s.MQTTURL(), Store: "S1",
		AckDelay: o.ackDelay, Decide: o.decide, Location: o.storeZone})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	if err := r.PublishCatalog(wire.Catalog{V: 1, Store: "S1", Version: 1,
		Items: []wire.CatalogItem{{SKU: "MILK", Name: "Milk", Price: 1250}}}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "outbox.db")
	ctx, cancel := context.WithCancel(context.Background())
	store, err := outbox.Open(ctx, path, outbox.Config{Store: "S1", Terminal: "T1", Caps: o.caps,
		Location: o.tillZone, Now: o.now})
	if err != nil {
		t.Fatal(err)
	}
	up := uplink.New(uplink.Config{BrokerURL: s.MQTTURL(), Store: "S1", Terminal: "T1", AckTimeout: o.ackTimeout, Now: o.now}, store)
	done := make(chan struct{})
	go func() { defer close(done); up.Run(ctx) }()
	srv := httptest.NewServer(api.New(store, up, nil, testAccess))
	t.Cleanup(func() { srv.CloseClientConnections(); srv.Close(); cancel(); <-done; store.Close() })
	waitOnline(t, store, up)
	return newAgent(t, srv, store, path, nil), r
}

// TestLiveDoubleClick: a cashier's second click (the same Idempotency-Key) while the first
// waits for the store's live verdict: both are answered, the same way.
func TestLiveDoubleClick(t *testing.T) {
	a, _ := newLiveAgent(t, liveOpts{ackDelay: 150 * time.Millisecond})
	id := a.openSale()
	a.addLine(id, "MILK", 1)
	got := make(chan int, 2)
	for range 2 {
		go func() {
			req, _ := http.NewRequest("POST", a.srv.URL+"/v1/sales/"+id+"/payments", strings.NewReader(`{"method":"cash","amount":"20.00"}`))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer "+testToken)
			req.Header.Set("Idempotency-Key", "click-1")
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				got <- -1
				return
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			got <- res.StatusCode
		}()
		time.Sleep(40 * time.Millisecond)
	}
	for i := range 2 {
		select {
		case s := <-got:
			if s != http.StatusOK {
				t.Errorf("click %d answered %d, want 200", i+1, s)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("click %d was never answered", i+1)
		}
	}
}

// TestRetryAfterClientGaveUp: the POS app gives up on a live payment while the agent waits
// for the verdict; the payment is committed and the sale completes. A retry with the same
// key gets the payment's answer, not an error recorded because the first client had gone.
func TestRetryAfterClientGaveUp(t *testing.T) {
	a, _ := newLiveAgent(t, liveOpts{ackDelay: time.Second})
	id := a.openSale()
	a.addLine(id, "MILK", 1)
	key := client.NewKey()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	_, err := a.c.Pay(ctx, key, id, cash("20.00"))
	cancel()
	var answered *client.Error
	if err == nil || errors.As(err, &answered) {
		t.Fatalf("the payment was answered within 100 ms (%v); the store's verdict takes a second", err)
	}
	time.Sleep(300 * time.Millisecond) // the agent decides the payment locally
	s, err := a.c.Pay(context.Background(), key, id, cash("20.00"))
	a.ok("the retry with the same key", err)
	if s.Sale.State != "completed" {
		t.Fatalf("sale %s after the retry, want completed", s.Sale.State)
	}
}

// TestRetryAfterRateLimited: the store refuses a live payment for now (rate_limited) and the
// agent undoes it and answers 429. The same request sent again with the same key after
// retry_after_ms is a new attempt, not a replay of the 429.
func TestRetryAfterRateLimited(t *testing.T) {
	var limited atomic.Bool
	a, _ := newLiveAgent(t, liveOpts{decide: func(env wire.Envelope, live bool) *wire.Ack {
		if live && env.Kind == wire.KindSale && limited.CompareAndSwap(false, true) {
			return &wire.Ack{Status: wire.AckRateLimited, Code: "rate_limited", RetryAfterMs: 50}
		}
		return nil
	}})
	id := a.openSale()
	a.addLine(id, "MILK", 1)
	key := client.NewKey()
	_, err := a.c.Pay(context.Background(), key, id, cash("20.00"))
	var refusal *client.Error
	if !errors.As(err, &refusal) || refusal.Status != http.StatusTooManyRequests || refusal.RetryAfter() != 50*time.Millisecond {
		t.Fatalf("the payment the store limits: %v, want 429 with retry_after_ms 50", err)
	}
	time.Sleep(refusal.RetryAfter() + 10*time.Millisecond)
	s, err := a.c.Pay(context.Background(), key, id, cash("20.00"))
	a.ok("the payment again with the same key", err)
	if s.Sale.State != "completed" || s.Event == nil || s.Event.Offline {
		t.Fatalf("the retry: sale %s, event %+v; want completed with the store's verdict", s.Sale.State, s.Event)
	}
}

// TestStoreSilent: the broker is up but the store does not answer (store-server down or
// stuck). Past the ack timeout the agent counts the store as unreachable: it decides at once
// without waiting for verdicts, and the offline caps apply (a card payment over the
// per-payment cap is refused, refunds are refused with offline refunds off); card money of
// a sale decided locally counts as held offline.
func TestStoreSilent(t *testing.T) {
	a, r := newLiveAgent(t, liveOpts{ackTimeout: 300 * time.Millisecond,
		caps: outbox.Caps{MaxCardPayment: 200000, MaxStoredCard: 300000, MaxOffline: time.Hour}})
	r.SetSilent(true)
	id := a.openSale()         // sent, never answered
	a.addLine(id, "MILK", 400) // 5000.00
	a.pay(id, client.PayRequest{Method: "card", Amount: "1500.00", Reference: "C"})
	time.Sleep(400 * time.Millisecond) // past the ack timeout
	r2 := a.do("POST", "/v1/sales/"+id+"/payments", `{"method":"card","amount":"2100.00","reference":"C"}`)
	if r2.Status != http.StatusConflict || r2.code(t) != "offline_cap_payment" {
		t.Fatalf("a card payment over the offline cap with the store silent: %d %s", r2.Status, r2.Body)
	}
	a.pay(id, client.PayRequest{Method: "card", Amount: "1000.00", Reference: "D"})
	s := a.pay(id, cash("2500.00"))
	if s.Sale.State != "completed" || s.Event == nil || !s.Event.Offline {
		t.Fatalf("sale %s, event %+v: want completed, decided locally", s.Sale.State, s.Event)
	}
	rf := a.do("POST", "/v1/refunds", `{"sale_id":"`+id+`","method":"cash"}`)
	if rf.Status != http.StatusConflict || rf.code(t) != "refund_offline_disabled" {
		t.Fatalf("a refund with the store silent and offline refunds off: %d %s", rf.Status, rf.Body)
	}
	st := a.status()
	if st.StoredCard != 250000 {
		t.Fatalf("card money held offline %s, want 2500.00", st.StoredCard)
	}
}

// TestDatesApartInStatus: a till whose --tz is not the store's zone dates a sale after the
// till's midnight on another day than the store does; its status says so, from the store's
// acks, where the POS app and the till's support see it. A till in the store's zone shows
// nothing.
func TestDatesApartInStatus(t *testing.T) {
	// 01:30 at UTC+08:00 is 17:30 of the day before in UTC.
	start, at := time.Now(), time.Date(2026, 11, 30, 1, 30, 0, 0, time.FixedZone("UTC+08:00", 8*3600))
	now := func() time.Time { return at.Add(time.Since(start)) }
	for _, c := range []struct {
		name  string
		store *time.Location
		apart bool
	}{
		{"same zone", time.FixedZone("UTC+08:00", 8*3600), false},
		{"store in UTC", time.UTC, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, _ := newLiveAgent(t, liveOpts{storeZone: c.store, tillZone: time.FixedZone("UTC+08:00", 8*3600), now: now})
			id := a.openSale()
			a.addLine(id, "MILK", 2)
			sale := a.pay(id, cash("25.00"))
			if sale.Sale.State != "completed" || sale.Event == nil || sale.Event.Offline {
				t.Fatalf("sale %s, event %+v: want completed live", sale.Sale.State, sale.Event)
			}
			st := a.status()
			if !c.apart {
				if st.DatesApart != nil {
					t.Fatalf("dates_apart %+v, want none: the till is in the store's zone", *st.DatesApart)
				}
				return
			}
			// The scan and the sale: the store dates every event it accepts.
			want := client.DatesApart{Events: 2, Seq: st.DatesApart.Seq, TillDate: "2026-11-30", StoreDate: "2026-11-29",
				TillZone: "UTC+08:00"}
			if st.DatesApart == nil || *st.DatesApart != want || want.Seq <= 0 {
				t.Fatalf("dates_apart %+v, want %+v", st.DatesApart, want)
			}
		})
	}
}
