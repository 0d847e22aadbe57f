package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	dto "github.com/prometheus/client_model/go"

	"github.com/posgate/posgate/internal/metricstest"
	"github.com/posgate/posgate/internal/stack"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/client"
)

// TestTerminalsViewAndMetrics: GET /v1/terminals shows each terminal's presence from its
// status topic (the online message an agent publishes, the last will the broker publishes
// when the connection drops), the last event the ledger recorded and the last backlog the
// terminal reported; GET /metrics says the same and counts what ingest did. On a real
// mosquitto, Redis and ledger.
func TestTerminalsViewAndMetrics(t *testing.T) {
	t.Parallel()
	srv := biRunServer(t)
	srv.openStore(t)
	r := biStartRun(t, srv) // T_PROBE: one heartbeat, no presence

	// T1 connects as an agent does: its will says offline, then it says online (retained).
	since := time.Now().Add(-time.Second).Truncate(time.Millisecond)
	t1 := dialTerminal(t, srv.Broker, "T1")
	online, _ := json.Marshal(wire.Presence{V: wire.Version, Terminal: "T1", Online: true, At: since})
	if tok := t1.c.Publish(wire.StatusTopic(biStoreID, "T1"), 1, true, online); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("publish presence: %v", tok.Error())
	}
	hb, hbWant := r.heartbeat(t, "T1", 1, 3)
	r.step(t, "T1 heartbeat", "T1", hb, hbWant)
	sale, saleWant := r.good(t, "T1", 2)
	r.step(t, "T1 sale", "T1", sale, saleWant)

	row := func(a client.TerminalsAnswer, terminal string) client.TerminalRow {
		t.Helper()
		for _, row := range a.Terminals {
			if row.Terminal == terminal {
				return row
			}
		}
		t.Fatalf("no row for %s in %+v", terminal, a.Terminals)
		return client.TerminalRow{}
	}
	// waitFor polls until cond holds for the answer.
	waitFor := func(what string, cond func(client.TerminalsAnswer) bool) client.TerminalsAnswer {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			a := must[client.TerminalsAnswer](t, "terminals")(srv.manager().Terminals(context.Background()))
			if cond(a) {
				return a
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 10s; last answer %+v", what, a)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	isOnline := func(row client.TerminalRow, want bool) bool { return row.Online != nil && *row.Online == want }

	a := waitFor("T1 online", func(a client.TerminalsAnswer) bool { return isOnline(row(a, "T1"), true) })
	got := row(a, "T1")
	switch {
	case got.LastSeq != 2 || got.LastKind != wire.KindSale || got.LastStatus != wire.AckAccepted || !got.LastAt.Equal(r.at):
		t.Errorf("T1's last event: %+v", got.TerminalSeen)
	case got.Heartbeat == nil || got.Heartbeat.Seq != 1 || got.Heartbeat.Backlog != 3 || got.Heartbeat.CatalogVersion != 1:
		t.Errorf("T1's heartbeat: %+v", got.Heartbeat)
	case !got.OnlineSince.Equal(since) || got.StatusHeard.IsZero():
		t.Errorf("T1's presence: since %v heard %v, want since %v", got.OnlineSince, got.StatusHeard, since)
	case got.CatalogBehind || a.CatalogVersion != 1:
		t.Errorf("catalog version %d, T1 behind %v", a.CatalogVersion, got.CatalogBehind)
	case got.LastReceived.Before(since) || got.LastReceived.After(a.Now):
		t.Errorf("T1's last event received at %v, not between %v and %v", got.LastReceived, since, a.Now)
	}
	if probe := row(a, "T_PROBE"); probe.Online != nil || probe.LastKind != wire.KindHeartbeat || probe.Heartbeat == nil {
		t.Errorf("T_PROBE (events, no presence): %+v", probe)
	}
	// T_PROBE's heartbeat counted nothing queued ahead, so it read the till's clock: its
	// stamp, the run's time, is a minute before the store heard it. T1's heartbeat and sale,
	// queued behind others and sent offline, did not.
	if probe := row(a, "T_PROBE"); probe.ClockSkewMs == nil || *probe.ClockSkewMs > -60_000 ||
		*probe.ClockSkewMs < -90_000 || probe.ClockOff {
		t.Errorf("T_PROBE's clock: %v ms, off %v; want about a minute behind, within the limit",
			biDeref(probe.ClockSkewMs), probe.ClockOff)
	}

	t.Run("metrics", func(t *testing.T) {
		var fams metricFamilies
		value := func(name string, labels ...string) (float64, bool) { return fams.value(name, labels...) }
		// A status message on T9's topic that speaks for T1 is dropped and counted.
		forged, _ := json.Marshal(wire.Presence{V: wire.Version, Terminal: "T1", Online: false})
		if tok := t1.c.Publish(wire.StatusTopic(biStoreID, "T9"), 1, false, forged); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("publish: %v", tok.Error())
		}
		// An up message is observed once its acks are handed to the broker, which may be
		// just after the terminal has them: T1's sale is the third message answered.
		var mode client.ModeAnswer
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			mode = must[client.ModeAnswer](t, "mode")(srv.manager().Mode(context.Background()))
			fams = srv.scrape(t)
			acked, _ := value("posgate_store_ack_seconds")
			dropped, _ := value("posgate_store_status_messages_dropped_total")
			if acked >= float64(mode.Stats.Messages) && dropped >= 1 || time.Now().After(deadline) {
				break
			}
		}
		for _, c := range []struct {
			name   string
			labels []string
			want   float64
		}{
			{"posgate_store_accepted_total", nil, float64(mode.Stats.Accepted)},
			{"posgate_store_events_total", nil, float64(mode.Stats.Events)},
			{"posgate_store_gate_mode", []string{"mode", "redis"}, 1},
			{"posgate_store_gate_mode", []string{"mode", "degraded"}, 0},
			{"posgate_store_terminal_online", []string{"terminal", "T1"}, 1},
			{"posgate_store_status_messages_dropped_total", nil, 1},
			{"posgate_store_terminal_backlog_events", []string{"terminal", "T1"}, 3},
			{"posgate_store_ledger_commit_records", nil, float64(mode.Stats.Groups)},
		} {
			if got, ok := value(c.name, c.labels...); !ok || got != c.want {
				t.Errorf("%s%v = %v (present %v), want %v", c.name, c.labels, got, ok, c.want)
			}
		}
		// The oldest unsent event's age as of the heartbeat (0.03 s), and aging since.
		if got, ok := value("posgate_store_terminal_backlog_oldest_seconds", "terminal", "T1"); !ok || got < 0.03 || got > 60 {
			t.Errorf("terminal_backlog_oldest_seconds = %v (present %v), want 0.03 and the time since the heartbeat", got, ok)
		}
		// Every up message was answered and observed (the probe's, T1's two).
		if got, ok := value("posgate_store_ack_seconds"); !ok || got != float64(mode.Stats.Messages) || got < 3 {
			t.Errorf("posgate_store_ack_seconds count %v (present %v), want the %d messages", got, ok, mode.Stats.Messages)
		}
		if got, ok := value("posgate_store_gate_call_seconds"); !ok || got < 1 {
			t.Errorf("posgate_store_gate_call_seconds count %v (present %v), want ≥ 1", got, ok)
		}
		if _, ok := value("go_goroutines"); !ok {
			t.Error("no Go runtime metrics")
		}
	})

	t.Run("dashboard in a browser", func(t *testing.T) {
		// The run's business date, which is not today for a minute after the store's midnight.
		dom := browse(t, srv.Base+"/#token="+biToken+"&date="+r.date)
		for _, want := range []string{
			`<span id="mode" class="badge redis">redis</span>`,
			`<span id="store">store S1 · catalog v1</span>`,
			`<td>T1</td><td class="good">online</td><td>sale #2, `,
			`<td class="num warn">3</td>`, // T1's backlog
			`<td>T_PROBE</td><td class="muted">unknown</td>`,
			`<b>1</b>sales</div>`,
			`<td>A1</td><td class="num">`,
		} {
			if !strings.Contains(dom, want) {
				t.Errorf("the dashboard does not show %s", want)
			}
		}
		if strings.Contains(dom, "Could not") || strings.Contains(dom, `id="signin" hidden=""`) == false {
			t.Errorf("the dashboard reports a problem or asks for the token")
		}
		if t.Failed() {
			t.Logf("page:\n%s", dom)
		}
		// Another business day: its figures, not today's.
		if dom := browse(t, srv.Base+"/#token="+biToken+"&date=2025-01-02"); !strings.Contains(dom, `<b>0</b>sales</div>`) ||
			!strings.Contains(dom, `<td>T1</td><td class="good">online</td>`) {
			t.Errorf("the dashboard on 2025-01-02:\n%s", dom)
		}
	})

	// A newer catalog: T1's last heartbeat reported version 1.
	imp := srv.importCSV(t, []byte(biCatalogCSV+"E5,Eggs,9.90\n"))
	a = waitFor("T1 behind", func(a client.TerminalsAnswer) bool { return row(a, "T1").CatalogBehind })
	if a.CatalogVersion != imp.Version {
		t.Errorf("catalog version %d, want %d", a.CatalogVersion, imp.Version)
	}

	// A terminal that connected but has sent nothing yet is listed from its presence.
	t2 := dialTerminal(t, srv.Broker, "T2")
	online, _ = json.Marshal(wire.Presence{V: wire.Version, Terminal: "T2", Online: true, At: since})
	if tok := t2.c.Publish(wire.StatusTopic(biStoreID, "T2"), 1, true, online); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("publish presence: %v", tok.Error())
	}
	a = waitFor("T2 listed", func(a client.TerminalsAnswer) bool {
		for _, row := range a.Terminals {
			if row.Terminal == "T2" {
				return isOnline(row, true)
			}
		}
		return false
	})
	if got := row(a, "T2"); got.LastSeq != 0 || got.Heartbeat != nil {
		t.Errorf("T2 (presence only): %+v", got)
	}

	// T2 reports what it holds beside its events: the view and the dashboard show that,
	// aged since the store heard it.
	report, _ := json.Marshal(wire.Backlog{V: wire.Version, Terminal: "T2", Events: 7, OldestMs: 90_000, At: time.Now()})
	if tok := t2.c.Publish(wire.BacklogTopic(biStoreID, "T2"), 0, true, report); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("publish backlog: %v", tok.Error())
	}
	a = waitFor("T2's backlog", func(a client.TerminalsAnswer) bool { return row(a, "T2").Backlog != nil })
	if b := row(a, "T2").Backlog; b.Events != 7 || b.OldestMs != 90_000 || b.OldestNowMs < 90_000 || b.Heard.IsZero() {
		t.Errorf("T2's backlog: %+v", b)
	}
	if c := row(a, "T2").ClockSkewMs; c == nil || *c > 5_000 || *c < -5_000 {
		t.Errorf("T2's clock, from the report it stamped as it sent it: %v ms, want about 0", biDeref(c))
	}
	if dom := browse(t, srv.Base+"/#token="+biToken+"&date="+r.date); !strings.Contains(dom,
		`<td>T2</td><td class="good">online</td><td>—</td><td class="num warn">7</td><td>2 min (`) {
		t.Errorf("the dashboard does not show T2's 7 events, the oldest 2 min old:\n%s", dom)
	}

	// T1's connection drops without a DISCONNECT: the broker publishes its will.
	t1.drop()
	waitFor("T1 offline", func(a client.TerminalsAnswer) bool { return isOnline(row(a, "T1"), false) })
}

