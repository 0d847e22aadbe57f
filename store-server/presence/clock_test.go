package presence_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/presence"
)

// logBuffer is a log destination that tests read while the board writes to it.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// count returns how many lines hold s.
func (l *logBuffer) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.b.String(), s)
}

// clockFixture is a board on a clock the test moves, and the messages a till sends.
type clockFixture struct {
	t    *testing.T
	now  time.Time
	b    *presence.Board
	logs *logBuffer
	seq  int64
}

func newClockFixture(t *testing.T) *clockFixture {
	f := &clockFixture{t: t, now: time.Date(2026, 11, 30, 23, 50, 0, 0, time.UTC), logs: &logBuffer{}}
	f.b = presence.New("S1", func() time.Time { return f.now }, slog.New(slog.NewTextHandler(f.logs, nil)))
	return f
}

func (f *clockFixture) marshal(v any) []byte {
	f.t.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		f.t.Fatal(err)
	}
	return raw
}

// event is an up message of one event of terminal stamped at.
func (f *clockFixture) event(terminal string, kind wire.Kind, at time.Time, offline bool, payload any) []byte {
	f.seq++
	env := wire.NewEnvelope(kind, "S1", terminal, f.seq, at, f.marshal(payload))
	env.Offline = offline
	return f.marshal(env)
}

func (f *clockFixture) sale(terminal string, at time.Time, offline bool) []byte {
	return f.event(terminal, wire.KindSale, at, offline, wire.SalePayload{SaleID: "s", OpenedAt: at, Total: 350,
		Lines:    []wire.Line{{Line: 1, SKU: "A1", Qty: 1, UnitPrice: 350, Amount: 350}},
		Payments: []wire.Payment{{Method: wire.MethodCash, Amount: 350}}})
}

func (f *clockFixture) heartbeat(terminal string, at time.Time, backlog int64) []byte {
	return f.event(terminal, wire.KindHeartbeat, at, true, wire.HeartbeatPayload{Backlog: backlog, CatalogVersion: 1})
}

func (f *clockFixture) report(terminal string, at time.Time) []byte {
	return f.marshal(wire.Backlog{V: wire.Version, Terminal: terminal, At: at})
}

func (f *clockFixture) online(terminal string, at time.Time) []byte {
	return f.marshal(wire.Presence{V: wire.Version, Terminal: terminal, Online: true, At: at})
}

// want checks terminal's clock: its skew, and whether it is off.
func (f *clockFixture) want(step, terminal string, skew time.Duration, off bool) {
	f.t.Helper()
	c, ok := f.b.Clocks()[terminal]
	if !ok || c.Skew != skew || c.Off != off || c.Unconfirmed {
		f.t.Fatalf("%s: %s's clock %+v (known %v), want skew %v off %v", step, terminal, c, ok, skew, off)
	}
}

// unconfirmed checks that terminal's clock reads skew, behind past the limit, from
// readings that do not span the confirmation time yet: not off.
func (f *clockFixture) unconfirmed(step, terminal string, skew time.Duration) {
	f.t.Helper()
	c, ok := f.b.Clocks()[terminal]
	if !ok || c.Skew != skew || c.Off || !c.Unconfirmed {
		f.t.Fatalf("%s: %s's clock %+v (known %v), want skew %v unconfirmed, not off", step, terminal, c, ok, skew)
	}
}

