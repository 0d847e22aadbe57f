package bus

import (
	"bytes"
	"errors"
	"net"
	"sync"
	"testing"
	"time"
)

// recConn records the write calls made on it.
type recConn struct {
	net.Conn
	mu     sync.Mutex
	writes [][]byte
	fail   error
	closed bool
}

func (r *recConn) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail != nil {
		return 0, r.fail
	}
	r.writes = append(r.writes, bytes.Clone(p))
	return len(p), nil
}

func (r *recConn) Close() error { r.mu.Lock(); r.closed = true; r.mu.Unlock(); return nil }

func (r *recConn) got() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, w := range r.writes {
		out = append(out, string(w))
	}
	return out
}

func TestCoalescingConn(t *testing.T) {
	const window = 50 * time.Millisecond
	t.Run("idle writes go at once, a burst together", func(t *testing.T) {
		r := &recConn{}
		c := newCoalescingConn(r, window)
		mustWrite(t, c, "a")
		if got := r.got(); len(got) != 1 || got[0] != "a" {
			t.Fatalf("after an idle write: %q", got)
		}
		mustWrite(t, c, "b")
		mustWrite(t, c, "c")
		if got := r.got(); len(got) != 1 {
			t.Fatalf("a burst went out before the window: %q", got)
		}
		time.Sleep(3 * window)
		if got := r.got(); len(got) != 2 || got[1] != "bc" {
			t.Fatalf("after the window: %q, want [a bc]", got)
		}
		mustWrite(t, c, "d") // idle again
		if got := r.got(); len(got) != 3 || got[2] != "d" {
			t.Fatalf("after an idle write: %q", got)
		}
	})
	t.Run("a full buffer goes at once", func(t *testing.T) {
		r := &recConn{}
		c := newCoalescingConn(r, time.Hour)
		mustWrite(t, c, "x") // idle: at once
		mustWrite(t, c, "y") // waits for the window
		big := string(bytes.Repeat([]byte{'z'}, maxPending))
		mustWrite(t, c, big) // fills the buffer: "y" and it go at once
		if got := r.got(); len(got) != 2 || got[0] != "x" || got[1] != "y"+big {
			t.Fatalf("%d writes, want [x y+64KiB]", len(got))
		}
	})
	t.Run("close sends what waits", func(t *testing.T) {
		r := &recConn{}
		c := newCoalescingConn(r, time.Hour)
		mustWrite(t, c, "a")
		mustWrite(t, c, "b")
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		if got := r.got(); len(got) != 2 || got[1] != "b" || !r.closed {
			t.Fatalf("after Close: %q, closed %v", got, r.closed)
		}
	})
	t.Run("a failed write fails the next ones and closes", func(t *testing.T) {
		boom := errors.New("boom")
		r := &recConn{fail: boom}
		c := newCoalescingConn(r, window)
		if _, err := c.Write([]byte("a")); !errors.Is(err, boom) {
			t.Fatalf("Write = %v, want boom", err)
		}
		if _, err := c.Write([]byte("b")); !errors.Is(err, boom) || !r.closed {
			t.Fatalf("Write after a failure = %v, closed %v", err, r.closed)
		}
	})
}

func mustWrite(t *testing.T, c net.Conn, s string) {
	t.Helper()
	if n, err := c.Write([]byte(s)); err != nil || n != len(s) {
		t.Fatalf("Write(%q) = %d, %v", s, n, err)
	}
}
