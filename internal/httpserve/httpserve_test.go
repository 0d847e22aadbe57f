package httpserve

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

func start(t *testing.T, l Limits) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Write([]byte("ok"))
	}), l, nil)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// closedWithin reports whether the server closes c within d.
func closedWithin(c net.Conn, d time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c)
	return err == nil // EOF: the server closed it; a timeout is an error
}

// TestSlowHeadersAreCut: a client that sends its headers a byte at a time and never ends
// them is dropped once ReadHeader has passed, not held for good.
func TestSlowHeadersAreCut(t *testing.T) {
	l := Default
	l.ReadHeader = 300 * time.Millisecond
	addr := start(t, l)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\nX-Slow: ")); err != nil {
		t.Fatal(err)
	}
	if !closedWithin(c, 3*time.Second) {
		t.Fatal("a connection with unfinished headers was held past ReadHeader")
	}
}

// TestSlowBodyIsCut: a client that announces a body and trickles it is dropped at Read.
func TestSlowBodyIsCut(t *testing.T) {
	l := Default
	l.Read = 400 * time.Millisecond
	addr := start(t, l)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\nab")); err != nil {
		t.Fatal(err)
	}
	if !closedWithin(c, 3*time.Second) {
		t.Fatal("a connection trickling its body was held past Read")
	}
}

// TestHeadersTooLarge: headers over MaxHeaderBytes are answered 431 without being read whole.
func TestHeadersTooLarge(t *testing.T) {
	addr := start(t, Default)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	big := "X-Big: " + strings.Repeat("a", 64<<10) + "\r\n"
	go c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n" + big + "\r\n"))
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("status %d, want 431", resp.StatusCode)
	}
}

// TestConnectionsCapped: with MaxConns held by idle clients, a further client is not
// served until one of them goes.
func TestConnectionsCapped(t *testing.T) {
	l := Default
	l.MaxConns = 3
	addr := start(t, l)
	var held []net.Conn
	for range l.MaxConns {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		held = append(held, c)
	}
	get := func() error {
		cl := &http.Client{Timeout: 500 * time.Millisecond, Transport: &http.Transport{DisableKeepAlives: true}}
		resp, err := cl.Get("http://" + addr + "/")
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	time.Sleep(100 * time.Millisecond) // the server accepted the three
	if err := get(); err == nil {
		t.Fatal("a fourth client was served while three connections were held")
	}
	held[0].Close()
	deadline := time.Now().Add(3 * time.Second)
	for get() != nil {
		if time.Now().After(deadline) {
			t.Fatal("no client served after a held connection closed")
		}
	}
}
