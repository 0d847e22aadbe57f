package outbox

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/posgate/posgate/internal/wire"
)

// TestSendableReplaysTheWindow: asked for events again (a store's resend), the outbox gives
// every event of the window it still holds, in order and offline, each with the store's
// first answer (accepted with its flow number, parked with its code), its pending events
// as they are, the first event after a pruned stretch with where that stretch began, and
// outside the window only pending events.
func TestSendableReplaysTheWindow(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "outbox.db"), Config{Store: "S1", Terminal: "T1", Location: time.UTC})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for range 8 {
		if _, err := s.Enqueue(ctx, wire.KindHeartbeat, &wire.HeartbeatPayload{}); err != nil {
			t.Fatal(err)
		}
	}
	var ts []Transition
	for seq := int64(1); seq <= 6; seq++ {
		ts = append(ts, Transition{Seq: seq, Action: Ack, Ack: wire.Ack{Seq: seq, Status: wire.AckAccepted,
			Result: &wire.Result{FlowNo: 100 + seq, BusinessDate: "2026-11-29"}}})
	}
	ts[4] = Transition{Seq: 5, Action: Park, Ack: wire.Ack{Seq: 5, Status: wire.AckRejected, Code: "bad_thing"}}
	if _, err := s.Apply(ctx, ts); err != nil {
		t.Fatal(err)
	}
	if _, err := s.db.W.ExecContext(ctx, `DELETE FROM events WHERE seq IN (2, 3)`); err != nil { // pruned
		t.Fatal(err)
	}
	evs, err := s.Sendable(ctx, 0, 2, 6, 100)
	if err != nil {
		t.Fatal(err)
	}
	type got struct {
		seq, lost, flow int64
		status          wire.ReplayStatus
		code            string
	}
	var have []got
	for _, e := range evs {
		g := got{seq: e.Seq, lost: e.LostFrom}
		if e.Replay != nil {
			g.flow, g.status, g.code = e.Replay.FlowNo, e.Replay.Status, e.Replay.Code
			if !e.Offline {
				t.Errorf("replay of %d not offline", e.Seq)
			}
		}
		have = append(have, g)
	}
	want := []got{{seq: 4, lost: 2, flow: 104, status: wire.ReplayAccepted}, {seq: 5, status: wire.ReplayParked, code: "bad_thing"},
		{seq: 6, flow: 106, status: wire.ReplayAccepted}, {seq: 7}, {seq: 8}}
	if len(have) != len(want) {
		t.Fatalf("sendable %+v, want %+v", have, want)
	}
	for i := range want {
		if have[i] != want[i] {
			t.Fatalf("sendable %+v, want %+v", have, want)
		}
	}
	// The whole window pruned: the first pending event says so.
	if _, err := s.db.W.ExecContext(ctx, `DELETE FROM events WHERE seq BETWEEN 4 AND 6`); err != nil {
		t.Fatal(err)
	}
	if evs, err = s.Sendable(ctx, 1, 2, 6, 100); err != nil || len(evs) != 2 || evs[0].Seq != 7 || evs[0].LostFrom != 2 || evs[0].Replay != nil {
		t.Fatalf("sendable after the window pruned: %+v %v", evs, err)
	}
	// No window: the pending events alone.
	if evs, err = s.Sendable(ctx, 0, 0, 0, 100); err != nil || len(evs) != 2 || evs[0].Seq != 7 || evs[0].LostFrom != 0 {
		t.Fatalf("sendable with no window: %+v %v", evs, err)
	}
}
