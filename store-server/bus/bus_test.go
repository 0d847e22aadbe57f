package bus

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/posgate/posgate/internal/stack"
	"github.com/posgate/posgate/internal/wire"
)

// TestConnectWithAccount connects the store to a mosquitto that refuses anonymous clients:
// with the store's account it connects and receives its terminals' up messages; without
// it, or with a wrong password, Connect keeps retrying until its context ends.
func TestConnectWithAccount(t *testing.T) {
	stack.SkipShort(t)
	pw := filepath.Join(t.TempDir(), "passwd")
	for _, u := range [][2]string{{"store-S1", "s3cret"}, {"T01", "t-pass"}} {
		args := []string{"-b", pw, u[0], u[1]}
		if u[0] == "store-S1" {
			args = append([]string{"-c"}, args...)
		}
		if out, err := exec.Command("mosquitto_passwd", args...).CombinedOutput(); err != nil {
			t.Fatalf("mosquitto_passwd: %v\n%s", err, out)
		}
	}
	s := stack.Run(t, stack.Options{MQTT: true, MosquittoExtra: "allow_anonymous false\npassword_file " + pw + "\n"})

	for _, c := range []struct{ name, user, pass string }{{"anonymous", "", ""}, {"wrong password", "store-S1", "nope"}} {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := Connect(ctx, Config{URL: s.MQTTURL(), Store: "S1", Username: c.user, Password: c.pass,
			OnUp: func(string, []byte) { t.Errorf("%s: got an up message", c.name) }})
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s: Connect = %v, want it to retry until the deadline", c.name, err)
		}
	}

	got := make(chan string, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Connect(ctx, Config{URL: s.MQTTURL(), Store: "S1", Username: "store-S1", Password: "s3cret",
		OnUp: func(topic string, payload []byte) {
			select {
			case got <- topic + " " + string(payload):
			default: // a later copy: the loop below publishes until one arrives
			}
		}})
	if err != nil {
		t.Fatalf("Connect with the store's account: %v", err)
	}
	defer c.Close()
	term := mqtt.NewClient(mqtt.NewClientOptions().AddBroker(s.MQTTURL()).SetClientID("T01").
		SetUsername("T01").SetPassword("t-pass").SetAutoReconnect(false))
	if tok := term.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("terminal connect: %v", tok.Error())
	}
	defer term.Disconnect(100)
	// The store subscribes right after it connects; publish until it has.
	want := wire.UpTopic("S1", "T01") + " hello"
	for deadline := time.Now().Add(5 * time.Second); ; {
		term.Publish(wire.UpTopic("S1", "T01"), 1, false, "hello").WaitTimeout(time.Second)
		select {
		case m := <-got:
			if m != want {
				t.Fatalf("up message %q, want %q", m, want)
			}
			return
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("the store received no up message")
		}
	}
}
