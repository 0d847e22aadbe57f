package bus

import (
	"net"
	"sync"
	"time"
)

// coalescingConn gathers a busy connection's writes into fewer write system calls. paho
// writes every packet on its own: a PUBACK for each up message, then
// an acks message per terminal at the end of each group, thousands a second on a busy store,
// and on a virtualized machine the system calls cost more than the bytes. A write to an idle
// connection (nothing written for window) goes out at once; under load, writes wait at
// most window and go out together, so the connection makes at most one write call per
// window (and one per 64 KiB). (Reads go through mqttconn's buffer, underneath.)
type coalescingConn struct {
	net.Conn
	window time.Duration

	mu      sync.Mutex
	buf     []byte
	last    time.Time // when the last write call was made
	pending bool      // a flush is scheduled
	err     error     // the first failed write call; every Write after it returns it
}

func newCoalescingConn(c net.Conn, window time.Duration) *coalescingConn {
	return &coalescingConn{Conn: c, window: window}
}

// maxPending is how much waits before a write call is made at once.
const maxPending = 64 << 10

func (c *coalescingConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return 0, c.err
	}
	c.buf = append(c.buf, p...)
	switch since := time.Since(c.last); {
	case len(c.buf) >= maxPending || (!c.pending && since >= c.window):
		c.flushLocked()
	case !c.pending:
		c.pending = true
		time.AfterFunc(c.window-since, c.flush)
	}
	if c.err != nil {
		return 0, c.err
	}
	return len(p), nil
}

func (c *coalescingConn) flush() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pending = false
	c.flushLocked()
}

func (c *coalescingConn) flushLocked() {
	if len(c.buf) == 0 || c.err != nil {
		return
	}
	_, err := c.Conn.Write(c.buf)
	c.last = time.Now()
	c.buf = c.buf[:0]
	if err != nil {
		// paho learns of it from the next Write or from its reader, which closing wakes.
		c.err = err
		_ = c.Conn.Close()
	}
}

// Close sends what is waiting, then closes the connection.
func (c *coalescingConn) Close() error {
	c.mu.Lock()
	c.flushLocked()
	c.mu.Unlock()
	return c.Conn.Close()
}
