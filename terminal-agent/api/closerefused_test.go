//go:build unix

package api_test

import (
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/posgate/posgate/internal/wire"
)

// TestLiveRefusedCloseReopensTheDay: the store refuses a day close live (a payload it cannot
// read, say). The cashier is told no, and the till's day is
// not closed behind that answer: it sells on, and a close once the store takes it goes,
// with every sale of the day.
func TestLiveRefusedCloseReopensTheDay(t *testing.T) {
	var refuse atomic.Bool
	refuse.Store(true)
	// The till's clock runs from noon: both sales and the close on one day.
	a, _ := newLiveAgent(t, liveOpts{now: noonClock(time.Local), decide: func(env wire.Envelope, live bool) *wire.Ack {
		if env.Kind == wire.KindDayClose && refuse.Load() {
			return &wire.Ack{Status: wire.AckRejected, Code: "payload_invalid", Message: "unknown field"}
		}
		return nil
	}})
	a.sellMilk()
	a.must("POST", "/v1/day-close", `{}`, http.StatusConflict)
	a.sellMilk() // not day_closed: the close the store refused is undone
	refuse.Store(false)
	closed := a.dayClose("")
	if closed.Totals.SaleCount != 2 || closed.Totals.SaleAmount != 2500 {
		t.Errorf("the close the store took: %+v, want both sales, 25.00", closed.Totals)
	}
}
