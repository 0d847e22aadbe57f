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

	b.Handle(wire.StatusTopic("S1", "T1"), msg("T1", true, since))
	b.Handle(wire.StatusTopic("S1", "T2"), msg("T2", true, since))
	b.Handle(wire.StatusTopic("S1", "T2"), msg("T2", false, time.Time{})) // T2's will
	b.Handle(wire.StatusTopic("S1", "T3"), msg("T3", true, since))
	b.Handle(wire.StatusTopic("S1", "T3"), nil) // retained message cleared

	// Each of these is dropped and changes nothing.
	b.Handle(wire.StatusTopic("S1", "T1"), msg("T9", false, time.Time{})) // names another terminal
	b.Handle(wire.StatusTopic("S2", "T1"), msg("T1", false, time.Time{})) // another store
	b.Handle(wire.UpTopic("S1", "T1"), msg("T1", false, time.Time{}))     // not a status topic
	b.Handle(wire.StatusTopic("S1", "T1"), []byte(`{"v":1,"terminal":"T1","online":"no"}`))
	b.Handle(wire.StatusTopic("S1", "T1"), []byte(`{"v":9,"terminal":"T1","online":false}`))

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
	b.Handle(wire.BacklogTopic("S1", "T1"), report("T1", 40, 60_000))
	b.Handle(wire.BacklogTopic("S1", "T1"), report("T1", 7, 30_000))
	b.Handle(wire.BacklogTopic("S1", "T4"), report("T4", 3, 1_000)) // no status heard: a report alone
	b.Handle(wire.BacklogTopic("S1", "T5"), report("T5", 0, 0))
	b.Handle(wire.BacklogTopic("S1", "T5"), nil)                // cleared
	b.Handle(wire.BacklogTopic("S1", "T1"), report("T9", 1, 1)) // names another terminal
	b.Handle(wire.BacklogTopic("S2", "T1"), report("T1", 1, 1)) // another store
	b.Handle(wire.BacklogTopic("S1", "T1"), []byte(`{"v":1,"terminal":"T1","events":-1,"at":"2026-11-29T09:00:00Z"}`))
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