// TestTillClockSkew: the store checks each till's clock against its own, from the messages
// the till sends as it stamps them, on its embedded broker: GET /v1/terminals gives the skew
// and flags a till past --clock-skew-warn, /metrics has it per terminal and the dashboard
// warns. An offline event, stamped when the sale happened and sent later, reads nothing.
// A till that reads behind is flagged once its readings span --clock-behind-confirm (1 s
// here): until then they may be messages held on their way, and it is "checking".
// The business dates stay the tills' (invariant 7): the store only reports.
func TestTillClockSkew(t *testing.T) {
	t.Parallel()
	s := stack.Run(t, stack.Options{Redis: true})
	addrs, _ := startMain(t, "--store", biStoreID, "--data-dir", t.TempDir(), "--redis-addr", s.Redis[0].Addr(),
		"--mqtt-listen", "127.0.0.1:0", "--api-listen", "127.0.0.1:0", "--api-token-file", secretFile(t, biToken), "--tz", biTZ,
		"--clock-behind-confirm", "1s", "--log-level", "error")
	srv := &biServer{Base: "http://" + addrs.API, Broker: addrs.Broker, Client: &http.Client{Timeout: 10 * time.Second}}
	srv.waitMode(t, client.ModeRedis, 20*time.Second)
	const day = 24 * time.Hour
	publish := func(tt *testTerminal, topic string, qos byte, v any) {
		t.Helper()
		raw, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if tok := tt.c.Publish(topic, qos, false, raw); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("publish on %s: %v", topic, tok.Error())
		}
	}
	event := func(kind wire.Kind, terminal string, seq int64, at time.Time, offline bool, payload any) wire.Envelope {
		t.Helper()
		raw, err := json.Marshal(payload)
		if err != nil {
			t.Fatal(err)
		}
		env := wire.NewEnvelope(kind, biStoreID, terminal, seq, at, raw)
		env.Offline = offline
		return env
	}
	waitFor := func(what string, cond func(map[string]client.TerminalRow) bool) client.TerminalsAnswer {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			a := must[client.TerminalsAnswer](t, "terminals")(srv.manager().Terminals(context.Background()))
			rows := map[string]client.TerminalRow{}
			for _, r := range a.Terminals {
				rows[r.Terminal] = r
			}
			if cond(rows) {
				return a
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 10s; last answer %+v", what, a)
			}
		}
	}
	near := func(r client.TerminalRow, skew time.Duration) bool {
		return r.ClockSkewMs != nil && time.Duration(*r.ClockSkewMs)*time.Millisecond > skew-5*time.Second &&
			time.Duration(*r.ClockSkewMs)*time.Millisecond < skew+5*time.Second
	}

	// T1's clock is a day behind (a dead clock battery): it says so in its backlog report,
	// and again in the next. One report is not enough.
	t1 := dialTerminal(t, srv.Broker, "T1")
	publish(t1, wire.BacklogTopic(biStoreID, "T1"), 0, wire.Backlog{V: wire.Version, Terminal: "T1", At: time.Now().Add(-day)})
	a := waitFor("T1's first report", func(rows map[string]client.TerminalRow) bool { return rows["T1"].ClockUnconfirmed })
	for _, r := range a.Terminals {
		if r.Terminal == "T1" && (r.ClockSkewMs != nil || r.ClockOff || r.ClockChecked.IsZero()) {
			t.Fatalf("T1 on one report a day behind: %+v, want unconfirmed, no figure, not off", r)
		}
	}
	time.Sleep(1100 * time.Millisecond)
	publish(t1, wire.BacklogTopic(biStoreID, "T1"), 0, wire.Backlog{V: wire.Version, Terminal: "T1", At: time.Now().Add(-day)})
	// T2 sells live, its clock 3 minutes ahead.
	t2 := dialTerminal(t, srv.Broker, "T2")
	publish(t2, wire.UpTopic(biStoreID, "T2"), 1, event(wire.KindSale, "T2", 1, time.Now().Add(3*time.Minute), false,
		biGoodSale("T2-1", 0)))
	// T3 sends a sale it made offline yesterday, then a heartbeat with nothing queued: its
	// clock is right.
	t3 := dialTerminal(t, srv.Broker, "T3")
	publish(t3, wire.UpTopic(biStoreID, "T3"), 1, event(wire.KindSale, "T3", 1, time.Now().Add(-day), true,
		biGoodSale("T3-1", 0)))
	a = waitFor("T3's offline sale in the ledger", func(rows map[string]client.TerminalRow) bool { return rows["T3"].LastSeq == 1 })
	for _, r := range a.Terminals {
		if r.Terminal == "T3" && (r.ClockSkewMs != nil || r.ClockOff) {
			t.Fatalf("an offline sale of yesterday read as T3's clock: %+v", r)
		}
	}
	publish(t3, wire.UpTopic(biStoreID, "T3"), 1, event(wire.KindHeartbeat, "T3", 2, time.Now(), true,
		wire.HeartbeatPayload{CatalogVersion: 1}))

	// T4 reads a day behind on one report: "checking", whatever the dashboard's refreshes.
	t4 := dialTerminal(t, srv.Broker, "T4")
	publish(t4, wire.BacklogTopic(biStoreID, "T4"), 0, wire.Backlog{V: wire.Version, Terminal: "T4", At: time.Now().Add(-day)})

	a = waitFor("the clocks", func(rows map[string]client.TerminalRow) bool {
		return rows["T1"].ClockSkewMs != nil && rows["T2"].ClockSkewMs != nil && rows["T3"].ClockSkewMs != nil &&
			rows["T4"].ClockUnconfirmed
	})
	for _, r := range a.Terminals {
		var skew time.Duration
		var off bool
		switch r.Terminal {
		case "T4":
			continue
		case "T1":
			skew, off = -day, true
		case "T2":
			skew, off = 3*time.Minute, true
		case "T3":
			skew, off = 0, false
		}
		if !near(r, skew) || r.ClockOff != off || r.ClockChecked.IsZero() {
			t.Errorf("%s: clock_skew_ms %v clock_off %v checked %v, want about %v, off %v", r.Terminal,
				biDeref(r.ClockSkewMs), r.ClockOff, r.ClockChecked, skew, off)
		}
	}
	if a.ClockSkewLimitMs != 120_000 {
		t.Errorf("clock_skew_limit_ms %d, want the default 2 minutes", a.ClockSkewLimitMs)
	}

	fams := srv.scrape(t)
	for _, c := range []struct {
		terminal   string
		skew, off  float64
		toleranceS float64
	}{{"T1", -86400, 1, 5}, {"T2", 180, 1, 5}, {"T3", 0, 0, 5}} {
		skew, ok := fams.value("posgate_store_terminal_clock_skew_seconds", "terminal", c.terminal)
		off, okOff := fams.value("posgate_store_terminal_clock_off", "terminal", c.terminal)
		if !ok || !okOff || skew < c.skew-c.toleranceS || skew > c.skew+c.toleranceS || off != c.off {
			t.Errorf("%s: terminal_clock_skew_seconds %v (present %v), terminal_clock_off %v (present %v); want about %v, %v",
				c.terminal, skew, ok, off, okOff, c.skew, c.off)
		}
	}
	if skew, ok := fams.value("posgate_store_terminal_clock_skew_seconds", "terminal", "T4"); ok {
		t.Errorf("T4, unconfirmed: terminal_clock_skew_seconds %v, want none", skew)
	}
	if off, ok := fams.value("posgate_store_terminal_clock_off", "terminal", "T4"); !ok || off != 0 {
		t.Errorf("T4, unconfirmed: terminal_clock_off %v (present %v), want 0", off, ok)
	}

	dom := browse(t, srv.Base+"/#token="+biToken)
	for _, want := range []string{
		`<td class="muted" title="Its messages read behind`, // T4's
		`>checking…</td></tr>`,
		`T1's clock is 1.0 d behind the store's (more than 2 min)`,
		`T2's clock is 3 min ahead of the store's (more than 2 min)`,
	} {
		if !strings.Contains(dom, want) {
			t.Errorf("the dashboard does not show %s", want)
		}
	}
	// Each clock cell says when it was last measured, by the store's wall clock (--tz), not
	// the browser's (the test's zone, UTC here).
	for _, r := range a.Terminals {
		cell := map[string]string{"T1": `class="bad" %s>1.0 d behind`, "T2": `class="bad" %s>3 min ahead`, "T3": `%s>on time`}[r.Terminal]
		if cell == "" {
			continue
		}
		want := "<td " + fmt.Sprintf(cell, `title="Last measured `+r.ClockChecked.Format("2006-01-02 15:04:05")+` (store time)."`) + "</td></tr>"
		if !strings.Contains(dom, want) || !inZone(r.ClockChecked, biTZ) {
			t.Errorf("the dashboard does not show %s (clock_checked %v)", want, r.ClockChecked)
		}
	}
	if strings.Contains(dom, "T3's clock") || strings.Contains(dom, "T4's clock") {
		t.Error("the dashboard warns of T3's clock, which is right, or T4's, unconfirmed")
	}
	if t.Failed() {
		t.Logf("page:\n%s", dom)
	}

	// T1's clock is set: its next report reads right, and the flag clears.
	publish(t1, wire.BacklogTopic(biStoreID, "T1"), 0, wire.Backlog{V: wire.Version, Terminal: "T1", At: time.Now()})
	waitFor("T1 set right", func(rows map[string]client.TerminalRow) bool { return near(rows["T1"], 0) && !rows["T1"].ClockOff })
}

