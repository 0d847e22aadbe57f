package broker

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"golang.org/x/crypto/bcrypt"

	"github.com/posgate/posgate/internal/wire"
)

// upLog records what the broker hands to OnUp.
type upLog struct {
	mu   sync.Mutex
	msgs []string // "topic payload"
}

func (l *upLog) add(topic string, payload []byte) {
	l.mu.Lock()
	l.msgs = append(l.msgs, topic+" "+string(payload))
	l.mu.Unlock()
}

func (l *upLog) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.msgs...)
}

func startBroker(t *testing.T, users []User, log ...*slog.Logger) (*Broker, *upLog) {
	t.Helper()
	ups := &upLog{}
	cfg := Config{Addr: "127.0.0.1:0", Store: "S1", Users: users, OnUp: ups.add}
	if len(log) > 0 {
		cfg.Logger = log[0]
	}
	b, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b, ups
}

// connect connects a terminal's client (QoS 1, as the agent does); it returns the error of
// the connection attempt.
func connect(t *testing.T, b *Broker, id, user, pass string) (paho.Client, error) {
	t.Helper()
	c := paho.NewClient(paho.NewClientOptions().AddBroker(b.URL()).SetClientID(id).SetUsername(user).
		SetPassword(pass).SetAutoReconnect(false).SetConnectTimeout(5 * time.Second))
	tok := c.Connect()
	if !tok.WaitTimeout(5 * time.Second) {
		t.Fatalf("connect %s: timed out", id)
	}
	if tok.Error() != nil {
		return nil, tok.Error()
	}
	t.Cleanup(func() { c.Disconnect(50) })
	return c, nil
}

func wait(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !ok(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// TestInlineIngest holds the embedded broker's side of the protocol: each terminal's up
// messages reach OnUp in order, and only from its own up topic; what the store publishes
// reaches only the terminal it is for; the catalog is retained; a wrong password is refused.
func TestInlineIngest(t *testing.T) {
	users := []User{mustUser(t, "t1", "p1-of-the-tests!", "T1"), mustUser(t, "t2", "p2-of-the-tests!", "T2")}
	b, ups := startBroker(t, users)
	if _, err := connect(t, b, "x", "t1", "wrong"); err == nil {
		t.Fatal("a wrong password was let in")
	}
	t1, err := connect(t, b, "T1", "t1", "p1-of-the-tests!")
	if err != nil {
		t.Fatal(err)
	}
	t2, err := connect(t, b, "T2", "t2", "p2-of-the-tests!")
	if err != nil {
		t.Fatal(err)
	}

	// Order holds per terminal: messages of two connections reach OnUp in any interleaving
	// (ingest sees each after the broker's PUBACK, on its terminal's connection).
	want := map[string][]string{}
	for i := range 50 {
		msg := fmt.Sprintf("e%d", i)
		if tok := t1.Publish(wire.UpTopic("S1", "T1"), 1, false, msg); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
			t.Fatalf("publish %s: %v", msg, tok.Error())
		}
		want[wire.UpTopic("S1", "T1")] = append(want[wire.UpTopic("S1", "T1")], msg)
	}
	// T1's credentials on T2's up topic: refused (mochi drops an MQTT 3.1.1 client that
	// publishes where it may not), never handed to ingest.
	forger, err := connect(t, b, "T1-forger", "t1", "p1-of-the-tests!")
	if err != nil {
		t.Fatal(err)
	}
	forger.Publish(wire.UpTopic("S1", "T2"), 1, false, "forged").WaitTimeout(time.Second)
	t2.Publish(wire.UpTopic("S1", "T2"), 1, false, "own").WaitTimeout(5 * time.Second)
	want[wire.UpTopic("S1", "T2")] = []string{"own"}
	wait(t, "51 up messages", func() bool { return len(ups.get()) >= 51 })
	time.Sleep(50 * time.Millisecond) // anything forged would have come by now
	byTopic := map[string][]string{}
	for _, m := range ups.get() {
		topic, payload, _ := strings.Cut(m, " ")
		byTopic[topic] = append(byTopic[topic], payload)
	}
	if fmt.Sprint(byTopic) != fmt.Sprint(want) {
		t.Fatalf("OnUp got, by topic\n%q\nwant\n%q", byTopic, want)
	}

	// Down messages go to their terminal only: T2 may not read T1's down topic.
	var mu sync.Mutex
	got := map[string][]string{}
	on := func(who string) paho.MessageHandler {
		return func(_ paho.Client, m paho.Message) {
			mu.Lock()
			got[who] = append(got[who], m.Topic()+" "+string(m.Payload()))
			mu.Unlock()
		}
	}
	t1.Subscribe(wire.DownTopic("S1", "T1"), 1, on("T1")).WaitTimeout(5 * time.Second)
	t2.Subscribe(wire.DownTopic("S1", "T1"), 1, on("T2")).WaitTimeout(5 * time.Second)
	if err := b.Publish(wire.DownTopic("S1", "T1"), []byte("acks")); err != nil {
		t.Fatal(err)
	}
	if err := b.PublishRetained(wire.CatalogTopic("S1"), []byte("catalog v1")); err != nil {
		t.Fatal(err)
	}
	t2.Subscribe(wire.CatalogTopic("S1"), 1, on("T2")).WaitTimeout(5 * time.Second) // after: retained
	wait(t, "the acks and the catalog", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got["T1"]) == 1 && len(got["T2"]) == 1
	})
	time.Sleep(50 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(got["T1"]) != "[pos/S1/T1/down acks]" || fmt.Sprint(got["T2"]) != "[pos/S1/catalog catalog v1]" {
		t.Fatalf("delivered %q", got)
	}
}

