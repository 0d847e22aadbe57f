//go:build unix

package storesim

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/posgate/posgate/internal/stack"
	"github.com/posgate/posgate/internal/wire"
)

const testStore = "S1"

// storeZone is the store's time zone in the tests: UTC+8, so that an event at 23:30 UTC
// belongs to the next business day.
var storeZone = time.FixedZone("UTC+8", 8*3600)

// baseAt is the business time of the test events.
var baseAt = time.Date(2025, 3, 1, 23, 30, 0, 0, time.UTC)

// broker starts a mosquitto for the test and returns its URL.
func broker(tb testing.TB) (*stack.Stack, string) {
	tb.Helper()
	s := stack.Run(tb, stack.Options{MQTT: true})
	return s, s.MQTTURL()
}

// startStore starts a responder and closes it when the test ends.
func startStore(tb testing.TB, url string, o Options) *Responder {
	tb.Helper()
	o.BrokerURL = url
	if o.Store == "" {
		o.Store = testStore
	}
	if o.Location == nil {
		o.Location = storeZone
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := Start(ctx, o)
	if err != nil {
		tb.Fatalf("Start: %v", err)
	}
	tb.Cleanup(func() { _ = r.Close() })
	return r
}

// fakeTerm is a raw paho client playing a terminal.
type fakeTerm struct {
	tb    testing.TB
	c     mqtt.Client
	store string
	id    string
	acks  chan wire.Acks
}

func newTerm(tb testing.TB, url, store, id string) *fakeTerm {
	tb.Helper()
	ft := &fakeTerm{tb: tb, store: store, id: id, acks: make(chan wire.Acks, 10000)}
	handler := func(_ mqtt.Client, m mqtt.Message) {
		a, err := wire.DecodeAcks(m.Payload())
		if err != nil {
			tb.Errorf("terminal %s: bad down message %s: %v", id, m.Payload(), err)
			return
		}
		ft.acks <- a
	}
	subscribed := make(chan error, 1)
	opts := mqtt.NewClientOptions().AddBroker(url).SetClientID("term-" + store + "-" + id).
		SetCleanSession(true).SetOrderMatters(true).SetAutoReconnect(true).
		SetMaxReconnectInterval(time.Second).
		SetOnConnectHandler(func(c mqtt.Client) {
			// A clean session loses its subscription on every reconnect: subscribe again.
			tok := c.Subscribe(wire.DownTopic(store, id), 1, handler)
			tok.WaitTimeout(10 * time.Second)
			select {
			case subscribed <- tok.Error():
			default:
			}
		})
	ft.c = mqtt.NewClient(opts)
	if tok := ft.c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		tb.Fatalf("terminal %s connect: %v", id, tok.Error())
	}
	tb.Cleanup(func() { ft.c.Disconnect(100) })
	select {
	case err := <-subscribed:
		if err != nil {
			tb.Fatalf("terminal %s subscribe: %v", id, err)
		}
	case <-time.After(10 * time.Second):
		tb.Fatalf("terminal %s: subscribe timed out", id)
	}
	return ft
}

// event builds a sealed heartbeat event of this terminal; n varies the content.
func (ft *fakeTerm) event(seq int64, n int) wire.Envelope {
	p := fmt.Sprintf(`{"backlog":%d,"oldest_age_ms":0,"catalog_version":0}`, n)
	return wire.NewEnvelope(wire.KindHeartbeat, ft.store, ft.id, seq, baseAt.Add(time.Duration(seq)*time.Second), []byte(p))
}

func (ft *fakeTerm) publishRaw(topic string, b []byte) {
	ft.tb.Helper()
	tok := ft.c.Publish(topic, 1, false, b)
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		ft.tb.Fatalf("publish: %v", tok.Error())
	}
}

// send publishes one envelope on the terminal's up topic.
func (ft *fakeTerm) send(env wire.Envelope) {
	ft.tb.Helper()
	ft.publishRaw(wire.UpTopic(ft.store, ft.id), mustJSON(ft.tb, env))
}

// sendBatch publishes a batch of already encoded events.
func (ft *fakeTerm) sendBatch(events ...json.RawMessage) {
	ft.tb.Helper()
	b, err := wire.MarshalBatch(ft.store, ft.id, events)
	if err != nil {
		ft.tb.Fatal(err)
	}
	ft.publishRaw(wire.UpTopic(ft.store, ft.id), b)
}

