//go:build unix

package api_test

import (
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/posgate/posgate/internal/storesim"
	"github.com/posgate/posgate/internal/wire"
)

// TestReopenedCloseReachesTheStore: over the broker, the mistaken close and, after the
// reopen, the new one both reach the store, in seq order, the later with all the day's
// sales; the store keeps the close with the highest seq per terminal and day.
func TestReopenedCloseReachesTheStore(t *testing.T) {
	s, r := startStore(t, storesim.Options{})
	now := noonClock(time.Local) // the sales and both closes on one day
	a, _, _ := startAgent(t, s.MQTTURL(), filepath.Join(t.TempDir(), "outbox.db"), agentOpts{now: now})
	date := a.store.BusinessDate(now())
	a.sellMilk()
	first := a.dayClose(date)
	a.dayReopen(date, "closed by mistake")
	a.sellMilk()
	second := a.dayClose(date)
	var closes []wire.DayClosePayload
	var seqs []int64
	for deadline := time.Now().Add(5 * time.Second); len(closes) < 2 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		closes, seqs = closes[:0], seqs[:0]
		for _, e := range r.Accepted("T1") {
			if e.Kind != wire.KindDayClose {
				continue
			}
			var p wire.DayClosePayload
			if err := json.Unmarshal(e.Payload, &p); err != nil {
				t.Fatal(err)
			}
			closes, seqs = append(closes, p), append(seqs, e.Seq)
		}
	}
	if len(closes) != 2 || seqs[0] != first.Event.Seq || seqs[1] != second.Event.Seq || seqs[1] <= seqs[0] {
		t.Fatalf("the store accepted day closes %v at seqs %v; want the two closes, %d then %d",
			closes, seqs, first.Event.Seq, second.Event.Seq)
	}
	if closes[0].SaleCount != 1 || closes[1].SaleCount != 2 || closes[1].SaleAmount != 2500 {
		t.Errorf("the store received closes of %d and %d sales (%s); want 1, then 2 (25.00)",
			closes[0].SaleCount, closes[1].SaleCount, closes[1].SaleAmount)
	}
}
