package refusals

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/posgate/posgate/internal/wire"
)

type sink struct{ got [][]byte }

func (s *sink) Publish(_ string, p []byte) error { s.got = append(s.got, p); return nil }

// TestBookCountsEveryRefusalAndLogsOnceAWhile: each refusal is counted by its code; a code
// is logged at its first refusal and then at most once per window, saying how many were
// not logged since.
func TestBookCountsEveryRefusalAndLogsOnceAWhile(t *testing.T) {
	var out bytes.Buffer
	b := New(slog.New(slog.NewTextHandler(&out, nil)), 10*time.Second, StoreMetric)
	now := time.Unix(1000, 0)
	b.now = func() time.Time { return now }
	for range 5 {
		b.Note(slog.LevelWarn, "terminal_unknown", "dropped", "topic", "pos/S1/T9/up")
	}
	b.Note(slog.LevelWarn, "wire_terminal_mismatch", "refused")
	now = now.Add(11 * time.Second)
	b.Note(slog.LevelWarn, "terminal_unknown", "dropped")
	if got := b.Counts(); got["terminal_unknown"] != 6 || got["wire_terminal_mismatch"] != 1 {
		t.Errorf("counts %v", got)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 || !strings.Contains(lines[2], "not_logged_since=4") || strings.Contains(lines[0], "not_logged_since") {
		t.Errorf("log:\n%s", out.String())
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(b)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`# HELP posgate_store_refusals_total Refusals by their stable code: events rejected or in conflict (their acks), messages of terminals not enrolled, requests refused.
# TYPE posgate_store_refusals_total counter
posgate_store_refusals_total{code="terminal_unknown"} 6
posgate_store_refusals_total{code="wire_terminal_mismatch"} 1
`)); err != nil {
		t.Error(err)
	}
}

// TestAcksBookRefusals: the acks a store sends are booked by code (a rejection, a
// conflict), the others not, and every message goes on unchanged.
func TestAcksBookRefusals(t *testing.T) {
	var out bytes.Buffer
	b := New(slog.New(slog.NewTextHandler(&out, nil)), time.Minute, StoreMetric)
	s := &sink{}
	a := Acks{P: s, Book: b}
	msg := func(acks ...wire.Ack) []byte {
		p, err := json.Marshal(wire.Acks{V: 1, Kind: "acks", Store: "S1", Terminal: "T1", Acks: acks})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, m := range [][]byte{
		msg(wire.Ack{Seq: 1, Key: "T1:1", Status: wire.AckAccepted}),
		msg(wire.Ack{Seq: 2, Key: "T1:2", Status: wire.AckRejected, Code: "wire_terminal_mismatch"},
			wire.Ack{Seq: 3, Key: "T1:3", Status: wire.AckConflict, Code: "idempotency_conflict"},
			wire.Ack{Seq: 4, Key: "T1:4", Status: wire.AckRejected, Code: "out_of_stock", Live: true}),
	} {
		if err := a.Publish("pos/S1/T1/down", m); err != nil {
			t.Fatal(err)
		}
	}
	if got := b.Counts(); len(got) != 3 || got["wire_terminal_mismatch"] != 1 || got["idempotency_conflict"] != 1 || got["out_of_stock"] != 1 {
		t.Errorf("counts %v", got)
	}
	if len(s.got) != 2 {
		t.Errorf("%d messages sent on, want 2", len(s.got))
	}
	if !strings.Contains(out.String(), "level=WARN msg=\"event refused\" code=wire_terminal_mismatch terminal=T1 seq=2") ||
		!strings.Contains(out.String(), "level=INFO msg=\"event refused\" code=out_of_stock") {
		t.Errorf("log:\n%s", out.String())
	}
}