// recv returns the next Acks message, failing the test after a timeout.
func (ft *fakeTerm) recv() wire.Acks {
	ft.tb.Helper()
	select {
	case a := <-ft.acks:
		if a.Store != ft.store || a.Terminal != ft.id {
			ft.tb.Fatalf("acks for %s/%s arrived at %s/%s", a.Store, a.Terminal, ft.store, ft.id)
		}
		return a
	case <-time.After(10 * time.Second):
		ft.tb.Fatalf("terminal %s: no acks within 10s", ft.id)
		return wire.Acks{}
	}
}

// recvOne returns the single ack of the next Acks message.
func (ft *fakeTerm) recvOne() wire.Ack {
	ft.tb.Helper()
	a := ft.recv()
	if len(a.Acks) != 1 {
		ft.tb.Fatalf("want 1 ack, got %+v", a.Acks)
	}
	return a.Acks[0]
}

// none checks that no Acks message arrives within d.
func (ft *fakeTerm) none(d time.Duration) {
	ft.tb.Helper()
	select {
	case a := <-ft.acks:
		ft.tb.Fatalf("terminal %s: unexpected acks %+v", ft.id, a)
	case <-time.After(d):
	}
}

// waitFor polls cond until it holds, failing the test after 10s.
func waitFor(tb testing.TB, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatal("condition not met within 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func mustJSON(tb testing.TB, v any) []byte {
	tb.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

func wantAck(tb testing.TB, got wire.Ack, want wire.Ack) {
	tb.Helper()
	if !reflect.DeepEqual(got, want) {
		tb.Fatalf("ack:\n got %+v (result %+v)\nwant %+v (result %+v)", got, got.Result, want, want.Result)
	}
}

func TestAcceptsInOrderWithFlowNumbers(t *testing.T) {
	_, url := broker(t)
	r := startStore(t, url, Options{})
	a := newTerm(t, url, testStore, "T1")
	b := newTerm(t, url, testStore, "T2")

	var envs []wire.Envelope
	for seq := int64(1); seq <= 2; seq++ {
		env := a.event(seq, 0)
		envs = append(envs, env)
		a.send(env)
		wantAck(t, a.recvOne(), wire.Ack{Seq: seq, Key: env.Key, Status: wire.AckAccepted, Live: true,
			Result: &wire.Result{FlowNo: seq, BusinessDate: "2025-03-02"}})
	}
	// The flow number is store-wide: the other terminal's first event gets 3.
	eb := b.event(1, 0)
	eb.Offline = true
	b.send(eb)
	wantAck(t, b.recvOne(), wire.Ack{Seq: 1, Key: "T2:1", Status: wire.AckAccepted,
		Result: &wire.Result{FlowNo: 3, BusinessDate: "2025-03-02"}})

	if got := r.Accepted("T1"); !reflect.DeepEqual(got, envs) {
		t.Fatalf("Accepted(T1) = %+v, want %+v", got, envs)
	}
	if got := r.Accepted("T2"); len(got) != 1 || got[0].Key != "T2:1" || !got[0].Offline {
		t.Fatalf("Accepted(T2) = %+v", got)
	}
	for _, k := range []string{"T1:1", "T1:2", "T2:1"} {
		if n := r.AcceptCount(k); n != 1 {
			t.Errorf("AcceptCount(%s) = %d", k, n)
		}
	}
	if n := r.AcceptCount("T1:3"); n != 0 {
		t.Errorf("AcceptCount(T1:3) = %d", n)
	}
	if e := r.Expect("T1"); e != 3 {
		t.Errorf("Expect(T1) = %d, want 3", e)
	}
	st := r.Stats()
	if st.Messages != 3 || st.Events != 3 || st.Accepted != 3 || st.AckMessages != 3 {
		t.Errorf("stats %+v", st)
	}
}

func TestDuplicateAndConflict(t *testing.T) {
	_, url := broker(t)
	r := startStore(t, url, Options{})
	ft := newTerm(t, url, testStore, "T1")

	env := ft.event(1, 0)
	ft.send(env)
	first := ft.recvOne()
	if first.Status != wire.AckAccepted || first.Result == nil {
		t.Fatalf("first ack %+v", first)
	}

	// The same event again: duplicate with the original result, whether live or offline.
	ft.send(env)
	wantAck(t, ft.recvOne(), wire.Ack{Seq: 1, Key: "T1:1", Status: wire.AckDuplicate, Live: true, Result: first.Result})
	off := env
	off.Offline = true
	ft.send(off)
	wantAck(t, ft.recvOne(), wire.Ack{Seq: 1, Key: "T1:1", Status: wire.AckDuplicate, Result: first.Result})

	// Same seq, other content: conflict; the original stands.
	other := ft.event(1, 99)
	ft.send(other)
	got := ft.recvOne()
	if got.Status != wire.AckConflict || got.Code != CodeConflict || got.Seq != 1 || got.Key != "T1:1" || got.Result != nil {
		t.Fatalf("conflict ack %+v", got)
	}
	if n := r.AcceptCount("T1:1"); n != 1 {
		t.Fatalf("AcceptCount = %d", n)
	}
	if acc := r.Accepted("T1"); len(acc) != 1 || acc[0].Hash != env.Hash {
		t.Fatalf("Accepted = %+v", acc)
	}
	st := r.Stats()
	if st.Accepted != 1 || st.Duplicates != 2 || st.Conflicts != 1 {
		t.Errorf("stats %+v", st)
	}
}

func TestOutOfOrder(t *testing.T) {
	_, url := broker(t)
	r := startStore(t, url, Options{})
	ft := newTerm(t, url, testStore, "T1")

	e3 := ft.event(3, 0)
	ft.send(e3)
	got := ft.recvOne()
	if got.Status != wire.AckOutOfOrder || got.Expect != 1 || got.Seq != 3 || got.Key != "T1:3" || !got.Live {
		t.Fatalf("ack %+v", got)
	}
	ft.send(ft.event(1, 0))
	if got := ft.recvOne(); got.Status != wire.AckAccepted {
		t.Fatalf("seq 1: %+v", got)
	}
	ft.send(e3)
	if got := ft.recvOne(); got.Status != wire.AckOutOfOrder || got.Expect != 2 {
		t.Fatalf("seq 3 again: %+v", got)
	}
	// Resending from the expected seq in one batch is accepted in order.
	ft.sendBatch(mustJSON(t, ft.event(2, 0)), mustJSON(t, e3))
	a := ft.recv()
	if len(a.Acks) != 2 || a.Acks[0].Status != wire.AckAccepted || a.Acks[1].Status != wire.AckAccepted ||
		a.Acks[0].Result.FlowNo != 2 || a.Acks[1].Result.FlowNo != 3 {
		t.Fatalf("batch acks %+v", a.Acks)
	}
	if st := r.Stats(); st.OutOfOrder != 2 || st.Accepted != 3 {
		t.Errorf("stats %+v", st)
	}
}

func TestBatchWithBadEvent(t *testing.T) {
	_, url := broker(t)
	r := startStore(t, url, Options{})
	ft := newTerm(t, url, testStore, "T1")

	var raws []json.RawMessage
	for seq := int64(1); seq <= 5; seq++ {
		env := ft.event(seq, 0)
		if seq == 3 {
			env.Payload = json.RawMessage(`{"backlog":7,"oldest_age_ms":0,"catalog_version":0}`) // no longer matches the hash
		}
		raws = append(raws, mustJSON(t, env))
	}
	ft.sendBatch(raws...)
	a := ft.recv()
	if len(a.Acks) != 5 {
		t.Fatalf("want 5 acks in one message, got %+v", a.Acks)
	}
	wantStatus := []wire.AckStatus{wire.AckAccepted, wire.AckAccepted, wire.AckRejected, wire.AckAccepted, wire.AckAccepted}
	for i, ack := range a.Acks {
		if ack.Seq != int64(i+1) || ack.Key != wire.Key("T1", int64(i+1)) || ack.Status != wantStatus[i] {
			t.Errorf("ack %d: %+v", i, ack)
		}
	}
	if bad := a.Acks[2]; bad.Code != wire.CodeHash || !bad.Live || bad.Result != nil {
		t.Errorf("bad event ack %+v", bad)
	}
	ft.none(200 * time.Millisecond)
	if acc := r.Accepted("T1"); len(acc) != 4 {
		t.Errorf("accepted %d events, want 4", len(acc))
	}
	if st := r.Stats(); st.Events != 5 || st.BadEvents != 1 || st.Rejected != 1 || st.Accepted != 4 || st.AckMessages != 1 {
		t.Errorf("stats %+v", st)
	}

	// The bad event was a live attempt: its rejection is a live verdict, and the terminal may
	// resend it offline; still bad, it is rejected for good.
	bad := raws[2]
	var env wire.Envelope
	if err := json.Unmarshal(bad, &env); err != nil {
		t.Fatal(err)
	}
	env.Offline = true
	ft.send(env)
	got := ft.recvOne()
	if got.Status != wire.AckRejected || got.Code != wire.CodeHash || got.Live {
		t.Fatalf("offline resend of a bad event: %+v", got)
	}
	ft.send(env)
	if got := ft.recvOne(); got.Status != wire.AckRejected || got.Code != wire.CodeHash || got.Live {
		t.Fatalf("second offline resend of a bad event: %+v", got)
	}
}

func TestUndecodableMessage(t *testing.T) {
	_, url := broker(t)
	r := startStore(t, url, Options{})
	ft := newTerm(t, url, testStore, "T1")

	ft.publishRaw(wire.UpTopic(testStore, "T1"), []byte(`{not json`))
	ft.publishRaw(wire.UpTopic(testStore, "T1"), []byte(`{"v":1,"kind":"batch","store":"S1","terminal":"T1","events":[]}`))
	// A single event whose seq cannot be read cannot be acked either.
	ft.publishRaw(wire.UpTopic(testStore, "T1"), []byte(`{"v":1,"kind":"heartbeat"}`))
	// A message that follows is still answered: the store keeps going.
	ft.send(ft.event(1, 0))
	if got := ft.recvOne(); got.Status != wire.AckAccepted || got.Seq != 1 {
		t.Fatalf("ack %+v", got)
	}
	if st := r.Stats(); st.Messages != 4 || st.Bad != 2 || st.BadEvents != 1 || st.Accepted != 1 {
		t.Errorf("stats %+v", st)
	}
}

func TestTerminalMismatch(t *testing.T) {
	_, url := broker(t)
	r := startStore(t, url, Options{})
	t1 := newTerm(t, url, testStore, "T1")
	t2 := newTerm(t, url, testStore, "T2")

	// T1 publishes T2's event on its own topic: rejected on T1's down topic.
	t1.publishRaw(wire.UpTopic(testStore, "T1"), mustJSON(t, t2.event(1, 0)))
	got := t1.recvOne()
	if got.Status != wire.AckRejected || got.Code != CodeTerminalMismatch || got.Seq != 1 || got.Key != "T2:1" {
		t.Fatalf("ack %+v", got)
	}
	// And a batch of T2 on T1's topic: every event rejected, in one message.
	t1.publishRaw(wire.UpTopic(testStore, "T1"), func() []byte {
		b, err := wire.MarshalBatch(testStore, "T2", []json.RawMessage{mustJSON(t, t2.event(1, 0)), mustJSON(t, t2.event(2, 0))})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}())
	a := t1.recv()
	if len(a.Acks) != 2 || a.Acks[0].Code != CodeTerminalMismatch || a.Acks[1].Code != CodeTerminalMismatch {
		t.Fatalf("batch acks %+v", a.Acks)
	}
	t2.none(200 * time.Millisecond)
	if r.Expect("T1") != 1 || r.Expect("T2") != 1 || len(r.Accepted("T1")) != 0 || len(r.Accepted("T2")) != 0 {
		t.Fatalf("a mismatched message changed the store's state")
	}

	// An event of another store on this store's topic is rejected too.
	other := wire.NewEnvelope(wire.KindHeartbeat, "S2", "T1", 1, baseAt, []byte(`{"backlog":0,"oldest_age_ms":0,"catalog_version":0}`))
	t1.publishRaw(wire.UpTopic(testStore, "T1"), mustJSON(t, other))
	if got := t1.recvOne(); got.Status != wire.AckRejected || got.Code != CodeStoreMismatch {
		t.Fatalf("ack %+v", got)
	}
}

func TestLiveVerdictsThenOffline(t *testing.T) {
	_, url := broker(t)
	var mu sync.Mutex
	var calls []string
	r := startStore(t, url, Options{Decide: func(env wire.Envelope, live bool) *wire.Ack {
		mu.Lock()
		calls = append(calls, fmt.Sprintf("%s live=%v", env.Key, live))
		mu.Unlock()
		if !live {
			return nil
		}
		switch env.Seq {
		case 1:
			return &wire.Ack{Status: wire.AckRateLimited, Code: "scan_rate", RetryAfterMs: 500}
		case 2:
			return &wire.Ack{Status: wire.AckRejected, Code: "out_of_stock", Message: "sku A is out of stock"}
		}
		return nil
	}})
	ft := newTerm(t, url, testStore, "T1")

	e1 := ft.event(1, 0)
	ft.send(e1)
	wantAck(t, ft.recvOne(), wire.Ack{Seq: 1, Key: "T1:1", Status: wire.AckRateLimited, Live: true, Code: "scan_rate", RetryAfterMs: 500})
	e2 := ft.event(2, 0)
	ft.send(e2)
	wantAck(t, ft.recvOne(), wire.Ack{Seq: 2, Key: "T1:2", Status: wire.AckRejected, Live: true, Code: "out_of_stock", Message: "sku A is out of stock"})
	if len(r.Accepted("T1")) != 0 || r.Expect("T1") != 3 {
		t.Fatalf("live verdicts must pass the seq without accepting")
	}

	// Resent offline, both are accepted (the default verdict), in the order resent.
	e2.Offline, e1.Offline = true, true
	ft.send(e2)
	wantAck(t, ft.recvOne(), wire.Ack{Seq: 2, Key: "T1:2", Status: wire.AckAccepted, Result: &wire.Result{FlowNo: 1, BusinessDate: "2025-03-02"}})
	ft.send(e1)
	wantAck(t, ft.recvOne(), wire.Ack{Seq: 1, Key: "T1:1", Status: wire.AckAccepted, Result: &wire.Result{FlowNo: 2, BusinessDate: "2025-03-02"}})
	// Now final: another resend is a duplicate, and Decide is not asked again.
	ft.send(e1)
	if got := ft.recvOne(); got.Status != wire.AckDuplicate || got.Result.FlowNo != 2 {
		t.Fatalf("resend %+v", got)
	}
	acc := r.Accepted("T1")
	if len(acc) != 2 || acc[0].Key != "T1:2" || acc[1].Key != "T1:1" {
		t.Fatalf("accepted %+v", acc)
	}
	mu.Lock()
	want := []string{"T1:1 live=true", "T1:2 live=true", "T1:2 live=false", "T1:1 live=false"}
	if !reflect.DeepEqual(calls, want) {
		t.Errorf("Decide calls %q, want %q", calls, want)
	}
	mu.Unlock()

	// Decide can also accept with its own result, and reject offline for good.
	r.SetDecide(func(env wire.Envelope, live bool) *wire.Ack {
		if env.Seq == 3 {
			return &wire.Ack{Status: wire.AckAccepted, Result: &wire.Result{Oversold: true}}
		}
		return &wire.Ack{Status: wire.AckRejected, Code: "payload_invalid"}
	})
	ft.send(ft.event(3, 0))
	wantAck(t, ft.recvOne(), wire.Ack{Seq: 3, Key: "T1:3", Status: wire.AckAccepted, Live: true,
		Result: &wire.Result{FlowNo: 3, BusinessDate: "2025-03-02", Oversold: true}})
	e4 := ft.event(4, 0)
	e4.Offline = true
	ft.send(e4)
	wantAck(t, ft.recvOne(), wire.Ack{Seq: 4, Key: "T1:4", Status: wire.AckRejected, Code: "payload_invalid"})
	ft.send(e4) // a final rejection is repeated, not decided again
	wantAck(t, ft.recvOne(), wire.Ack{Seq: 4, Key: "T1:4", Status: wire.AckRejected, Code: "payload_invalid"})
	r.SetDecide(nil)
	ft.send(e4)
	wantAck(t, ft.recvOne(), wire.Ack{Seq: 4, Key: "T1:4", Status: wire.AckRejected, Code: "payload_invalid"})

	st := r.Stats()
	if st.RateLimited != 1 || st.Rejected != 4 || st.Accepted != 3 || st.Duplicates != 1 {
		t.Errorf("stats %+v", st)
	}
}

func TestRateLimitedLiveRetry(t *testing.T) {
	_, url := broker(t)
	limited := true
	var mu sync.Mutex
	r := startStore(t, url, Options{Decide: func(env wire.Envelope, live bool) *wire.Ack {
		mu.Lock()
		defer mu.Unlock()
		if live && limited {
			return &wire.Ack{Status: wire.AckRateLimited, RetryAfterMs: 100}
		}
		return nil
	}})
	ft := newTerm(t, url, testStore, "T1")
	e1 := ft.event(1, 0)
	ft.send(e1)
	if got := ft.recvOne(); got.Status != wire.AckRateLimited || !got.Live {
		t.Fatalf("ack %+v", got)
	}
	// A live retry after the limit is decided again.
	mu.Lock()
	limited = false
	mu.Unlock()
	ft.send(e1)
	if got := ft.recvOne(); got.Status != wire.AckAccepted || !got.Live || got.Result.FlowNo != 1 {
		t.Fatalf("retry ack %+v", got)
	}
	if r.AcceptCount("T1:1") != 1 {
		t.Fatal("not accepted once")
	}
	// A live verdict binds nothing: other content under its seq (a till restored from a
	// backup numbers its events again) is decided again, as the store does.
	mu.Lock()
	limited = true
	mu.Unlock()
	ft.send(ft.event(2, 0))
	if got := ft.recvOne(); got.Status != wire.AckRateLimited {
		t.Fatalf("ack %+v", got)
	}
	mu.Lock()
	limited = false
	mu.Unlock()
	ft.send(ft.event(2, 5))
	if got := ft.recvOne(); got.Status != wire.AckAccepted {
		t.Fatalf("other content under a live verdict's seq: ack %+v, want accepted", got)
	}
	if r.AcceptCount("T1:2") != 1 {
		t.Fatal("T1:2 not accepted once")
	}
}

func TestSilent(t *testing.T) {
	_, url := broker(t)
	r := startStore(t, url, Options{Silent: true})
	ft := newTerm(t, url, testStore, "T1")

	e1 := ft.event(1, 0)
	ft.send(e1)
	waitFor(t, func() bool { return r.Stats().Silenced == 1 })
	ft.none(300 * time.Millisecond)
	st := r.Stats()
	if st.Messages != 1 || st.Silenced != 1 || st.Events != 0 || st.Accepted != 0 {
		t.Fatalf("stats while silent %+v", st)
	}
	if r.Expect("T1") != 1 || len(r.Accepted("T1")) != 0 {
		t.Fatal("a silent store processed an event")
	}

	r.SetSilent(false)
	ft.send(e1)
	wantAck(t, ft.recvOne(), wire.Ack{Seq: 1, Key: "T1:1", Status: wire.AckAccepted, Live: true,
		Result: &wire.Result{FlowNo: 1, BusinessDate: "2025-03-02"}})

	// Acks waiting for their delay are dropped when the store goes silent.
	r.SetAckDelay(2 * time.Second)
	ft.send(ft.event(2, 0))
	waitFor(t, func() bool { return r.Stats().Events == 2 }) // processed, ack waiting
	r.SetSilent(true)
	waitFor(t, func() bool { return r.Stats().DroppedAcks == 1 })
	ft.none(200 * time.Millisecond)
	r.SetSilent(false)
	r.SetAckDelay(0)
	ft.send(ft.event(2, 0))
	if got := ft.recvOne(); got.Status != wire.AckDuplicate || got.Result.FlowNo != 2 {
		t.Fatalf("resend after a lost ack: %+v", got)
	}
}

func TestDuplicateAcks(t *testing.T) {
	_, url := broker(t)
	r := startStore(t, url, Options{})
	r.SetDuplicateAcks(true)
	ft := newTerm(t, url, testStore, "T1")

	ft.send(ft.event(1, 0))
	a, b := ft.recv(), ft.recv()
	if !reflect.DeepEqual(a, b) || len(a.Acks) != 1 || a.Acks[0].Status != wire.AckAccepted {
		t.Fatalf("acks %+v and %+v", a, b)
	}
	ft.none(200 * time.Millisecond)
	if st := r.Stats(); st.AckMessages != 2 || st.Accepted != 1 {
		t.Fatalf("stats %+v", st)
	}
	r.SetDuplicateAcks(false)
	ft.send(ft.event(2, 0))
	ft.recv()
	ft.none(200 * time.Millisecond)
}

func TestAckDelayKeepsOrder(t *testing.T) {
	_, url := broker(t)
	r := startStore(t, url, Options{AckDelay: 300 * time.Millisecond})
	ft := newTerm(t, url, testStore, "T1")
	other := newTerm(t, url, testStore, "T2")

	start := time.Now()
	for seq := int64(1); seq <= 5; seq++ {
		ft.send(ft.event(seq, 0))
	}
	for seq := int64(1); seq <= 5; seq++ {
		if got := ft.recvOne(); got.Seq != seq || got.Status != wire.AckAccepted {
			t.Fatalf("ack %d: %+v", seq, got)
		}
		if seq == 1 {
			if d := time.Since(start); d < 300*time.Millisecond {
				t.Fatalf("first ack after %v, before the 300ms delay", d)
			}
		}
	}
	// A delay set at run time applies to the next messages; other terminals are not held up
	// by one terminal's delayed acks.
	r.SetAckDelay(2 * time.Second)
	ft.send(ft.event(6, 0))
	waitFor(t, func() bool { return r.Stats().Events == 6 })
	r.SetAckDelay(0)
	start = time.Now()
	other.send(other.event(1, 0))
	other.recvOne()
	if d := time.Since(start); d > time.Second {
		t.Fatalf("T2's ack took %v behind T1's delayed ack", d)
	}
	// T1's next ack waits behind its delayed one: order within a terminal is kept.
	ft.send(ft.event(7, 0))
	if got := ft.recvOne(); got.Seq != 6 {
		t.Fatalf("got %+v, want seq 6 first", got)
	}
	if d := time.Since(start); d < 1500*time.Millisecond {
		t.Fatalf("seq 6 acked after %v, before its 2s delay", d)
	}
	if got := ft.recvOne(); got.Seq != 7 {
		t.Fatalf("got %+v, want seq 7", got)
	}
}

func TestCatalogRetained(t *testing.T) {
	_, url := broker(t)
	r := startStore(t, url, Options{})
	cat := wire.Catalog{V: wire.Version, Store: testStore, Version: 7, Items: []wire.CatalogItem{
		{SKU: "A", Barcode: "690001", Name: "Apple", Price: 350},
		{SKU: "B", Name: "Bread", Price: 1200},
	}}
	if err := r.PublishCatalog(cat); err != nil {
		t.Fatal(err)
	}
	// A subscriber that comes later receives it, retained.
	c := mqtt.NewClient(mqtt.NewClientOptions().AddBroker(url).SetClientID("late-sub"))
	if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("connect: %v", tok.Error())
	}
	defer c.Disconnect(100)
	got := make(chan mqtt.Message, 1)
	tok := c.Subscribe(wire.CatalogTopic(testStore), 1, func(_ mqtt.Client, m mqtt.Message) { got <- m })
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe: %v", tok.Error())
	}
	select {
	case m := <-got:
		if !m.Retained() {
			t.Error("catalog message is not retained")
		}
		dec, err := wire.DecodeCatalog(m.Payload())
		if err != nil {
			t.Fatal(err)
		}
		// Signed with the simulator's key, as a store signs its catalogs.
		if err := wire.VerifyCatalog(dec, Key.Public().(ed25519.PublicKey)); err != nil {
			t.Fatalf("catalog not signed by the simulator's key: %v", err)
		}
		dec.Key, dec.Sig = "", ""
		if !reflect.DeepEqual(dec, cat) {
			t.Fatalf("catalog %+v, want %+v", dec, cat)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no retained catalog")
	}
}

func TestPersistentSessionAndBrokerRestart(t *testing.T) {
	s, url := broker(t)
	r := startStore(t, url, Options{ClientID: "store-S1"})
	ft := newTerm(t, url, testStore, "T1")
	ft.send(ft.event(1, 0))
	ft.recvOne()

	// The broker restarts: the responder reconnects and resubscribes.
	if err := s.Mosquitto.Stop(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Mosquitto.Start(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	seq := int64(2)
	for {
		ft.send(ft.event(seq, 0))
		select {
		case a := <-ft.acks:
			if a.Acks[0].Seq < seq && a.Acks[0].Status == wire.AckDuplicate {
				// A late answer for an earlier event: the terminal's client resent its
				// publish over the new connection, and the store answered it again.
				continue
			}
			// A resent copy may be answered as a duplicate of the one that was queued (its
			// accepted ack can be lost with the terminal's old connection).
			if st := a.Acks[0].Status; (st != wire.AckAccepted && st != wire.AckDuplicate) || a.Acks[0].Seq != seq {
				t.Fatalf("after broker restart: %+v", a.Acks)
			}
		case <-time.After(500 * time.Millisecond):
			if time.Now().After(deadline) {
				t.Fatal("store not answering after broker restart")
			}
			continue // the event was lost with the old connection, or is queued: resend
		}
		break
	}

	// The store stops; what is published meanwhile waits in its session and is processed
	// by the next responder with the same client id (which starts with a fresh ledger).
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	e := ft.event(1, 0)
	ft.send(e)
	r2 := startStore(t, url, Options{ClientID: "store-S1"})
	if err := r2.WaitAccepted(ctx, "T1", 1); err != nil {
		t.Fatal(err)
	}
	for {
		got := ft.recvOne()
		if got.Status == wire.AckAccepted && got.Seq == 1 && got.Result.FlowNo == 1 {
			break
		}
		if got.Status != wire.AckAccepted || got.Seq <= seq {
			continue // a late ack of a resend before the restart
		}
		t.Fatalf("ack %+v", got)
	}
}

func TestWaitAccepted(t *testing.T) {
	_, url := broker(t)
	r := startStore(t, url, Options{})
	ft := newTerm(t, url, testStore, "T1")

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	err := r.WaitAccepted(ctx, "T1", 1)
	if err == nil || !strings.Contains(err.Error(), "0 of 1") {
		t.Fatalf("err = %v", err)
	}
	go func() {
		for seq := int64(1); seq <= 3; seq++ {
			ft.c.Publish(wire.UpTopic(testStore, "T1"), 1, false, mustJSON(t, ft.event(seq, 0)))
		}
	}()
	ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	if err := r.WaitAccepted(ctx2, "T1", 3); err != nil {
		t.Fatal(err)
	}
	if n := r.AcceptedCount("T1"); n != 3 {
		t.Fatalf("AcceptedCount = %d", n)
	}
}

func TestStartFails(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := Start(ctx, Options{BrokerURL: "tcp://127.0.0.1:1", Store: testStore}); err == nil {
		t.Fatal("Start with no broker succeeded")
	}
	if _, err := Start(ctx, Options{BrokerURL: "tcp://127.0.0.1:1", Store: "a/b"}); err == nil {
		t.Fatal("Start with a bad store id succeeded")
	}
}

// BenchmarkBatches drives b.N events of one terminal through the responder in batches of
// 500 and waits for every ack.
func BenchmarkBatches(b *testing.B) {
	_, url := broker(b)
	r := startStore(b, url, Options{})
	ft := newTerm(b, url, testStore, "T1")
	const batch = 500
	var msgs [][]byte
	for seq := int64(1); seq <= int64(b.N); seq += batch {
		var raws []json.RawMessage
		for s := seq; s < seq+batch && s <= int64(b.N); s++ {
			raws = append(raws, mustJSON(b, ft.event(s, int(s))))
		}
		m, err := wire.MarshalBatch(testStore, "T1", raws)
		if err != nil {
			b.Fatal(err)
		}
		msgs = append(msgs, m)
	}
	b.ResetTimer()
	start := time.Now()
	go func() {
		for _, m := range msgs {
			ft.c.Publish(wire.UpTopic(testStore, "T1"), 1, false, m)
		}
	}()
	acked := 0
	for acked < b.N {
		a := ft.recv()
		for _, ack := range a.Acks {
			if ack.Status != wire.AckAccepted {
				b.Fatalf("ack %+v", ack)
			}
		}
		acked += len(a.Acks)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "events/s")
	if n := r.AcceptedCount("T1"); n != b.N {
		b.Fatalf("accepted %d of %d", n, b.N)
	}
}
