package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/client"
)

// TestBacklogSeenWhileItDrains: a till back from offline reports what it holds beside its
// events, not behind them as a heartbeat does. The store shows the sales it still has to
// send while it sends them, then 0. Real agent, mosquitto, Sentinel trio and store-server.
func TestBacklogSeenWhileItDrains(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "Asia/Shanghai", []string{"T01"}, "T01")
	ctx := context.Background()

	// Reports at most every 5 s after the one a connection sends, so that the store holds
	// the till's count on reconnecting for a while: long enough to see it by polling.
	a := e.agents["T01"]
	a.Kill()
	a.Args = append(a.Args, "--backlog-every", "5s")
	if err := a.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	c := e.cashiers["T01"]
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if _, err := c.WaitDrained(wctx); err != nil {
		t.Fatal(err)
	}

	// Everything the agent reports, as mosquitto passes it on.
	var mu sync.Mutex
	var reports []wire.Backlog
	sub := mqtt.NewClient(mqtt.NewClientOptions().AddBroker(e.stack.MQTTURL()).SetClientID("backlog-watch").
		SetAutoReconnect(false).SetConnectTimeout(5 * time.Second))
	if tok := sub.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("connect: %v", tok.Error())
	}
	t.Cleanup(func() { sub.Disconnect(50) })
	tok := sub.Subscribe(wire.BacklogTopic("S1", "T01"), 0, func(_ mqtt.Client, m mqtt.Message) {
		r, err := wire.DecodeBacklog(m.Payload())
		if err != nil {
			t.Errorf("report %s: %v", m.Payload(), err)
			return
		}
		mu.Lock()
		reports = append(reports, r)
		mu.Unlock()
	})
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe: %v", tok.Error())
	}

	poll := func(what string, within time.Duration, ok func(client.TerminalRow) bool) client.TerminalRow {
		t.Helper()
		return pollTerminal(t, e, "T01", what, within, ok)
	}
	poll("T01 online with nothing to send", 15*time.Second, func(r client.TerminalRow) bool {
		return r.Online != nil && *r.Online && r.Backlog != nil && r.Backlog.Events == 0
	})

	e.proxies["T01"].Cut()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if st, err := c.Status(); err == nil && !st.Online {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("T01 still online after its connection was cut")
		}
	}
	const sales = 12
	for i := range sales {
		if err := c.Sale([]string{"MILK", "BREAD"}[i%2:i%2+1], "cash"); err != nil {
			t.Fatal(err)
		}
	}
	offline := poll("T01 offline", 20*time.Second, func(r client.TerminalRow) bool { return r.Online != nil && !*r.Online })
	if offline.Backlog == nil || offline.Backlog.Events != 0 {
		t.Fatalf("offline T01's last report: %+v, want the 0 it sent while online", offline.Backlog)
	}

	e.proxies["T01"].Restore()
	back := poll("T01's backlog on its return", 20*time.Second, func(r client.TerminalRow) bool {
		return r.Backlog != nil && r.Backlog.Events >= sales
	})
	if b := back.Backlog; b.OldestMs <= 0 || b.OldestNowMs < b.OldestMs || b.Heard.IsZero() {
		t.Errorf("T01's backlog on its return: %+v, want the oldest sale's age", b)
	}
	done := poll("T01 sent everything", 30*time.Second, func(r client.TerminalRow) bool {
		return r.Backlog != nil && r.Backlog.Events == 0 && r.Online != nil && *r.Online
	})
	var last int64 // the last event the till answered its POS app for
	for key := range c.OK() {
		var seq int64
		if _, err := fmt.Sscanf(strings.TrimPrefix(key, "T01:"), "%d", &seq); err == nil {
			last = max(last, seq)
		}
	}
	if last == 0 || done.LastSeq < last {
		t.Fatalf("the store showed 0 to send with its ledger at T01:%d, the till's last event T01:%d", done.LastSeq, last)
	}

	mu.Lock()
	defer mu.Unlock()
	var counts []int64
	for _, r := range reports {
		counts = append(counts, r.Events)
	}
	// The retained 0 of the first connection, the sales on the second, then 0.
	if len(counts) < 3 || counts[0] != 0 || counts[len(counts)-1] != 0 || counts[len(counts)-2] < sales {
		t.Fatalf("T01's reports counted %v, want 0, then at least %d, then 0", counts, sales)
	}
	t.Logf("T01's reports: %v events", counts)
}

// terminalRow is terminal's row of GET /v1/terminals (its zero value if none).
func terminalRow(t *testing.T, e *env, terminal string) client.TerminalRow {
	t.Helper()
	ans := must[client.TerminalsAnswer](t, "terminals")(e.store.Manager().Terminals(context.Background()))
	for _, r := range ans.Terminals {
		if r.Terminal == terminal {
			return r
		}
	}
	return client.TerminalRow{}
}

