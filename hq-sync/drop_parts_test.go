package main

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/posgate/posgate/hq-sync/hqstore/sqlite"
	"github.com/posgate/posgate/hq-sync/hqstore/storetest"
)

// TestServeDropsAbandonedParts: serve's sweep deletes the parts a store left without their
// last part once they are older than --drop-parts-after, and leaves younger ones.
func TestServeDropsAbandonedParts(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "hq.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Now()
	put := func(store string, at time.Time) {
		day := storetest.Day(storetest.D1, 1, storetest.T0, storetest.Sales(store, "T1", 1, 4, storetest.D1, storetest.T0))
		b, h := storetest.NewBatch(store, store+"-b1", nil, storetest.Parts(day, 2)[0])
		if rc := storetest.MustPut(t, st, b, h, at); rc.DayParts != 1 {
			t.Fatalf("part 1 of %s: %+v", store, rc)
		}
	}
	put("S1", now.Add(-8*24*time.Hour)) // a part 1 eight days old, its store gone quiet
	put("S2", now.Add(-time.Hour))      // a part 1 of an hour ago
	if days, txns, err := st.PartsKept(ctx); err != nil || days != 2 || txns != 4 {
		t.Fatalf("parts kept before the sweep: %d days, %d txns, %v", days, txns, err)
	}

	sweep, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		dropAbandonedParts(sweep, st, 7*24*time.Hour, 10*time.Millisecond, slog.New(slog.NewTextHandler(io.Discard, nil)))
	}()
	defer func() { stop(); <-done }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		days, txns, err := st.PartsKept(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if days == 1 && txns == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("parts kept after the sweep: %d days, %d txns, want S2's alone (1 day, 2 txns)", days, txns)
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // more sweeps: the younger parts stay
	if days, txns, err := st.PartsKept(ctx); err != nil || days != 1 || txns != 2 {
		t.Fatalf("parts kept after more sweeps: %d days, %d txns, %v", days, txns, err)
	}
}
