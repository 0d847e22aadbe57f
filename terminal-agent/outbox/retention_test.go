package outbox

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/posgate/posgate/internal/wire"
)

// TestPruneKeepsWhatHQDoesNotHold: an acknowledged event past the retention is pruned only
// once HQ holds its business day (as the store says, never moving back), or once it is
// older than KeepUnheld whatever HQ holds; Held counts what is kept.
func TestPruneKeepsWhatHQDoesNotHold(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)
	s, err := Open(ctx, filepath.Join(t.TempDir(), "outbox.db"), Config{Store: "S1", Terminal: "T1", Location: time.UTC,
		Now: func() time.Time { return now }, KeepUnheld: 20 * 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// Seqs 1-2 of the 20th, 3-4 of the 21st, 5 of the 22nd, each acked on its day.
	for i, day := range []int{20, 20, 21, 21, 22} {
		now = time.Date(2026, 11, day, 12, 0, i, 0, time.UTC)
		seq, err := s.Enqueue(ctx, wire.KindHeartbeat, &wire.HeartbeatPayload{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Apply(ctx, []Transition{{Seq: seq, Action: Ack, Ack: wire.Ack{Seq: seq, Status: wire.AckAccepted}}}); err != nil {
			t.Fatal(err)
		}
	}
	now = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	week := now.Add(-7 * 24 * time.Hour)
	left := func() int64 {
		t.Helper()
		h, err := s.Held(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return h.Events
	}
	if n, err := s.Prune(ctx, week); err != nil || n != 0 || left() != 5 {
		t.Fatalf("pruned %d (%v) with no day at HQ, %d left; want 0, 5", n, err, left())
	}
	if ok, err := s.SetHQThrough(ctx, "2026-11-21"); err != nil || !ok {
		t.Fatalf("set hq day: %v %v", ok, err)
	}
	if ok, err := s.SetHQThrough(ctx, "2026-11-20"); err != nil || ok {
		t.Fatalf("hq day moved back: %v %v", ok, err)
	}
	if n, err := s.Prune(ctx, week); err != nil || n != 4 || left() != 1 {
		t.Fatalf("pruned %d (%v) with HQ through the 21st, %d left; want 4, 1", n, err, left())
	}
	h, _ := s.Held(ctx)
	if h.HQThrough != "2026-11-21" || !h.Oldest.Equal(time.Date(2026, 11, 22, 12, 0, 4, 0, time.UTC)) {
		t.Fatalf("held %+v", h)
	}
	// Past KeepUnheld, the 22nd goes though HQ does not hold it.
	now = time.Date(2026, 12, 13, 12, 0, 0, 0, time.UTC)
	if n, err := s.Prune(ctx, now.Add(-7*24*time.Hour)); err != nil || n != 1 || left() != 0 {
		t.Fatalf("pruned %d (%v) past the bound, %d left; want 1, 0", n, err, left())
	}
}