// pollTerminal polls terminal's row until ok holds, for up to within.
func pollTerminal(t *testing.T, e *env, terminal, what string, within time.Duration, ok func(client.TerminalRow) bool) client.TerminalRow {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		r := terminalRow(t, e, terminal)
		if ok(r) {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v; %s %+v, backlog %+v", what, within, terminal, r, r.Backlog)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// metricLine is the line of the store's /metrics that starts with prefix ("" if none).
func metricLine(t *testing.T, e *env, prefix string) string {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://"+e.store.API+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+e.store.Opts.Token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	for l := range strings.Lines(string(b)) {
		if strings.HasPrefix(l, prefix) {
			return strings.TrimSpace(l)
		}
	}
	return ""
}

// TestBacklogAgeOutlivesAStoreRestart: a till reported 5 unsent events, the oldest a minute
// old, and went quiet. The store ages the oldest from when it heard the report; restarted,
// it hears the retained report again (mosquitto keeps it), and the age must not go back.
func TestBacklogAgeOutlivesAStoreRestart(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "Asia/Shanghai", nil)
	ctx := context.Background()
	if err := e.store.Enrol("T09"); err != nil { // the test speaks as T09 itself, no agent
		t.Fatal(err)
	}
	c := mqtt.NewClient(mqtt.NewClientOptions().AddBroker(e.stack.MQTTURL()).SetClientID("T09"))
	if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatal(tok.Error())
	}
	body, _ := json.Marshal(wire.Backlog{V: wire.Version, Terminal: "T09", Events: 5, OldestMs: 60_000, At: time.Now()})
	if tok := c.Publish(wire.BacklogTopic("S1", "T09"), 0, true, body); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatal(tok.Error())
	}
	c.Disconnect(100)
	has := func(r client.TerminalRow) bool { return r.Backlog != nil }
	pollTerminal(t, e, "T09", "the report", 10*time.Second, has)
	time.Sleep(3 * time.Second)
	before := terminalRow(t, e, "T09").Backlog

	e.store.Kill()
	if err := e.store.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	after := pollTerminal(t, e, "T09", "the report after the restart", 10*time.Second, has).Backlog
	if after.OldestNowMs < before.OldestNowMs || after.OldestNowMs < 63_000 {
		t.Fatalf("the oldest unsent event was %d ms old before the restart, %d ms after", before.OldestNowMs, after.OldestNowMs)
	}
	m := metricLine(t, e, `posgate_store_terminal_backlog_oldest_seconds{terminal="T09"}`)
	var secs float64
	if _, err := fmt.Sscanf(m[strings.LastIndexByte(m, ' ')+1:], "%g", &secs); err != nil || secs < 63 {
		t.Fatalf("metric %q, want at least 63 s", m)
	}
}

// TestHeartbeatOverAnOlderReport: a till reported 3 unsent events while the store was
// down, then ran without reports (--backlog-every 0). It sends everything, and its
// heartbeats say 0: the store shows 0, not the report's 3 for good.
func TestHeartbeatOverAnOlderReport(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "Asia/Shanghai", []string{"T01"})
	ctx := context.Background()
	a, c := e.agents["T01"], e.cashiers["T01"]

	e.store.Kill() // mosquitto stays: the till is online and gets no acks
	for i := range 3 {
		if err := c.Sale([]string{"MILK", "BREAD", "TEA"}[i:i+1], "cash"); err != nil {
			t.Fatal(err)
		}
	}
	// The retained report as it is now: the till's count of its 3 sales' events.
	sub := mqtt.NewClient(mqtt.NewClientOptions().AddBroker(e.stack.MQTTURL()).SetClientID("backlog-watch"))
	if tok := sub.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatal(tok.Error())
	}
	defer sub.Disconnect(50)
	got := make(chan wire.Backlog, 100)
	sub.Subscribe(wire.BacklogTopic("S1", "T01"), 0, func(_ mqtt.Client, m mqtt.Message) {
		if r, err := wire.DecodeBacklog(m.Payload()); err == nil {
			got <- r
		}
	}).WaitTimeout(10 * time.Second)
	for deadline := time.After(15 * time.Second); ; {
		select {
		case r := <-got:
			if r.Events < 3 {
				continue
			}
		case <-deadline:
			t.Fatal("no report of the 3 sales")
		}
		break
	}

	a.Kill()
	a.Args = append(a.Args, "--backlog-every", "0", "--heartbeat", "1s")
	if err := a.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.store.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := c.WaitDrained(wctx); err != nil {
		t.Fatal(err)
	}
	drained := time.Now()
	r := pollTerminal(t, e, "T01", "a heartbeat after the drain", 20*time.Second, func(r client.TerminalRow) bool {
		return r.Heartbeat != nil && r.Heartbeat.Received.After(drained)
	})
	if r.Backlog != nil || r.Heartbeat.Backlog != 0 {
		t.Fatalf("T01 sent everything; the store shows report %+v, heartbeat backlog %d", r.Backlog, r.Heartbeat.Backlog)
	}
	if m := metricLine(t, e, `posgate_store_terminal_backlog_events{terminal="T01"}`); !strings.HasSuffix(m, " 0") {
		t.Fatalf("metric %q, want 0", m)
	}
}