// syncBuffer is a bytes.Buffer for a logger written from the broker's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *syncBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// TestRefusalsAreLogged: a terminal set up with the wrong account shows in the store's log,
// not only as a client that keeps reconnecting.
func TestRefusalsAreLogged(t *testing.T) {
	var out syncBuffer
	log := slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelWarn}))
	users := []User{mustUser(t, "t1", "p1-of-the-tests!", "T1")}
	b, _ := startBroker(t, users, log)
	if _, err := connect(t, b, "T1", "t1", "wrong"); err == nil {
		t.Fatal("a wrong password was let in")
	}
	if _, err := connect(t, b, "T9", "t9", "p9"); err == nil {
		t.Fatal("an unknown user was let in")
	}
	c, err := connect(t, b, "T1", "t1", "p1-of-the-tests!")
	if err != nil {
		t.Fatal(err)
	}
	c.Subscribe(wire.DownTopic("S1", "T2"), 1, nil).WaitTimeout(5 * time.Second)
	c.Publish(wire.UpTopic("S1", "T2"), 1, false, "forged").WaitTimeout(time.Second)
	for _, want := range []string{
		"connection refused: wrong password", "user=t1",
		"connection refused: unknown user", "user=t9",
		"subscription refused", "topic=pos/S1/T2/down",
		"publish refused", "topic=pos/S1/T2/up",
	} {
		wait(t, "log "+want, func() bool { return strings.Contains(out.String(), want) })
	}
}

