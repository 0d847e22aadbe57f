package main

import (
	"context"
	"sync"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/api"
)

// TestBacklogSeenWhileItDrains: a till back from offline reports what it holds beside its
// events, not behind them as a heartbeat does. The store shows the sales it still has to
// send while it sends them, then 0. Real agent, mosquitto, Sentinel trio and store-server.
func TestBacklogSeenWhileItDrains(t *testing.T) {
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

	row := func() api.TerminalRow {
		t.Helper()
		var ans api.TerminalsAnswer
		if err := e.store.Call(ctx, "GET", "/v1/terminals", "", nil, &ans); err != nil {
			t.Fatal(err)
		}
		for _, r := range ans.Terminals {
			if r.Terminal == "T01" {
				return r
			}
		}
		return api.TerminalRow{}
	}
	poll := func(what string, within time.Duration, ok func(api.TerminalRow) bool) api.TerminalRow {
		t.Helper()
		deadline := time.Now().Add(within)
		for {
			r := row()
			if ok(r) {
				return r
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within %v; T01 %+v, backlog %+v", what, within, r, r.Backlog)
			}
			time.Sleep(25 * time.Millisecond)
		}
	}
	poll("T01 online with nothing to send", 15*time.Second, func(r api.TerminalRow) bool {
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
	offline := poll("T01 offline", 20*time.Second, func(r api.TerminalRow) bool { return r.Online != nil && !*r.Online })
	if offline.Backlog == nil || offline.Backlog.Events != 0 {
		t.Fatalf("offline T01's last report: %+v, want the 0 it sent while online", offline.Backlog)
	}

	e.proxies["T01"].Restore()
	back := poll("T01's backlog on its return", 20*time.Second, func(r api.TerminalRow) bool {
		return r.Backlog != nil && r.Backlog.Events >= sales
	})
	if b := back.Backlog; b.OldestMs <= 0 || b.OldestNowMs < b.OldestMs || b.Heard.IsZero() {
		t.Errorf("T01's backlog on its return: %+v, want the oldest sale's age", b)
	}
	poll("T01 sent everything", 30*time.Second, func(r api.TerminalRow) bool {
		return r.Backlog != nil && r.Backlog.Events == 0 && r.Online != nil && *r.Online
	})
	if st, err := c.Status(); err != nil || st.Backlog != 0 {
		t.Fatalf("T01 says %+v, %v: the store showed 0 before it had everything", st, err)
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
