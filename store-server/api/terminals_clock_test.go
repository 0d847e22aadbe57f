package api_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/api"
	"github.com/posgate/posgate/store-server/catalog"
	"github.com/posgate/posgate/store-server/client"
	"github.com/posgate/posgate/store-server/ledger"
	"github.com/posgate/posgate/store-server/presence"
)

// terminalsFixture is GET /v1/terminals of a store in Shanghai whose server's clock runs in
// UTC (its local zone), with a presence board on a clock the test moves. A real ledger.
type terminalsFixture struct {
	t     *testing.T
	now   time.Time
	board *presence.Board
	srv   http.Handler
}

func newTerminalsFixture(t *testing.T) *terminalsFixture {
	t.Helper()
	shanghai, err := time.LoadLocation("Asia/Shanghai")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	led, err := ledger.Open(context.Background(), filepath.Join(dir, "ledger.db"), "S1", shanghai)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { led.Close() })
	cat, err := catalog.Open(catalog.DefaultPath(dir), "S1")
	if err != nil {
		t.Fatal(err)
	}
	f := &terminalsFixture{t: t, now: time.Date(2026, 11, 30, 15, 50, 0, 0, time.UTC)}
	now := func() time.Time { return f.now }
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	f.board = presence.New("S1", now, log)
	f.srv = (&api.Server{Token: "tok", Store: "S1", Ledger: led, Catalog: cat, Presence: f.board, Now: now, Logger: log}).Handler()
	return f
}

// get returns the answer, decoded and as sent.
func (f *terminalsFixture) get() (client.TerminalsAnswer, map[string]any) {
	f.t.Helper()
	req := httptest.NewRequest("GET", "/v1/terminals", nil)
	req.Header.Set("Authorization", "Bearer tok")
	rec := httptest.NewRecorder()
	f.srv.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		f.t.Fatalf("GET /v1/terminals: %d %s", rec.Code, rec.Body)
	}
	var a client.TerminalsAnswer
	var raw map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &a); err != nil {
		f.t.Fatal(err)
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &raw); err != nil {
		f.t.Fatal(err)
	}
	return a, raw
}

func (f *terminalsFixture) row(a client.TerminalsAnswer, terminal string) client.TerminalRow {
	f.t.Helper()
	for _, r := range a.Terminals {
		if r.Terminal == terminal {
			return r
		}
	}
	f.t.Fatalf("no row for %s: %+v", terminal, a.Terminals)
	return client.TerminalRow{}
}

func (f *terminalsFixture) report(terminal string, at time.Time) {
	raw, _ := json.Marshal(wire.Backlog{V: wire.Version, Terminal: terminal, At: at})
	f.board.Handle(wire.BacklogTopic("S1", terminal), raw, false)
}

// TestTerminalsTimesInStoreZone: the presence and clock times of GET /v1/terminals
// (online_since, status_heard, clock_checked, the backlog report's) came out in the server's
// local zone, the ledger's (last_received) in the store's (--tz): a back office reading the
// answer saw two wall clocks. All are the store's now.
func TestTerminalsTimesInStoreZone(t *testing.T) {
	f := newTerminalsFixture(t)
	online, _ := json.Marshal(wire.Presence{V: wire.Version, Terminal: "T1", Online: true, At: f.now.Add(-time.Second)})
	f.board.Handle(wire.StatusTopic("S1", "T1"), online, false)
	f.report("T1", f.now)
	_, raw := f.get()
	row := raw["terminals"].([]any)[0].(map[string]any)
	backlog := row["backlog"].(map[string]any)
	for name, v := range map[string]any{"now": raw["now"], "online_since": row["online_since"], "status_heard": row["status_heard"],
		"clock_checked": row["clock_checked"], "backlog.at": backlog["at"], "backlog.heard": backlog["heard"]} {
		if s, _ := v.(string); !strings.HasSuffix(s, "+08:00") {
			t.Errorf("%s is %v, want the store's zone (+08:00)", name, v)
		}
	}
}

// TestTerminalsClockGoneQuiet: a till heard from no more keeps no clock in the answer once
// its last reading is older than the window: its figure and its clock_off stood until the
// store-server restarted.
func TestTerminalsClockGoneQuiet(t *testing.T) {
	f := newTerminalsFixture(t)
	f.report("T1", f.now.Add(3*time.Minute))
	a, _ := f.get()
	if r := f.row(a, "T1"); r.ClockSkewMs == nil || *r.ClockSkewMs != 180_000 || !r.ClockOff {
		t.Fatalf("T1 3 min ahead: %+v", r)
	}
	f.now = f.now.Add(presence.SkewWindow + time.Second)
	a, _ = f.get()
	for _, r := range a.Terminals {
		if r.Terminal == "T1" && (r.ClockSkewMs != nil || r.ClockOff || !r.ClockChecked.IsZero()) {
			t.Fatalf("T1 quiet for longer than the window: clock_skew_ms %v clock_off %v clock_checked %v, want none",
				*r.ClockSkewMs, r.ClockOff, r.ClockChecked)
		}
	}
}

// TestTerminalsClockUnconfirmed: a till whose only reading says it is behind past the limit
// (maybe a message held on its way) has no figure and is not off, but is marked
// clock_unconfirmed; once its readings span --clock-behind-confirm it is off.
func TestTerminalsClockUnconfirmed(t *testing.T) {
	f := newTerminalsFixture(t)
	f.report("T1", f.now.Add(-time.Hour))
	a, _ := f.get()
	if r := f.row(a, "T1"); r.ClockSkewMs != nil || r.ClockOff || !r.ClockUnconfirmed || r.ClockChecked.IsZero() {
		t.Fatalf("T1 an hour behind on one message: %+v", r)
	}
	if a.ClockBehindConfirmMs != presence.DefaultBehindConfirm.Milliseconds() {
		t.Fatalf("clock_behind_confirm_ms %d", a.ClockBehindConfirmMs)
	}
	f.now = f.now.Add(presence.DefaultBehindConfirm)
	f.report("T1", f.now.Add(-time.Hour))
	a, _ = f.get()
	if r := f.row(a, "T1"); r.ClockSkewMs == nil || *r.ClockSkewMs != -3_600_000 || !r.ClockOff || r.ClockUnconfirmed {
		t.Fatalf("T1 an hour behind over 30 s: %+v", r)
	}
}
