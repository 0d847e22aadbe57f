package broker

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/posgate/posgate/internal/stack"
	"github.com/posgate/posgate/internal/wire"
)

// TestPacketSizeBeforeLogin: clients that have not logged in (nothing but TCP connections)
// cannot make the broker reserve memory for their packets, and a connection that sends no
// CONNECT is closed. mochi reads a packet whole into a buffer of the length its header
// announces: with only MaximumPacketSize (4 MiB) as the bound, 40 five-byte headers took the
// heap from 4.5 MB to 175 MB. 200 half-open connections, half announcing a 4 MiB CONNECT
// (closed at once) and half one of MaxConnectBytes (held, up to 16 KiB each), move the heap
// by a few MB at most.
func TestPacketSizeBeforeLogin(t *testing.T) {
	stack.SkipShort(t) // it waits out the broker's 10 s deadline for a CONNECT
	// Not closed at the end: mochi's Close races (a data race, under -race) with the
	// goroutine of a connection it dropped before its CONNECT, which this test makes; the
	// listener goes with the test binary.
	b, err := Start(Config{Addr: "127.0.0.1:0", Store: "S1", Users: []User{mustUser(t, "t1", "p1-of-the-tests!", "T1")}})
	if err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	const conns = 200
	header := func(n int) []byte { // CONNECT with remaining length n, then nothing
		h := []byte{0x10}
		for {
			d := byte(n & 0x7f)
			n >>= 7
			if n > 0 {
				d |= 0x80
			}
			h = append(h, d)
			if n == 0 {
				return h
			}
		}
	}
	closed := 0
	for i := 0; i < conns; i++ {
		c, err := net.Dial("tcp", b.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		n := wire.MaxPacketBytes
		if i%2 == 1 {
			n = MaxConnectBytes
		}
		if _, err := c.Write(header(n)); err != nil {
			t.Fatal(err)
		}
		if n > MaxConnectBytes {
			c.SetReadDeadline(time.Now().Add(2 * time.Second))
			if _, err := c.Read(make([]byte, 1)); err != nil && !isTimeout(err) {
				closed++
			}
		}
	}
	time.Sleep(500 * time.Millisecond)
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	grew := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("heap grew by %.1f MiB for %d unauthenticated connections", float64(grew)/(1<<20), conns)
	if grew > 8<<20 {
		t.Fatalf("%d unauthenticated connections made the broker hold %.1f MiB", conns, float64(grew)/(1<<20))
	}
	if closed != conns/2 {
		t.Errorf("%d of the %d connections announcing a 4 MiB CONNECT were closed; want all", closed, conns/2)
	}

	// Silent after connecting: closed once its time for a CONNECT is up.
	c, err := net.Dial("tcp", b.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(ConnectWithin + 5*time.Second))
	start := time.Now()
	if _, err := c.Read(make([]byte, 1)); err == nil || time.Since(start) > ConnectWithin+2*time.Second {
		t.Fatalf("a connection that sent nothing: read %v after %v, want it closed within %v", err, time.Since(start), ConnectWithin)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// TestConnectionsCapped: with MaxConns connections held, a further client waits; once one
// goes, it logs in.
func TestConnectionsCapped(t *testing.T) {
	b, err := Start(Config{Addr: "127.0.0.1:0", Store: "S1", MaxConns: 3,
		Users: []User{mustUser(t, "t1", "p1-of-the-tests!", "T1")}})
	if err != nil {
		t.Fatal(err)
	}
	var held []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", b.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		held = append(held, c)
	}
	cl := paho.NewClient(paho.NewClientOptions().AddBroker(b.URL()).SetClientID("posgate-S1-T1").
		SetUsername("t1").SetPassword("p1-of-the-tests!").SetConnectTimeout(10 * time.Second).SetAutoReconnect(false))
	tok := cl.Connect()
	// A broker that served it would answer within milliseconds.
	if tok.WaitTimeout(500 * time.Millisecond) {
		t.Fatalf("a fourth client was answered while three connections were held: %v", tok.Error())
	}
	held[0].Close()
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("the waiting client after a held connection closed: %v (answered: %v)", tok.Error(), tok.WaitTimeout(0))
	}
	cl.Disconnect(0)
}

// TestClientIDSquat: a terminal's credentials cannot take another terminal's agent client
// id, posgate-{store}-{terminal}. The broker refused only an id another account held: after
// a restart of the broker (which keeps no sessions) the first account to use the id owned
// its session, and the terminal was locked out for as long as the broker ran.
func TestClientIDSquat(t *testing.T) {
	users := []User{mustUser(t, "t1", "p1-of-the-tests!", "T1"), mustUser(t, "t2", "p2-of-the-tests!", "T2")}
	b, _ := startBroker(t, users)
	// T1 (hostile) takes T2's agent client id before T2 connects, with a persistent session,
	// and leaves: the session stays, bound to t1.
	squat := paho.NewClient(paho.NewClientOptions().AddBroker(b.URL()).SetClientID("posgate-S1-T2").
		SetUsername("t1").SetPassword("p1-of-the-tests!").SetCleanSession(false).SetAutoReconnect(false).
		SetConnectTimeout(5 * time.Second))
	if tok := squat.Connect(); tok.WaitTimeout(5*time.Second) && tok.Error() == nil {
		squat.Disconnect(50)
		t.Error("T1's account connected with T2's client id")
	}
	time.Sleep(100 * time.Millisecond)
	// T2's agent, with its own credentials and its own client id, as terminal-agent/uplink does.
	t2 := paho.NewClient(paho.NewClientOptions().AddBroker(b.URL()).SetClientID("posgate-S1-T2").
		SetUsername("t2").SetPassword("p2-of-the-tests!").SetCleanSession(false).SetAutoReconnect(false).
		SetConnectTimeout(5 * time.Second))
	tok := t2.Connect()
	if !tok.WaitTimeout(5 * time.Second) {
		t.Fatal("T2 connect timed out")
	}
	if tok.Error() != nil {
		t.Fatalf("T2, with its own credentials and client id, is locked out by T1's squat: %v", tok.Error())
	}
	t2.Disconnect(50)
}

// TestUsersFileWithoutAccounts: a credentials file with no accounts (null, as a tool writes an
// empty list, or []) is refused: read as no users, it admitted anyone on any address.
func TestUsersFileWithoutAccounts(t *testing.T) {
	for _, body := range []string{"null", "[]", " null\n"} {
		path := filepath.Join(t.TempDir(), "users.json")
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if users, err := LoadUsers(path); err == nil {
			t.Errorf("users file %q: %v accounts and no error", body, users)
		}
	}
}

// TestKeptSessionsOnlyUnderTheAgentID: a terminal's account keeps a session across
// disconnects only under its agent's client id. Under any other id it connects with a
// session that ends with the connection; before, every new id left a session behind,
// subscriptions and queued messages, for as long as the broker ran.
func TestKeptSessionsOnlyUnderTheAgentID(t *testing.T) {
	users := []User{mustUser(t, "t1", "p1-of-the-tests!", "T1")}
	b, _ := startBroker(t, users)
	dial := func(id string, clean bool) error {
		c := paho.NewClient(paho.NewClientOptions().AddBroker(b.URL()).SetClientID(id).
			SetUsername("t1").SetPassword("p1-of-the-tests!").SetCleanSession(clean).SetAutoReconnect(false).
			SetConnectTimeout(5 * time.Second))
		tok := c.Connect()
		if !tok.WaitTimeout(5 * time.Second) {
			t.Fatalf("connect %s: timed out", id)
		}
		if tok.Error() != nil {
			return tok.Error()
		}
		c.Subscribe(wire.DownTopic("S1", "T1"), 1, nil).WaitTimeout(5 * time.Second)
		c.Disconnect(50)
		return nil
	}
	kept := func(id string) bool {
		time.Sleep(50 * time.Millisecond) // the broker ends the connection after DISCONNECT
		_, ok := b.srv.Clients.Get(id)
		return ok
	}
	for i := range 3 {
		id := fmt.Sprintf("tool-%d", i)
		if err := dial(id, false); err == nil {
			t.Errorf("%s with a kept session: connected", id)
		}
		if kept(id) {
			t.Errorf("%s: a session is kept after a refused connection", id)
		}
		if err := dial(id, true); err != nil {
			t.Errorf("%s with a clean session: %v", id, err)
		}
		if kept(id) {
			t.Errorf("%s: a clean session is kept after its connection", id)
		}
	}
	if err := dial("posgate-S1-T1", false); err != nil {
		t.Fatalf("the agent's client id with a kept session: %v", err)
	}
	if !kept("posgate-S1-T1") {
		t.Error("the agent's session is not kept across a disconnect")
	}
}

func TestSessionEndsWithConnection(t *testing.T) {
	v3 := func(clean bool) packets.Packet {
		return packets.Packet{ProtocolVersion: 4, Connect: packets.ConnectParams{Clean: clean}}
	}
	v5 := func(clean bool, expiry uint32) packets.Packet {
		pk := packets.Packet{ProtocolVersion: 5, Connect: packets.ConnectParams{Clean: clean}}
		pk.Properties.SessionExpiryInterval = expiry
		pk.Properties.SessionExpiryIntervalFlag = expiry != 0
		return pk
	}
	for _, c := range []struct {
		pk   packets.Packet
		want bool
	}{
		{v3(true), true}, {v3(false), false},
		{v5(true, 0), true}, {v5(false, 0), true}, {v5(true, 60), false}, {v5(false, 60), false},
	} {
		if got := sessionEndsWithConnection(c.pk); got != c.want {
			t.Errorf("version %d clean %v expiry %d: %v, want %v", c.pk.ProtocolVersion, c.pk.Connect.Clean,
				c.pk.Properties.SessionExpiryInterval, got, c.want)
		}
	}
}
