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
	// All is a copy.
	b.All()["T1"] = presence.Seen{}
	if got := b.All()["T1"]; !got.Online {
		t.Fatalf("changing All's map changed the board: %+v", got)
	}
}