// inZone reports whether t, as the API gave it, is in the zone named tz at that time.
func inZone(t time.Time, tz string) bool {
	loc, err := time.LoadLocation(tz)
	if err != nil {
		return false
	}
	_, got := t.Zone()
	_, want := t.In(loc).Zone()
	return got == want
}

// testTerminal is a paho client connected as a terminal with the agent's last will, whose
// TCP connection the test can cut.
type testTerminal struct {
	c    mqtt.Client
	mu   sync.Mutex
	conn net.Conn
}

func dialTerminal(t *testing.T, broker, terminal string) *testTerminal {
	t.Helper()
	tt := &testTerminal{}
	will, _ := json.Marshal(wire.Presence{V: wire.Version, Terminal: terminal, Online: false})
	opts := mqtt.NewClientOptions().AddBroker(broker).
		SetClientID(fmt.Sprintf("test-%s-%d", terminal, time.Now().UnixNano())).
		SetCleanSession(true).SetAutoReconnect(false).SetConnectTimeout(10*time.Second).
		SetWill(wire.StatusTopic(biStoreID, terminal), string(will), 1, true).
		SetCustomOpenConnectionFn(func(u *url.URL, _ mqtt.ClientOptions) (net.Conn, error) {
			c, err := net.DialTimeout("tcp", u.Host, 10*time.Second)
			if err == nil {
				tt.mu.Lock()
				tt.conn = c
				tt.mu.Unlock()
			}
			return c, err
		})
	tt.c = mqtt.NewClient(opts)
	if tok := tt.c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("connect %s as %s: %v", broker, terminal, tok.Error())
	}
	t.Cleanup(func() { tt.c.Disconnect(100) })
	return tt
}

// drop closes the TCP connection under the client, as a pulled cable or a killed agent does.
func (tt *testTerminal) drop() {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	tt.conn.Close()
}

// metricFamilies is a parsed scrape of GET /metrics.
type metricFamilies []*dto.MetricFamily

// scrape reads GET /metrics with the manager token.
func (s *biServer) scrape(t *testing.T) metricFamilies {
	t.Helper()
	status, h, body := s.do(t, "GET", "/metrics", biToken, "", nil)
	if status != http.StatusOK || !strings.HasPrefix(h.Get("Content-Type"), "text/plain") {
		t.Fatalf("GET /metrics: %d %s", status, h.Get("Content-Type"))
	}
	fams, err := metricstest.Parse(body)
	if err != nil {
		t.Fatalf("parse metrics: %v\n%s", err, body)
	}
	return fams
}

// value returns the value of the series name with exactly the given label pairs, and
// whether it is there (metricstest.Value).
func (fams metricFamilies) value(name string, labels ...string) (float64, bool) {
	m := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		m[labels[i]] = labels[i+1]
	}
	return metricstest.Value(fams, name, m)
}
