package ingest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/posgate/posgate/internal/stack"
	"github.com/posgate/posgate/store-server/client"
)

// TestDegradedOutOfStockCountedRefused: with Redis down the ledger refuses a live sale that
// would take stock below zero (out_of_stock, not final: the till may sell it offline). That
// is a live refusal, as Redis's out_of_stock is, and counts in refused_live; rejected counts
// bad input the store parked, and nothing was parked.
func TestDegradedOutOfStockCountedRefused(t *testing.T) {
	s := stack.Run(t, stack.Options{Redis: true})
	in, led, out := newIngestOn(t, s)
	ctx := context.Background()
	if _, _, err := led.Adjust(ctx, "empty-A", "A", -1000, "adjust"); err != nil {
		t.Fatal(err)
	}
	runIngest(t, in)
	waitMode(t, in, client.ModeRedis)
	if err := s.Redis[0].Kill(); err != nil {
		t.Fatal(err)
	}
	// The first live sale meets the dead Redis and opens the breaker; the second is decided
	// with the gate in degraded mode from the start.
	var codes []string
	for seq := int64(1); seq <= 2; seq++ {
		a := sendWait(t, in, out, testSale("T1", seq, time.Now(), false))[0]
		codes = append(codes, fmt.Sprintf("%s/%s/live=%t", a.Status, a.Code, a.Live))
	}
	if in.Mode() != client.ModeDegraded {
		t.Fatalf("mode %s, want degraded", in.Mode())
	}
	if want := "[rejected/out_of_stock/live=true rejected/out_of_stock/live=true]"; fmt.Sprint(codes) != want {
		t.Fatalf("live sales of an empty SKU with Redis down: %v, want %s", codes, want)
	}
	parked, err := led.Parked(ctx, 0, true)
	if err != nil {
		t.Fatal(err)
	}
	if st := in.Stats(); st.Refused != 2 || st.Rejected != 0 || len(parked) != 0 {
		t.Fatalf("stats refused_live %d, rejected %d (parked %d) after 2 live out_of_stock refusals; "+
			"want 2 refused_live, 0 rejected", st.Refused, st.Rejected, len(parked))
	}
}
