package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"runtime/pprof"
	"sync"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/posgate/posgate/internal/wire"
)

// leanTerm is the live benchmark's terminal: one MQTT 3.1.1 connection spoken with mochi's
// packet codec, no goroutine per packet and no in-flight store. Its up messages are encoded
// before the run (a publish is one write call), the broker's PUBACKs are read and dropped
// (only the store's ack counts, as for the agent), and each acks message is PUBACKed and
// decoded with the agent's decoder.
//
// It stands in for paho in the load generator because the generator shares the machine's
// two cores with the system it measures: through paho it took a third of a core at
// 5,000 sales/s (a goroutine handoff per packet each way), which real terminals, each on its
// own device, take from nobody. The latency it reports is still from just before the write
// of the up message to just after the read of its ack.
type leanTerm struct {
	conn net.Conn
	r    *bufio.Reader
	wmu  sync.Mutex // writes: the sender's publishes and the reader's PUBACKs
	done chan struct{}
	err  error // why the reader stopped (set before done is closed)

	closeOnce sync.Once
}

// dialLeanTerm connects terminal's client to broker (tcp://host:port), subscribes to its down
// topic with QoS 1 and starts reading; onAcks gets every acks message with the time it was
// read.
func dialLeanTerm(b *testing.B, broker, terminal string, onAcks func(a *wire.Acks, at time.Time)) *leanTerm {
	b.Helper()
	u, err := url.Parse(broker)
	if err != nil {
		b.Fatal(err)
	}
	conn, err := net.DialTimeout("tcp", u.Host, 10*time.Second)
	if err != nil {
		b.Fatalf("dial %s: %v", broker, err)
	}
	t := &leanTerm{conn: conn, r: bufio.NewReaderSize(conn, 64<<10), done: make(chan struct{})}
	b.Cleanup(func() { _ = t.close() })
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	var buf bytes.Buffer
	connect := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect}, ProtocolVersion: 4,
		Connect: packets.ConnectParams{ProtocolName: []byte("MQTT"), Clean: true, Keepalive: 60,
			ClientIdentifier: "bench-" + terminal}}
	if err := connect.ConnectEncode(&buf); err != nil {
		b.Fatal(err)
	}
	sub := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1}, ProtocolVersion: 4,
		PacketID: 1, Filters: packets.Subscriptions{{Filter: wire.DownTopic(benchStoreID, terminal), Qos: 1}}}
	if err := sub.SubscribeEncode(&buf); err != nil {
		b.Fatal(err)
	}
	if _, err := conn.Write(buf.Bytes()); err != nil {
		b.Fatalf("connect %s: %v", terminal, err)
	}
	for _, want := range []byte{packets.Connack, packets.Suback} {
		fh, body, err := t.read()
		if err != nil {
			b.Fatalf("connect %s: %v", terminal, err)
		}
		if fh.Type != want {
			b.Fatalf("connect %s: packet type %d, want %d", terminal, fh.Type, want)
		}
		pk := packets.Packet{FixedHeader: fh, ProtocolVersion: 4}
		switch want {
		case packets.Connack:
			if err := pk.ConnackDecode(body); err != nil || pk.ReasonCode != 0 {
				b.Fatalf("connect %s: refused (code %d, %v)", terminal, pk.ReasonCode, err)
			}
		case packets.Suback:
			if err := pk.SubackDecode(body); err != nil || len(pk.ReasonCodes) != 1 || pk.ReasonCodes[0] > 2 {
				b.Fatalf("subscribe %s: refused (%v, %v)", terminal, pk.ReasonCodes, err)
			}
		}
	}
	_ = conn.SetDeadline(time.Time{})
	// The reader carries the label role=bench, like the paho clients' goroutines.
	go pprof.Do(context.Background(), pprof.Labels("role", "bench"), func(context.Context) { t.readAcks(b, terminal, onAcks) })
	return t
}

// read reads one packet: its fixed header and its body.
func (t *leanTerm) read() (packets.FixedHeader, []byte, error) {
	var fh packets.FixedHeader
	hb, err := t.r.ReadByte()
	if err != nil {
		return fh, nil, err
	}
	if err := fh.Decode(hb); err != nil {
		return fh, nil, err
	}
	if fh.Remaining, _, err = packets.DecodeLength(t.r); err != nil {
		return fh, nil, err
	}
	body := make([]byte, fh.Remaining)
	_, err = io.ReadFull(t.r, body)
	return fh, body, err
}

// readAcks reads until the connection closes: acks messages are PUBACKed and handed to
// onAcks; PUBACKs of the terminal's own publishes are dropped.
func (t *leanTerm) readAcks(b *testing.B, terminal string, onAcks func(a *wire.Acks, at time.Time)) {
	defer close(t.done)
	var out bytes.Buffer
	for {
		fh, body, err := t.read()
		if err != nil {
			t.err = err
			return
		}
		now := time.Now()
		switch fh.Type {
		case packets.Publish:
			pk := packets.Packet{FixedHeader: fh, ProtocolVersion: 4}
			if err := pk.PublishDecode(body); err != nil {
				t.err = err
				return
			}
			if fh.Qos > 0 {
				out.Reset()
				ack := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Puback}, PacketID: pk.PacketID}
				_ = ack.PubackEncode(&out)
				if err := t.write(out.Bytes()); err != nil {
					t.err = err
					return
				}
			}
			a, err := wire.DecodeAcks(pk.Payload) // as the agent reads them
			if err != nil {
				b.Errorf("acks for %s: %v", terminal, err)
				continue
			}
			onAcks(&a, now)
		case packets.Puback, packets.Pingresp:
		default:
			t.err = fmt.Errorf("unexpected packet type %d", fh.Type)
			return
		}
	}
}

// encodePublish returns the QoS 1 PUBLISH of payload on topic with packet id id (1 … 65535;
// ids must differ among publishes not yet PUBACKed).
func encodePublish(topic string, id uint16, payload []byte) []byte {
	pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, ProtocolVersion: 4,
		TopicName: topic, PacketID: id, Payload: payload}
	var buf bytes.Buffer
	if err := pk.PublishEncode(&buf); err != nil {
		panic(err)
	}
	return buf.Bytes()
}

func (t *leanTerm) write(p []byte) error {
	t.wmu.Lock()
	defer t.wmu.Unlock()
	_, err := t.conn.Write(p)
	return err
}

// close sends DISCONNECT, closes the connection and waits for the reader. It returns why the
// reader stopped before that, if it did (a broker that drops a terminal mid-run also shows
// as acks missing).
func (t *leanTerm) close() error {
	t.closeOnce.Do(func() {
		_ = t.write([]byte{packets.Disconnect << 4, 0})
		_ = t.conn.Close()
	})
	<-t.done
	if t.err != nil && !errors.Is(t.err, net.ErrClosed) && !errors.Is(t.err, io.EOF) {
		return t.err
	}
	return nil
}