// TestClockFromReports: the store reads a till's clock from the backlog reports and online
// messages the till publishes as it stamps them, never from a retained copy the broker
// hands over later; it says the clock is off past the limit, logs that once, and once when
// it comes back.
func TestClockFromReports(t *testing.T) {
	f := newClockFixture(t)
	if len(f.b.Clocks()) != 0 || f.b.SkewLimit() != presence.DefaultSkewLimit {
		t.Fatalf("a new board: clocks %v, limit %v", f.b.Clocks(), f.b.SkewLimit())
	}
	day := 24 * time.Hour
	// A retained report (the store subscribing) and a retained online message: the broker
	// kept them, their stamps say nothing of the till's clock now.
	f.b.Handle(wire.BacklogTopic("S1", "T1"), f.report("T1", f.now.Add(-day)), true)
	f.b.Handle(wire.StatusTopic("S1", "T1"), f.online("T1", f.now.Add(-day)), true)
	if _, ok := f.b.Clocks()["T1"]; ok {
		t.Fatalf("retained messages read as the clock: %+v", f.b.Clocks())
	}

	// The till's clock is a day behind (a dead battery at 23:50 says it is the day before).
	// One message says so; it may be one held on its way, so the board waits for readings
	// that span presence.DefaultBehindConfirm before it says the clock is off.
	f.b.Handle(wire.StatusTopic("S1", "T1"), f.online("T1", f.now.Add(-day)), false)
	f.unconfirmed("online message", "T1", -day)
	f.now = f.now.Add(time.Minute)
	f.b.Handle(wire.BacklogTopic("S1", "T1"), f.report("T1", f.now.Add(-day+40*time.Millisecond)), false)
	f.want("report", "T1", -day+40*time.Millisecond, true)
	if n := f.logs.count("clock is off"); n != 1 {
		t.Fatalf("%d log lines for the clock going off, want 1:\n%s", n, f.logs.b.String())
	}
	if c := f.b.Clocks()["T1"]; !c.Checked.Equal(f.now) {
		t.Fatalf("checked %v, want when the report was heard %v", c.Checked, f.now)
	}

	// NTP sets it: the next report is right, and outweighs the day-old readings at once.
	f.now = f.now.Add(time.Minute)
	f.b.Handle(wire.BacklogTopic("S1", "T1"), f.report("T1", f.now.Add(-30*time.Millisecond)), false)
	f.want("set right", "T1", -30*time.Millisecond, false)
	if n := f.logs.count("back within the limit"); n != 1 {
		t.Fatalf("%d log lines for the clock coming back, want 1:\n%s", n, f.logs.b.String())
	}

	// A report that took long on its way reads lower than it is; within the window the
	// prompt one stands.
	f.now = f.now.Add(time.Minute)
	f.b.Handle(wire.BacklogTopic("S1", "T1"), f.report("T1", f.now.Add(-10*time.Minute)), false)
	f.want("a late report", "T1", -30*time.Millisecond, false)

	// Within the limit either way, whatever the sign.
	f.b.Handle(wire.BacklogTopic("S1", "T2"), f.report("T2", f.now.Add(90*time.Second)), false)
	f.want("90 s ahead", "T2", 90*time.Second, false)
	f.b.Handle(wire.BacklogTopic("S1", "T2"), f.report("T2", f.now.Add(3*time.Minute)), false)
	f.want("3 min ahead", "T2", 3*time.Minute, true)
	if n := f.logs.count("clock is off"); n != 2 {
		t.Fatalf("%d log lines for clocks going off, want 2 (T1, T2)", n)
	}

	// A till whose clock was ahead and is set right: the window's high readings stand until
	// they leave it.
	f.now = f.now.Add(time.Minute)
	f.b.Handle(wire.BacklogTopic("S1", "T2"), f.report("T2", f.now), false)
	f.want("set right, within the window", "T2", 3*time.Minute, true)
	f.now = f.now.Add(presence.SkewWindow)
	f.b.Handle(wire.BacklogTopic("S1", "T2"), f.report("T2", f.now), false)
	f.want("set right, past the window", "T2", 0, false)

	// Messages that are dropped read nothing: another terminal named, another store.
	f.b.Handle(wire.BacklogTopic("S1", "T3"), f.report("T9", f.now), false)
	f.b.Handle(wire.BacklogTopic("S2", "T3"), f.report("T3", f.now), false)
	if _, ok := f.b.Clocks()["T3"]; ok {
		t.Fatalf("a dropped report read as T3's clock")
	}
}

// TestClockFromUpMessages: of the events a till sends, only those it sent as it stamped
// them read its clock: a live event, and a heartbeat with nothing queued ahead of it. An
// offline event, a batch and a heartbeat queued behind others are stamped when they were
// made, maybe hours before they arrive, and read nothing.
func TestClockFromUpMessages(t *testing.T) {
	f := newClockFixture(t)
	up := wire.UpTopic("S1", "T1")
	hour := time.Hour
	// None of these reads the clock.
	batch, err := wire.MarshalBatch("S1", "T1", []json.RawMessage{f.sale("T1", f.now.Add(-hour), true), f.sale("T1", f.now.Add(-hour), true)})
	if err != nil {
		t.Fatal(err)
	}
	for name, msg := range map[string][]byte{
		"offline sale":             f.sale("T1", f.now.Add(-hour), true),
		"batch":                    batch,
		"heartbeat behind a queue": f.heartbeat("T1", f.now.Add(-hour), 3),
		"live sale naming T2":      f.sale("T2", f.now.Add(-hour), false),
		"not JSON":                 []byte("{"),
		"another version":          bytes.Replace(f.sale("T1", f.now.Add(-hour), false), []byte(`"v":1`), []byte(`"v":2`), 1),
	} {
		f.b.HandleUp(up, msg)
		if c, ok := f.b.Clocks()["T1"]; ok {
			t.Fatalf("%s read as T1's clock: %+v", name, c)
		}
	}
	f.b.HandleUp(wire.UpTopic("S2", "T1"), f.sale("T1", f.now.Add(-hour), false))
	f.b.HandleUp(wire.StatusTopic("S1", "T1"), f.sale("T1", f.now.Add(-hour), false))
	if len(f.b.Clocks()) != 0 {
		t.Fatalf("another store's or topic's message read: %+v", f.b.Clocks())
	}

	// A live sale: the till's clock is an hour behind.
	f.b.HandleUp(up, f.sale("T1", f.now.Add(-hour), false))
	f.unconfirmed("live sale", "T1", -hour)
	// The next second's messages are not read (one reading a second is enough).
	f.now = f.now.Add(500 * time.Millisecond)
	f.b.HandleUp(up, f.sale("T1", f.now, false))
	f.unconfirmed("half a second later", "T1", -hour)
	// A heartbeat with nothing ahead of it is: set right.
	f.now = f.now.Add(time.Second)
	f.b.HandleUp(up, f.heartbeat("T1", f.now.Add(-5*time.Millisecond), 0))
	f.want("heartbeat", "T1", -5*time.Millisecond, false)
}

// TestClockWithoutLimit: with the limit at 0 the store reads clocks and never says one is off.
func TestClockWithoutLimit(t *testing.T) {
	f := newClockFixture(t)
	f.b.SetSkewLimit(0)
	f.b.Handle(wire.BacklogTopic("S1", "T1"), f.report("T1", f.now.Add(-48*time.Hour)), false)
	f.want("two days behind, no limit", "T1", -48*time.Hour, false)
	if n := f.logs.count("clock"); n != 0 {
		t.Fatalf("logged without a limit:\n%s", f.logs.b.String())
	}
}
