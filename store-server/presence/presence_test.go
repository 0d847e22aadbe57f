package presence_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"reflect"
	"testing"
	"time"

	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/presence"
)

func TestBoard(t *testing.T) {
	heard := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	b := presence.New("S1", func() time.Time { return heard }, slog.New(slog.NewTextHandler(io.Discard, nil)))
	msg := func(terminal string, online bool, at time.Time) []byte {
		raw, err := json.Marshal(wire.Presence{V: wire.Version, Terminal: terminal, Online: online, At: at})
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	since := heard.Add(-time.Hour)

	b.Handle(wire.StatusTopic("S1", "T1"), msg("T1", true, since), false)
	b.Handle(wire.StatusTopic("S1", "T2"), msg("T2", true, since), false)
	b.Handle(wire.StatusTopic("S1", "T2"), msg("T2", false, time.Time{}), false) // T2's will
	b.Handle(wire.StatusTopic("S1", "T3"), msg("T3", true, since), false)
	b.Handle(wire.StatusTopic("S1", "T3"), nil, false) // retained message cleared

	// Each of these is dropped and changes nothing.
	b.Handle(wire.StatusTopic("S1", "T1"), msg("T9", false, time.Time{}), false) // names another terminal
	b.Handle(wire.StatusTopic("S2", "T1"), msg("T1", false, time.Time{}), false) // another store
	b.Handle(wire.UpTopic("S1", "T1"), msg("T1", false, time.Time{}), false)     // not a status topic
	b.Handle(wire.StatusTopic("S1", "T1"), []byte(`{"v":1,"terminal":"T1","online":"no"}`), false)
	b.Handle(wire.StatusTopic("S1", "T1"), []byte(`{"v":9,"terminal":"T1","online":false}`), false)
	want := map[string]presence.Seen{
		"T1": {Online: true, Since: since, Heard: heard},
		"T2": {Online: false, Heard: heard},
	}
	if got := b.All(); !reflect.DeepEqual(got, want) {
		t.Fatalf("All() = %+v, want %+v", got, want)
	}
	if n := b.Dropped(); n != 5 {
		t.Fatalf("Dropped() = %d, want 5", n)
	}
	// Backlog reports, beside the presence: kept per terminal, the latest standing.
	report := func(terminal string, events, oldestMs int64) []byte {
		raw, err := json.Marshal(wire.Backlog{V: wire.Version, Terminal: terminal, Events: events, OldestMs: oldestMs, At: since})
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	b.Handle(wire.BacklogTopic("S1", "T1"), report("T1", 40, 60_000), false)
	b.Handle(wire.BacklogTopic("S1", "T1"), report("T1", 7, 30_000), false)
	b.Handle(wire.BacklogTopic("S1", "T4"), report("T4", 3, 1_000), false) // no status heard: a report alone
	b.Handle(wire.BacklogTopic("S1", "T5"), report("T5", 0, 0), false)
	b.Handle(wire.BacklogTopic("S1", "T5"), nil, false)                // cleared
	b.Handle(wire.BacklogTopic("S1", "T1"), report("T9", 1, 1), false) // names another terminal
	b.Handle(wire.BacklogTopic("S2", "T1"), report("T1", 1, 1), false) // another store
	b.Handle(wire.BacklogTopic("S1", "T1"), []byte(`{"v":1,"terminal":"T1","events":-1,"at":"2026-11-29T09:00:00Z"}`), false)
	wantBacklog := map[string]presence.Backlog{
		"T1": {Events: 7, OldestMs: 30_000, At: since, Heard: heard},
		"T4": {Events: 3, OldestMs: 1_000, At: since, Heard: heard},
	}
	if got := b.Backlogs(); !reflect.DeepEqual(got, wantBacklog) {
		t.Fatalf("Backlogs() = %+v, want %+v", got, wantBacklog)
	}
	if got := b.All(); !reflect.DeepEqual(got, want) {
		t.Fatalf("a backlog report changed the presence: All() = %+v, want %+v", got, want)
	}
	if n := b.Dropped(); n != 8 {
		t.Fatalf("Dropped() = %d, want 8", n)
	}
	// The oldest event keeps aging from when the report was heard; an empty backlog has none.
	if got := wantBacklog["T1"].OldestAge(heard.Add(time.Minute)); got != 90*time.Second {
		t.Fatalf("OldestAge a minute later = %v, want 1m30s", got)
	}
	if got := (presence.Backlog{Heard: heard}).OldestAge(heard.Add(time.Hour)); got != 0 {
		t.Fatalf("OldestAge of an empty backlog = %v", got)
	}

	// All is a copy.
	b.All()["T1"] = presence.Seen{}
	if got := b.All()["T1"]; !got.Online {
		t.Fatalf("changing All's map changed the board: %+v", got)
	}
}

// TestRetainedReportKeepsItsAge: a retained backlog report the broker sends again (the store
// restarted, or reconnected to the broker) does not make the till's oldest event younger:
// the same report keeps the time it was first heard, and a board that never heard it ages
// it from when the till took it (never from later than now).
func TestRetainedReportKeepsItsAge(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	now := t0
	clock := func() time.Time { return now }
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	report := func(at time.Time) []byte {
		raw, err := json.Marshal(wire.Backlog{V: wire.Version, Terminal: "T1", Events: 5, OldestMs: 60_000, At: at})
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	topic := wire.BacklogTopic("S1", "T1")
	took := t0.Add(-2 * time.Second) // the till counted 2 s before the store heard it

	b := presence.New("S1", clock, log)
	b.Handle(topic, report(took), false)
	now = t0.Add(time.Hour)
	b.Handle(topic, report(took), true) // the broker again, after a reconnection
	if got := b.Backlogs()["T1"]; !got.Heard.Equal(t0) || got.OldestAge(now) != time.Hour+time.Minute {
		t.Fatalf("the same report again: heard %v, oldest %v; want %v, 1h1m", got.Heard, got.OldestAge(now), t0)
	}

	restarted := presence.New("S1", clock, log)
	restarted.Handle(topic, report(took), true)
	if got := restarted.Backlogs()["T1"]; !got.Heard.Equal(took) {
		t.Fatalf("a retained report on a new board: heard %v, want when the till took it, %v", got.Heard, took)
	}
	ahead := now.Add(time.Minute) // a till whose clock runs ahead
	restarted.Handle(topic, report(ahead), true)
	if got := restarted.Backlogs()["T1"]; !got.Heard.Equal(now) {
		t.Fatalf("a retained report taken after now: heard %v, want now %v", got.Heard, now)
	}
	restarted.Handle(topic, report(now.Add(-time.Hour)), false) // published now, however old its clock says
	if got := restarted.Backlogs()["T1"]; !got.Heard.Equal(now) {
		t.Fatalf("a report as published: heard %v, want now %v", got.Heard, now)
	}
}

// TestReportOrHeartbeat: a report stands over the till's last heartbeat unless the
// heartbeat was taken after it (a higher seq) and more than two refreshes later: reports
// have stopped. A heartbeat counting a sale in flight a minute after an unchanged report,
// or one stamped by a clock that ran ahead, leaves the report standing.
func TestReportOrHeartbeat(t *testing.T) {
	at := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	r := presence.Backlog{Events: 12, Seq: 40, At: at}
	for _, tc := range []struct {
		name   string
		seq    int64
		at     time.Time
		stands bool
	}{
		{"heartbeat before the report", 39, at.Add(-time.Minute), true},
		{"heartbeat after, a minute later (reports go on)", 41, at.Add(time.Minute), true},
		{"heartbeat after, three minutes later (reports stopped)", 45, at.Add(3 * time.Minute), false},
		{"heartbeat before, stamped an hour ahead (the clock stepped back since)", 39, at.Add(time.Hour), true},
		{"heartbeat after, stamped earlier (the clock stepped back)", 45, at.Add(-time.Hour), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := r.Supersedes(tc.seq, tc.at); got != tc.stands {
				t.Fatalf("Supersedes(%d, %v) = %v, want %v", tc.seq, tc.at, got, tc.stands)
			}
		})
	}
}