// TestStatusReachesOnStatus: a terminal's presence, its backlog reports and, when its
// connection drops, its last will reach OnStatus inside the broker; another terminal may not
// speak for it, and a refused backlog report (QoS 0) does not close the sender's connection.
func TestStatusReachesOnStatus(t *testing.T) {
	users := []User{mustUser(t, "t1", "p1-of-the-tests!", "T1"), mustUser(t, "t2", "p2-of-the-tests!", "T2")}
	status := &upLog{}
	b, err := Start(Config{Addr: "127.0.0.1:0", Store: "S1", Users: users, OnUp: func(string, []byte) {}, OnStatus: func(topic string, p []byte, _ bool) { status.add(topic, p) }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })

	var mu sync.Mutex
	var conn net.Conn
	t1 := paho.NewClient(paho.NewClientOptions().AddBroker(b.URL()).SetClientID("T1").SetUsername("t1").
		SetPassword("p1-of-the-tests!").SetAutoReconnect(false).SetConnectTimeout(5*time.Second).
		SetWill(wire.StatusTopic("S1", "T1"), "offline", 1, true).
		SetCustomOpenConnectionFn(func(u *url.URL, _ paho.ClientOptions) (net.Conn, error) {
			c, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
			mu.Lock()
			conn = c
			mu.Unlock()
			return c, err
		}))
	if tok := t1.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("connect: %v", tok.Error())
	}
	if tok := t1.Publish(wire.StatusTopic("S1", "T1"), 1, true, "online"); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("publish: %v", tok.Error())
	}
	forger, err := connect(t, b, "T2", "t2", "p2-of-the-tests!")
	if err != nil {
		t.Fatal(err)
	}
	if tok := t1.Publish(wire.BacklogTopic("S1", "T1"), 0, true, "backlog 3"); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("publish: %v", tok.Error())
	}
	wait(t, "T1's backlog report", func() bool { return len(status.get()) >= 2 })
	forger.Publish(wire.BacklogTopic("S1", "T1"), 0, true, "forged").WaitTimeout(time.Second)
	forger.Publish(wire.BacklogTopic("S1", "T2"), 0, true, "backlog 0").WaitTimeout(time.Second)
	wait(t, "T2's own backlog report", func() bool { return len(status.get()) >= 3 })
	if !forger.IsConnectionOpen() {
		t.Fatal("the broker closed T2's connection over a refused QoS 0 report")
	}
	// A refused QoS 1 publish closes the connection (MQTT 3.1.1 has no refusal to send).
	forger.Publish(wire.StatusTopic("S1", "T1"), 1, true, "forged").WaitTimeout(time.Second)

	mu.Lock()
	conn.Close() // no DISCONNECT: the broker publishes the will
	mu.Unlock()
	wait(t, "the will", func() bool { return len(status.get()) >= 4 })
	time.Sleep(50 * time.Millisecond) // anything forged would have come by now
	want := []string{"pos/S1/T1/status online", "pos/S1/T1/backlog backlog 3", "pos/S1/T2/backlog backlog 0",
		"pos/S1/T1/status offline"}
	if got := status.get(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("OnStatus got %q, want %q", got, want)
	}
}

// TestWillOnlyOnOwnStatus: the broker publishes a last will without an ACL check, so a
// terminal that asks for one on another topic (another terminal's up topic, the retained
// catalog) is refused at connect; its own status topic is allowed.
func TestWillOnlyOnOwnStatus(t *testing.T) {
	users := []User{mustUser(t, "t1", "p1-of-the-tests!", "T1"), mustUser(t, "t2", "p2-of-the-tests!", "T2")}
	b, ups := startBroker(t, users)
	if err := b.PublishRetained(wire.CatalogTopic("S1"), []byte("catalog v1")); err != nil {
		t.Fatal(err)
	}
	dial := func(will string, retain bool) error {
		c := paho.NewClient(paho.NewClientOptions().AddBroker(b.URL()).SetClientID("will-"+will).SetUsername("t1").
			SetPassword("p1-of-the-tests!").SetAutoReconnect(false).SetConnectTimeout(5*time.Second).
			SetWill(will, `{"terminal":"T2","forged":true}`, 1, retain))
		tok := c.Connect()
		if !tok.WaitTimeout(5 * time.Second) {
			return errors.New("connect timed out")
		}
		if tok.Error() == nil {
			c.Disconnect(0)
		}
		return tok.Error()
	}
	for _, will := range []string{wire.UpTopic("S1", "T2"), wire.CatalogTopic("S1"), wire.StatusTopic("S1", "T2")} {
		if err := dial(will, will == wire.CatalogTopic("S1")); err == nil {
			t.Errorf("t1 connected with a last will on %s", will)
		}
	}
	if err := dial(wire.StatusTopic("S1", "T1"), true); err != nil {
		t.Fatalf("t1 with its last will on its own status topic: %v", err)
	}
	if got := ups.get(); len(got) > 0 {
		t.Fatalf("up messages %q", got)
	}
}

