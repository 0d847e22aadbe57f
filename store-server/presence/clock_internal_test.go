package presence

import (
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/posgate/posgate/internal/wire"
)

// TestClockMapBounded: the board kept a clock for every terminal id it ever heard a reading
// from, for as long as the store-server ran. A clock with no reading in the window is
// unknown and is forgotten when a new terminal is heard, whether or not anyone asks for the
// clocks (the API, a scrape).
func TestClockMapBounded(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	b := New("S1", func() time.Time { return now }, slog.New(slog.NewTextHandler(io.Discard, nil)))
	for i := range 1000 {
		b.reading(fmt.Sprintf("T%04d", i), now, now, true)
	}
	now = now.Add(SkewWindow + time.Second)
	b.reading("T9999", now, now, true)
	b.mu.Lock()
	n := len(b.clocks)
	b.mu.Unlock()
	if n != 1 {
		t.Fatalf("%d clocks kept, want 1: those quiet for longer than the window are unknown", n)
	}
}

// TestClockKeptOverAnEarlierHeard: two tills' messages are read on their own goroutines,
// each taking the time it heard its message before the board's lock. T4's first message,
// heard before T3's but read after it, must not forget T3's clock: judged at T4's time,
// T3's reading was one from the future, and T3 showed no clock until its next message.
func TestClockKeptOverAnEarlierHeard(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	now := t0.Add(20 * time.Millisecond)
	b := New("S1", func() time.Time { return now }, slog.New(slog.NewTextHandler(io.Discard, nil)))
	b.reading("T3", t0.Add(10*time.Millisecond), t0.Add(10*time.Millisecond), true)
	b.reading("T4", t0.Add(-time.Hour), t0, false) // heard first, read second
	clocks := b.Clocks()
	if _, ok := clocks["T3"]; !ok {
		t.Errorf("T3's clock forgotten by T4's first reading: %+v", clocks)
	}
	if _, ok := clocks["T4"]; !ok {
		t.Errorf("T4's clock not kept: %+v", clocks)
	}
}

// TestClockReadingAllocs: the clock is read on the broker's goroutine for every up message:
// a message within a second of the terminal's last reading, and a reading of a terminal the
// board knows, allocate nothing.
func TestClockReadingAllocs(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	b := New("S1", func() time.Time { return now }, slog.New(slog.NewTextHandler(io.Discard, nil)))
	topic := wire.UpTopic("S1", "T1")
	msg := []byte(`{"v":1,"kind":"heartbeat","store":"S1","terminal":"T1","seq":1,"at":"2026-11-30T12:00:00Z","offline":true,"payload":{"backlog":0,"catalog_version":1}}`)
	b.HandleUp(topic, msg)
	if _, ok := b.Clocks()["T1"]; !ok {
		t.Fatal("the heartbeat read nothing")
	}
	if n := testing.AllocsPerRun(1000, func() { b.HandleUp(topic, msg) }); n != 0 {
		t.Errorf("a message within a second of the last reading: %v allocations", n)
	}
	if n := testing.AllocsPerRun(1000, func() {
		now = now.Add(time.Second)
		b.reading("T1", now.Add(-time.Millisecond), now, true)
	}); n != 0 {
		t.Errorf("a reading of a known terminal: %v allocations", n)
	}
}
