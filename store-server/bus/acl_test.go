package bus

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/listeners"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/posgate/posgate/internal/stack"
	"github.com/posgate/posgate/internal/wire"
)

// lockedBuf is a log sink safe for the bus's goroutines.
type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}
func (l *lockedBuf) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

// TestMosquittoACL: with mosquitto's accounts set up as docs/store-server.md says, the store
// hears a terminal's backlog report. (Without read on a filter, mosquitto 2.0 grants the
// subscription and delivers nothing: see TestRefusedSubscriptionIsLogged for a broker that
// says so.)
func TestMosquittoACL(t *testing.T) {
	stack.SkipShort(t)
	dir := t.TempDir()
	pw := filepath.Join(dir, "passwd")
	for i, u := range [][2]string{{"store-S1", "s3cret"}, {"T01", "t-pass"}} {
		args := []string{"-b", pw, u[0], u[1]}
		if i == 0 {
			args = append([]string{"-c"}, args...)
		}
		if out, err := exec.Command("mosquitto_passwd", args...).CombinedOutput(); err != nil {
			t.Fatalf("mosquitto_passwd: %v\n%s", err, out)
		}
	}
	terminal := `
user T01
topic write pos/S1/T01/up
topic write pos/S1/T01/status
topic write pos/S1/T01/backlog
topic read pos/S1/T01/down
topic read pos/S1/catalog
topic read pos/S1/settings
topic read pos/S1/hq
topic read pos/S1/catalog-key
`
	for _, tc := range []struct{ name, store string }{
		{"as documented", "user store-S1\ntopic read pos/S1/+/up\ntopic read pos/S1/+/status\ntopic read pos/S1/+/backlog\n" +
			"topic write pos/S1/+/down\ntopic write pos/S1/catalog\ntopic write pos/S1/settings\ntopic write pos/S1/hq\n" +
			"topic write pos/S1/catalog-key\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			acl := filepath.Join(t.TempDir(), "acl")
			if err := os.WriteFile(acl, []byte(tc.store+terminal), 0o644); err != nil {
				t.Fatal(err)
			}
			s := stack.Run(t, stack.Options{MQTT: true, MosquittoExtra: "allow_anonymous false\npassword_file " + pw +
				"\nacl_file " + acl + "\nuse_username_as_clientid true\n"})
			var logs lockedBuf
			got := make(chan string, 10)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c, err := Connect(ctx, Config{URL: s.MQTTURL(), Store: "S1", Username: "store-S1", Password: "s3cret",
				OnUp: func(string, []byte) {}, OnStatus: func(topic string, _ []byte, _ bool) { got <- topic },
				Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			term := mqtt.NewClient(mqtt.NewClientOptions().AddBroker(s.MQTTURL()).SetClientID("T01").
				SetUsername("T01").SetPassword("t-pass").SetAutoReconnect(false))
			if tok := term.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
				t.Fatalf("terminal connect: %v", tok.Error())
			}
			defer term.Disconnect(100)
			term.Publish(wire.BacklogTopic("S1", "T01"), 0, true,
				`{"v":1,"terminal":"T01","events":3,"oldest_age_ms":5,"at":"2026-11-30T09:00:00Z"}`).WaitTimeout(time.Second)
			select {
			case topic := <-got:
				if topic != wire.BacklogTopic("S1", "T01") {
					t.Errorf("the store got %s", topic)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("the store never got T01's backlog report; its log:\n%s", logs.String())
			}
			if strings.Contains(logs.String(), "refused") {
				t.Errorf("a subscription refused:\n%s", logs.String())
			}
		})
	}
}

// readDenied is a broker's ACL that lets every client connect and publish, and read
// everything but the filters in deny.
type readDenied struct {
	mochi.HookBase
	deny []string
}

func (h *readDenied) ID() string { return "read-denied" }
func (h *readDenied) Provides(b byte) bool {
	return b == mochi.OnConnectAuthenticate || b == mochi.OnACLCheck
}
func (h *readDenied) OnConnectAuthenticate(*mochi.Client, packets.Packet) bool { return true }
func (h *readDenied) OnACLCheck(_ *mochi.Client, topic string, write bool) bool {
	return write || !slices.Contains(h.deny, topic)
}

// TestRefusedSubscriptionIsLogged: a broker that refuses the store's account the status and
// backlog topics answers their subscriptions with 0x80, which paho takes without an error:
// the store logs each refusal, naming the filter, instead of waiting for nothing in silence.
func TestRefusedSubscriptionIsLogged(t *testing.T) {
	srv := mochi.New(&mochi.Options{InlineClient: false})
	if err := srv.AddHook(&readDenied{deny: []string{wire.StatusWildcard("S1"), wire.BacklogWildcard("S1")}}, nil); err != nil {
		t.Fatal(err)
	}
	tcp := listeners.NewTCP(listeners.Config{Type: "tcp", ID: "t", Address: "127.0.0.1:0"})
	if err := srv.AddListener(tcp); err != nil {
		t.Fatal(err)
	}
	if err := srv.Serve(); err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	var logs lockedBuf
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Connect(ctx, Config{URL: "tcp://" + tcp.Address(), Store: "S1", OnUp: func(string, []byte) {},
		OnStatus: func(string, []byte, bool) {}, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, f := range []string{"filter=pos/S1/+/status", "filter=pos/S1/+/backlog"} {
		for deadline := time.Now().Add(5 * time.Second); !strings.Contains(logs.String(), f); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the refusal of %s is not logged:\n%s", f, logs.String())
			}
		}
	}
	if !strings.Contains(logs.String(), "the broker refused the subscription") || strings.Contains(logs.String(), "pos/S1/+/up") {
		t.Errorf("log:\n%s", logs.String())
	}
}

// TestMosquittoClientIDTakeover: with mosquitto set up as docs/store-server.md says, a
// terminal's account keeps connecting with the store-server's (predictable) client id,
// posgate-store-S1, while another terminal sends its events: the store hears every one.
// Without use_username_as_clientid mosquitto handed it the store's session and dropped the
// store-server, each time: it ingested 2 of 30.
func TestMosquittoClientIDTakeover(t *testing.T) {
	stack.SkipShort(t)
	dir := t.TempDir()
	pw := filepath.Join(dir, "passwd")
	for i, u := range [][2]string{{"store-S1", "s3cret"}, {"T01", "t1-pass"}, {"T02", "t2-pass"}} {
		args := []string{"-b", pw, u[0], u[1]}
		if i == 0 {
			args = append([]string{"-c"}, args...)
		}
		if out, err := exec.Command("mosquitto_passwd", args...).CombinedOutput(); err != nil {
			t.Fatalf("mosquitto_passwd: %v\n%s", err, out)
		}
	}
	acl := filepath.Join(dir, "acl")
	rules := "user store-S1\ntopic read pos/S1/+/up\ntopic read pos/S1/+/status\ntopic read pos/S1/+/backlog\n" +
		"topic write pos/S1/+/down\ntopic write pos/S1/catalog\ntopic write pos/S1/settings\n"
	for _, term := range []string{"T01", "T02"} {
		rules += fmt.Sprintf("user %[1]s\ntopic write pos/S1/%[1]s/up\ntopic write pos/S1/%[1]s/status\n"+
			"topic write pos/S1/%[1]s/backlog\ntopic read pos/S1/%[1]s/down\ntopic read pos/S1/catalog\ntopic read pos/S1/settings\n", term)
	}
	if err := os.WriteFile(acl, []byte(rules), 0o644); err != nil {
		t.Fatal(err)
	}
	s := stack.Run(t, stack.Options{MQTT: true, MosquittoExtra: "allow_anonymous false\npassword_file " + pw +
		"\nacl_file " + acl + "\nuse_username_as_clientid true\n"})
	var logs lockedBuf
	var ingested atomic.Int64
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := Connect(ctx, Config{URL: s.MQTTURL(), Store: "S1", Username: "store-S1", Password: "s3cret",
		OnUp: func(string, []byte) { ingested.Add(1) }, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	time.Sleep(300 * time.Millisecond)

	// T01 (hostile) keeps connecting as posgate-store-S1.
	var stolen atomic.Int64
	var takeovers atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			ev := mqtt.NewClient(mqtt.NewClientOptions().AddBroker(s.MQTTURL()).SetClientID("posgate-store-S1").
				SetUsername("T01").SetPassword("t1-pass").SetCleanSession(false).SetAutoReconnect(false).
				SetDefaultPublishHandler(func(_ mqtt.Client, m mqtt.Message) { stolen.Add(1) }))
			if tok := ev.Connect(); tok.WaitTimeout(2*time.Second) && tok.Error() == nil {
				takeovers.Add(1)
			}
			time.Sleep(100 * time.Millisecond)
			if !ev.IsConnectionOpen() {
				continue
			}
			ev.Disconnect(0)
		}
	}()
	// T02 (honest) sends 30 events over 3 s.
	t2 := mqtt.NewClient(mqtt.NewClientOptions().AddBroker(s.MQTTURL()).SetClientID("posgate-S1-T02").
		SetUsername("T02").SetPassword("t2-pass").SetAutoReconnect(false))
	if tok := t2.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("T02: %v", tok.Error())
	}
	defer t2.Disconnect(50)
	const sent = 30
	for i := 0; i < sent; i++ {
		t2.Publish(wire.UpTopic("S1", "T02"), 1, false, fmt.Sprintf(`{"n":%d}`, i)).WaitTimeout(2 * time.Second)
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond)
	close(stop)
	wg.Wait()
	t.Logf("T01 took the store's client id %d times; the store ingested %d of T02's %d events; "+
		"T01's client received %d messages", takeovers.Load(), ingested.Load(), sent, stolen.Load())
	if ingested.Load() < sent {
		t.Errorf("the store ingested only %d of T02's %d events while T01 used its client id (store log:\n%s)",
			ingested.Load(), sent, logs.String())
	}
}