// TestClientIDBelongsToItsAccount: one terminal's credentials cannot take over another's
// session by connecting with its client id (and read the acks queued for it); the terminal
// itself reconnects to it and gets them.
func TestClientIDBelongsToItsAccount(t *testing.T) {
	users := []User{mustUser(t, "t1", "p1-of-the-tests!", "T1"), mustUser(t, "t2", "p2-of-the-tests!", "T2")}
	b, _ := startBroker(t, users)
	var mu sync.Mutex
	var got []string
	opts := func(user, pass string) *paho.ClientOptions {
		return paho.NewClientOptions().AddBroker(b.URL()).SetClientID("posgate-S1-T2").SetUsername(user).SetPassword(pass).
			SetCleanSession(false).SetAutoReconnect(false).SetConnectTimeout(5 * time.Second).
			SetDefaultPublishHandler(func(_ paho.Client, m paho.Message) {
				mu.Lock()
				got = append(got, user+" "+m.Topic())
				mu.Unlock()
			})
	}
	t2 := paho.NewClient(opts("t2", "p2-of-the-tests!"))
	if tok := t2.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatal(tok.Error())
	}
	t2.Subscribe(wire.DownTopic("S1", "T2"), 1, nil).WaitTimeout(5 * time.Second)
	t2.Disconnect(50) // away for a moment; its session is kept
	time.Sleep(100 * time.Millisecond)
	if err := b.Publish(wire.DownTopic("S1", "T2"), []byte("acks for T2")); err != nil {
		t.Fatal(err)
	}
	evil := paho.NewClient(opts("t1", "p1-of-the-tests!"))
	if tok := evil.Connect(); tok.WaitTimeout(5*time.Second) && tok.Error() == nil {
		evil.Disconnect(50)
		t.Fatal("t1 connected with T2's client id")
	}
	back := paho.NewClient(opts("t2", "p2-of-the-tests!"))
	if tok := back.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatal(tok.Error())
	}
	defer back.Disconnect(50)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		mu.Lock()
		n := fmt.Sprint(got)
		mu.Unlock()
		if n == "[t2 "+wire.DownTopic("S1", "T2")+"]" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("messages %s; want T2's acks, delivered to t2 once", n)
		}
	}
}

// TestSettingsACL: every terminal reads the store's retained settings; none may publish
// them (a till could otherwise name itself a supervisor, or allow refunds offline), and
// the retained settings stay the store's.
func TestSettingsACL(t *testing.T) { storeTopicACL(t, wire.SettingsTopic("S1")) }

// TestCatalogKeysACL: every terminal reads the chain of the catalog key's rotations; none
// may publish it (a till's own chain would only be refused, and would stand in the way of
// the store's).
func TestCatalogKeysACL(t *testing.T) { storeTopicACL(t, wire.CatalogKeysTopic("S1")) }

// storeTopicACL: T1 publishes on a retained topic of the store's, which T2 then reads: T2
// gets the store's message alone.
func storeTopicACL(t *testing.T, topic string) {
	users := []User{mustUser(t, "t1", "p1-of-the-tests!", "T1"), mustUser(t, "t2", "p2-of-the-tests!", "T2")}
	b, _ := startBroker(t, users)
	if err := b.PublishRetained(topic, []byte("the store's v1")); err != nil {
		t.Fatal(err)
	}
	forger, err := connect(t, b, "T1-forger", "t1", "p1-of-the-tests!")
	if err != nil {
		t.Fatal(err)
	}
	forger.Publish(topic, 1, true, "forged").WaitTimeout(time.Second)
	t2, err := connect(t, b, "T2", "t2", "p2-of-the-tests!")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 4)
	t2.Subscribe(topic, 1, func(_ paho.Client, m paho.Message) { got <- string(m.Payload()) }).
		WaitTimeout(5 * time.Second)
	select {
	case s := <-got:
		if s != "the store's v1" {
			t.Fatalf("T2 read %q on %s, want the store's", s, topic)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("T2 never read the retained %s", topic)
	}
	select {
	case s := <-got:
		t.Fatalf("T2 read %q as well", s)
	case <-time.After(100 * time.Millisecond):
	}
}

// mustUser returns an account whose password is hashed at bcrypt's least cost: the tests
// log in often, and the cost is not what they test.
func mustUser(t *testing.T, username, password, terminal string) User {
	t.Helper()
	u, err := NewUser(username, password, terminal, bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// TestCloseIsBounded: a close that never returns (mochi's Server.Close deadlocked) is given
// up after the wait; one that returns gives its error.
func TestCloseIsBounded(t *testing.T) {
	stuck := make(chan struct{})
	defer close(stuck)
	start := time.Now()
	if err := closeWithin(func() error { <-stuck; return nil }, 50*time.Millisecond); !errors.Is(err, errCloseStuck) {
		t.Fatalf("a stuck close: %v, want errCloseStuck", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("a stuck close held Close for %v", d)
	}
	want := errors.New("closed badly")
	if err := closeWithin(func() error { return want }, time.Minute); err != want {
		t.Fatalf("a close that returned: %v, want %v", err, want)
	}
}
