package broker

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"
)

// MaxConnectBytes bounds a CONNECT packet, the only packet a client sends before it has
// logged in: its client id, user name, password and last will (an agent's status message)
// take well under a kilobyte.
const MaxConnectBytes = 16 << 10

// DefaultMaxConns bounds the connections the broker holds at once when Config.MaxConns is
// 0, logged in or not: a store's tills and tools, many times over.
const DefaultMaxConns = 1024

// connectListener hands mochi only connections that have sent a whole CONNECT packet (and,
// over TLS, finished their handshake), within ConnectWithin and MaxConnectBytes. mochi makes
// a client at accept (its queue of pending writes, some 128 KiB) and reads a packet into a
// buffer of the length its header announces: handed a bare connection, 40 five-byte headers
// took the heap from 4.5 MB to 175 MB. Here a connection that has not logged in costs its
// goroutine and the bytes it actually sent, and at most maxConns connections are held.
type connectListener struct {
	ln       net.Listener
	tls      *tls.Config
	log      *slog.Logger
	slots    chan struct{} // one per connection held, until it closes
	ready    chan net.Conn
	done     chan struct{}
	doneOnce sync.Once
}

func newConnectListener(ln net.Listener, cfg *tls.Config, maxConns int, log *slog.Logger) *connectListener {
	l := &connectListener{ln: ln, tls: cfg, log: log, slots: make(chan struct{}, maxConns),
		ready: make(chan net.Conn), done: make(chan struct{})}
	go l.acceptLoop()
	return l
}

func (l *connectListener) acceptLoop() {
	for {
		select {
		case l.slots <- struct{}{}:
		case <-l.done:
			return
		}
		c, err := l.ln.Accept()
		if err != nil {
			<-l.slots
			if errors.Is(err, net.ErrClosed) {
				return
			}
			l.log.Warn("mqtt accept", "err", err)
			time.Sleep(50 * time.Millisecond)
			continue
		}
		go l.admit(&slotConn{Conn: c, free: func() { <-l.slots }})
	}
}

// admit reads c's CONNECT and hands c to mochi, or closes it.
func (l *connectListener) admit(c net.Conn) {
	_ = c.SetDeadline(time.Now().Add(ConnectWithin))
	if l.tls != nil {
		tc := tls.Server(c, l.tls)
		if err := tc.Handshake(); err != nil {
			c.Close()
			return
		}
		c = tc
	}
	first, err := readConnect(c)
	if err != nil {
		l.log.Debug("mqtt connection closed before its CONNECT", "remote", c.RemoteAddr().String(), "err", err)
		c.Close()
		return
	}
	// mochi replaces the deadline with the keepalive's once the client is in.
	_ = c.SetDeadline(time.Now().Add(ConnectWithin))
	select {
	case l.ready <- &replayConn{Conn: c, pre: first}:
	case <-l.done:
		c.Close()
	}
}

// readConnect reads the first packet of c whole, refusing one whose header announces more
// than MaxConnectBytes (MQTT 3.1.1 §2.2.3: a type byte, then the remaining length in one to
// four bytes of seven bits each). What it holds grows with what c sent, never with what the
// header announced.
func readConnect(c net.Conn) ([]byte, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(c, hdr[:1]); err != nil {
		return nil, err
	}
	n, shift, i := 0, uint(0), 1
	for ; ; i++ {
		if i == len(hdr) {
			return nil, errors.New("malformed remaining length")
		}
		if _, err := io.ReadFull(c, hdr[i:i+1]); err != nil {
			return nil, err
		}
		n |= int(hdr[i]&0x7f) << shift
		shift += 7
		if n > MaxConnectBytes {
			return nil, fmt.Errorf("first packet announces more than %d bytes", MaxConnectBytes)
		}
		if hdr[i]&0x80 == 0 {
			break
		}
	}
	var buf bytes.Buffer
	buf.Write(hdr[:i+1])
	if _, err := buf.ReadFrom(io.LimitReader(c, int64(n))); err != nil {
		return nil, err
	}
	if buf.Len() != i+1+n {
		return nil, io.ErrUnexpectedEOF
	}
	return buf.Bytes(), nil
}

// Accept returns the next connection that has sent its CONNECT.
func (l *connectListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ready:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close stops accepting; connections already handed out stay.
func (l *connectListener) Close() error {
	l.doneOnce.Do(func() { close(l.done) })
	return l.ln.Close()
}

// Addr is the listening address.
func (l *connectListener) Addr() net.Addr { return l.ln.Addr() }

// slotConn gives its listener's slot back when it closes.
type slotConn struct {
	net.Conn
	once sync.Once
	free func()
}

func (c *slotConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.free)
	return err
}

// replayConn reads pre (the CONNECT already read) before the rest of the connection.
type replayConn struct {
	net.Conn
	pre []byte
}

func (c *replayConn) Read(p []byte) (int, error) {
	if len(c.pre) > 0 {
		n := copy(p, c.pre)
		c.pre = c.pre[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}
