//go:build unix

package api_test

import (
	"context"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	tillclock "github.com/posgate/posgate/internal/clock"
	"github.com/posgate/posgate/internal/stack"
	"github.com/posgate/posgate/internal/storesim"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/terminal-agent/api"
	"github.com/posgate/posgate/terminal-agent/client"
	"github.com/posgate/posgate/terminal-agent/outbox"
	"github.com/posgate/posgate/terminal-agent/uplink"
)

// TestClockStepWhileOnline: a till's clock stepped back three hours, or ahead past
// --offline-max, while the store has not yet answered a message the till sent: the store is
// reachable and answers a moment later, so the till keeps selling, a card payment too. A
// step of the clock is not time spent without the store (the lane measures that on the
// monotonic clock while it runs), and the sale made under the stepped clock is dated by it.
func TestClockStepWhileOnline(t *testing.T) {
	file := filepath.Join(t.TempDir(), "clock-offset")
	clk := tillclock.New(file, nil)
	a, r := newLiveAgent(t, liveOpts{now: clk.Now, caps: outbox.Caps{MaxOffline: 24 * time.Hour}})
	for _, step := range []time.Duration{-3 * time.Hour, 25 * time.Hour} {
		r.SetAckDelay(3 * time.Second) // the store answers, late
		id := a.openSale()
		a.addLine(id, "MILK", 1) // a scan sent; decided locally at its verdict deadline
		if err := tillclock.WriteOffset(file, step); err != nil {
			t.Fatal(err)
		}
		time.Sleep(tillclock.Reread + 200*time.Millisecond) // the clock reads its file again
		before := tillDate(step)
		s, err := a.c.Pay(t.Context(), client.NewKey(), id, client.PayRequest{Method: "card", Amount: "12.50", Reference: "C"})
		if err != nil {
			t.Fatalf("clock stepped %v with a message unanswered for 1s: card payment: %v", step, err)
		}
		if after := tillDate(step); s.Sale.BusinessDate != before && s.Sale.BusinessDate != after {
			t.Errorf("clock stepped %v: sale dated %s, want %s (the till's clock)", step, s.Sale.BusinessDate, after)
		}
		r.SetAckDelay(0)
		if err := tillclock.WriteOffset(file, 0); err != nil {
			t.Fatal(err)
		}
		time.Sleep(tillclock.Reread + 200*time.Millisecond)
		for deadline := time.Now().Add(10 * time.Second); a.status().Backlog > 0; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("clock stepped %v and set right: backlog %d not drained", step, a.status().Backlog)
			}
		}
	}
}

// tillDate is the business date now by a till clock stepped by step (the agents' zone is
// time.Local). A live payment's date is read before and after it: waiting for the store's
// verdict, it may take the till's clock past its midnight.
func tillDate(step time.Duration) string {
	return time.Now().Add(step).In(time.Local).Format("2006-01-02")
}

// TestClockStepWhileOffline: the broker is gone and the till sells offline; its clock is
// stepped past --offline-max ahead, then three hours back, before the time offline began.
// The agent has measured that time on the monotonic clock since it lost the broker (a few
// seconds), so card payments are still taken offline; the sales are dated by the stepped
// clock. Once the broker is back, everything drains.
func TestClockStepWhileOffline(t *testing.T) {
	file := filepath.Join(t.TempDir(), "clock-offset")
	clk := tillclock.New(file, nil)
	s := stack.Run(t, stack.Options{MQTT: true})
	r, err := storesim.Start(context.Background(), storesim.Options{BrokerURL: s.MQTTURL(), Store: "S1"})
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
	store, err := outbox.Open(ctx, path, outbox.Config{Store: "S1", Terminal: "T1", Now: clk.Now,
		Caps: outbox.Caps{MaxOffline: 24 * time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	up := uplink.New(uplink.Config{BrokerURL: s.MQTTURL(), Store: "S1", Terminal: "T1", Now: clk.Now}, store)
	done := make(chan struct{})
	go func() { defer close(done); up.Run(ctx) }()
	srv := httptest.NewServer(api.New(store, up, nil, testAccess))
	t.Cleanup(func() { srv.CloseClientConnections(); srv.Close(); cancel(); <-done; store.Close() })
	waitOnline(t, store, up)
	a := newAgent(t, srv, store, path, nil)

	if err := s.Mosquitto.Kill(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); up.Status().Online; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the agent did not notice the broker was gone")
		}
	}
	for _, step := range []time.Duration{25 * time.Hour, -3 * time.Hour} {
		if err := tillclock.WriteOffset(file, step); err != nil {
			t.Fatal(err)
		}
		time.Sleep(tillclock.Reread + 200*time.Millisecond)
		id := a.openSale()
		a.addLine(id, "MILK", 1)
		sale, err := a.c.Pay(t.Context(), client.NewKey(), id, client.PayRequest{Method: "card", Amount: "12.50", Reference: "C"})
		if err != nil {
			t.Fatalf("offline, clock stepped %v: card payment: %v", step, err)
		}
		if sale.Event == nil || !sale.Event.Offline {
			t.Fatalf("offline, clock stepped %v: event %+v, want one decided offline", step, sale.Event)
		}
		if want := time.Now().Add(step).In(time.Local).Format("2006-01-02"); sale.Sale.BusinessDate != want {
			t.Errorf("clock stepped %v: sale dated %s, want %s (the till's clock)", step, sale.Sale.BusinessDate, want)
		}
	}
	if err := tillclock.WriteOffset(file, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.Mosquitto.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); a.status().Backlog > 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the broker back: backlog %d not drained", a.status().Backlog)
		}
	}
}
