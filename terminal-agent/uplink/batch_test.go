package uplink

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/listeners"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/terminal-agent/outbox"
)

// allowAll lets every client connect and use every topic: mochi refuses all without a hook
// that says so.
type allowAll struct{ mqtt.HookBase }

func (allowAll) ID() string { return "allow-all" }

func (allowAll) Provides(b byte) bool { return b == mqtt.OnConnectAuthenticate || b == mqtt.OnACLCheck }

func (allowAll) OnConnectAuthenticate(*mqtt.Client, packets.Packet) bool { return true }

func (allowAll) OnACLCheck(*mqtt.Client, string, bool) bool { return true }

// startLimitedBroker starts a mochi-mqtt broker on a free port that reads no packet over
// wire.MaxPacketBytes, as the store's embedded broker: a larger one is refused and its
// connection dropped. onUp gets every message published on the store's up topics. It
// returns the broker's URL.
func startLimitedBroker(t *testing.T, store string, onUp func(payload []byte)) string {
	t.Helper()
	caps := mqtt.NewDefaultServerCapabilities()
	caps.MaximumPacketSize = wire.MaxPacketBytes
	srv := mqtt.New(&mqtt.Options{Capabilities: caps, InlineClient: true})
	if err := srv.AddHook(new(allowAll), nil); err != nil {
		t.Fatal(err)
	}
	err := srv.Subscribe(wire.UpWildcard(store), 1, func(_ *mqtt.Client, _ packets.Subscription, pk packets.Packet) {
		onUp(pk.Payload)
	})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.AddListener(listeners.NewNet("limited", ln)); err != nil {
		ln.Close()
		t.Fatal(err)
	}
	if err := srv.Serve(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return "tcp://" + ln.Addr().String()
}

// TestBacklogOfLargeSalesGoes: a terminal comes back with 250 offline sales of 120 lines each
// (Chinese product names of 20 characters), each event well under wire.MaxEventBytes. The
// lane sends them in messages under wire.MaxMessageBytes. It put all 250 in one batch (no
// byte budget) of 4.4 MB: the embedded broker refused the packet and dropped the connection
// at every try, and the backlog never reached the store. The broker here holds the packet
// limit the store's does (wire.MaxPacketBytes), and the test first shows that it refuses a
// message over it.
func TestBacklogOfLargeSalesGoes(t *testing.T) {
	ctx := context.Background()
	st, err := outbox.Open(ctx, filepath.Join(t.TempDir(), "outbox.db"), outbox.Config{Store: "S1", Terminal: "T1"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	name := "蒙牛特仑苏纯牛奶二百五十毫升乘十二盒装"
	maxEvent := 0
	for i := 0; i < 250; i++ {
		p := &wire.SalePayload{SaleID: fmt.Sprintf("T1-sale-%04d", i), OpenedAt: time.Now().Add(-time.Hour).Truncate(time.Millisecond)}
		for l := 1; l <= 120; l++ {
			p.Lines = append(p.Lines, wire.Line{Line: l, SKU: fmt.Sprintf("SKU%06d", l), Name: name, Qty: 1, UnitPrice: 1250, Amount: 1250})
		}
		p.Total = money.Fen(1250 * 120)
		p.Payments = []wire.Payment{{Method: wire.MethodCash, Amount: p.Total}}
		if _, err := st.Enqueue(ctx, wire.KindSale, p); err != nil {
			t.Fatal(err)
		}
	}
	evs, _ := st.Pending(ctx, 0, 1)
	b, _ := json.Marshal(evs[0].Envelope("S1", "T1"))
	maxEvent = len(b)
	var ups, events, largest atomic.Int64
	url := startLimitedBroker(t, "S1", func(b []byte) {
		ups.Add(1)
		if up, err := wire.DecodeUp(b); err == nil {
			events.Add(int64(len(up.Items)))
		}
		for l := largest.Load(); int64(len(b)) > l && !largest.CompareAndSwap(l, int64(len(b))); l = largest.Load() {
		}
	})
	refusesOversize(t, url, &ups)
	u := New(Config{BrokerURL: url, Store: "S1", Terminal: "T1"}, st)
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { u.Run(rctx); close(done) }()
	defer func() { cancel(); <-done }()
	for deadline := time.Now().Add(15 * time.Second); events.Load() < 250; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("one event is %d bytes (limit %d); in 15 s the store was handed %d up messages, %d of the 250 events (broker packet limit %d)",
				maxEvent, wire.MaxEventBytes, ups.Load(), events.Load(), wire.MaxPacketBytes)
		}
	}
	if l := largest.Load(); l > wire.MaxMessageBytes {
		t.Fatalf("an up message of %d bytes, over the %d a message may be", l, wire.MaxMessageBytes)
	}
}

// refusesOversize shows that the broker at url refuses a message over wire.MaxPacketBytes:
// the publisher's connection is dropped and nothing reaches the up topics (ups unchanged).
// Without it a broker with no limit would let TestBacklogOfLargeSalesGoes pass whatever
// the batches' size.
func refusesOversize(t *testing.T, url string, ups *atomic.Int64) {
	t.Helper()
	lost := make(chan struct{})
	o := paho.NewClientOptions().AddBroker(url).SetClientID("oversize").SetAutoReconnect(false).
		SetConnectionLostHandler(func(paho.Client, error) { close(lost) })
	c := paho.NewClient(o)
	if tok := c.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("connect to the test broker: %v", tok.Error())
	}
	defer c.Disconnect(0)
	before := ups.Load()
	c.Publish(wire.UpTopic("S1", "T9"), 1, false, make([]byte, wire.MaxPacketBytes))
	select {
	case <-lost:
	case <-time.After(5 * time.Second):
		t.Fatalf("the test broker kept the connection of a client that sent a packet over %d bytes", wire.MaxPacketBytes)
	}
	if n := ups.Load(); n != before {
		t.Fatalf("the test broker passed on a message over %d bytes", wire.MaxPacketBytes)
	}
}
