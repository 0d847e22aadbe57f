//go:build unix

package uplink

import (
	"context"
	"sync"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/posgate/posgate/internal/stack"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/terminal-agent/outbox"
)

// TestBacklogReportAndItsClearing: with reports on, a connection publishes the backlog (its
// count and the last seq); with them off, a connection clears the retained report an
// earlier run left, and only then: an agent that never reported publishes nothing on the
// topic. Real mosquitto.
func TestBacklogReportAndItsClearing(t *testing.T) {
	s := stack.Run(t, stack.Options{MQTT: true})
	st, seq := liveScan(t) // one event waiting
	ctx := context.Background()

	var mu sync.Mutex
	var got [][]byte
	watch := mqtt.NewClient(mqtt.NewClientOptions().AddBroker(s.MQTTURL()).SetClientID("watch"))
	if tok := watch.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatal(tok.Error())
	}
	defer watch.Disconnect(50)
	watch.Subscribe(wire.BacklogTopic("S1", "T1"), 0, func(_ mqtt.Client, m mqtt.Message) {
		mu.Lock()
		got = append(got, m.Payload())
		mu.Unlock()
	}).WaitTimeout(10 * time.Second)
	messages := func() [][]byte {
		mu.Lock()
		defer mu.Unlock()
		return append([][]byte(nil), got...)
	}

	// run connects an uplink with reports every `every` (0: off), waits until it is online
	// and a little longer, and stops it.
	run := func(every time.Duration) {
		t.Helper()
		u := New(Config{BrokerURL: s.MQTTURL(), Store: "S1", Terminal: "T1", BacklogEvery: every}, st)
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { u.Run(rctx); close(done) }()
		for deadline := time.Now().Add(10 * time.Second); !u.Status().Online; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the uplink did not connect")
			}
		}
		time.Sleep(300 * time.Millisecond)
		cancel()
		<-done
	}

	run(0)
	if m := messages(); len(m) != 0 {
		t.Fatalf("an agent that never reported published %q", m)
	}
	run(time.Hour) // the report a connection sends
	m := messages()
	if len(m) != 1 {
		t.Fatalf("with reports on: %q, want one report", m)
	}
	r, err := wire.DecodeBacklog(m[0])
	if err != nil || r.Events != 1 || r.Seq != seq {
		t.Fatalf("report %s (%v): want 1 event, seq %d", m[0], err, seq)
	}
	run(0)
	if m := messages(); len(m) != 2 || len(m[1]) != 0 {
		t.Fatalf("with reports off again: %q, want the report cleared (an empty message)", m)
	}
	if v, err := st.KV(ctx, outbox.KVBacklogReported); err != nil || v != 0 {
		t.Fatalf("backlog_reported %d (%v) once cleared, want 0", v, err)
	}
	run(0)
	if m := messages(); len(m) != 2 {
		t.Fatalf("cleared already, still publishing: %q", m)
	}
}

// TestBacklogEveryAtMostHalfARefresh: the store reads a report as current for two refreshes,
// so a slower report would give way to heartbeats between reports: the interval is capped.
func TestBacklogEveryAtMostHalfARefresh(t *testing.T) {
	for _, tc := range []struct{ set, want time.Duration }{
		{0, 0}, {2 * time.Second, 2 * time.Second}, {wire.BacklogRefresh / 2, wire.BacklogRefresh / 2},
		{wire.BacklogRefresh, wire.BacklogRefresh / 2}, {3 * time.Minute, wire.BacklogRefresh / 2},
	} {
		if got := New(Config{BacklogEvery: tc.set}, nil).cfg.BacklogEvery; got != tc.want {
			t.Errorf("BacklogEvery %v: %v, want %v", tc.set, got, tc.want)
		}
	}
}

// TestUnchangedBacklogWithinARefresh: an unchanged report goes again on the last tick before
// a refresh has passed, so no refresh goes by without one, whatever the ticks' jitter
// (here the longest interval, ticks a few µs late or early).
func TestUnchangedBacklogWithinARefresh(t *testing.T) {
	s := stack.Run(t, stack.Options{MQTT: true})
	st, _ := liveScan(t)
	pub := mqtt.NewClient(mqtt.NewClientOptions().AddBroker(s.MQTTURL()).SetClientID("T1"))
	if tok := pub.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatal(tok.Error())
	}
	defer pub.Disconnect(50)
	for _, every := range []time.Duration{time.Hour, 2 * time.Second} {
		t0 := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
		now := t0
		u := New(Config{BrokerURL: s.MQTTURL(), Store: "S1", Terminal: "T1", BacklogEvery: every,
			Now: func() time.Time { return now }}, st)
		ctx := context.Background()
		u.publishBacklog(ctx, pub, true) // the report a connection sends
		last, reports := now, 0
		jitter := []time.Duration{300, -200, 150, -180, 90, -40, 200, -300}
		for k := range int(3*wire.BacklogRefresh/u.cfg.BacklogEvery) + 2 {
			now = t0.Add(time.Duration(k+1)*u.cfg.BacklogEvery + jitter[k%len(jitter)]*time.Microsecond)
			before := u.reportedAt
			u.publishBacklog(ctx, pub, false)
			if u.reportedAt == before {
				continue
			}
			if gap := now.Sub(last); gap > wire.BacklogRefresh {
				t.Fatalf("every %v, tick %d: a report %v after the one before", u.cfg.BacklogEvery, k+1, gap)
			}
			last, reports = now, reports+1
		}
		if reports < 3 {
			t.Fatalf("every %v: %d reports in 3 refreshes", u.cfg.BacklogEvery, reports)
		}
	}
}
