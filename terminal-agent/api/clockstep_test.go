//go:build unix

package api_test

import (
	"path/filepath"
	"testing"
	"time"

	tillclock "github.com/posgate/posgate/internal/clock"
	"github.com/posgate/posgate/terminal-agent/client"
	"github.com/posgate/posgate/terminal-agent/outbox"
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
		s, err := a.c.Pay(t.Context(), client.NewKey(), id, client.PayRequest{Method: "card", Amount: "12.50", Reference: "C"})
		if err != nil {
			t.Fatalf("clock stepped %v with a message unanswered for 1s: card payment: %v", step, err)
		}
		if want := time.Now().Add(step).In(time.Local).Format("2006-01-02"); s.Sale.BusinessDate != want {
			t.Errorf("clock stepped %v: sale dated %s, want %s (the till's clock)", step, s.Sale.BusinessDate, want)
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
