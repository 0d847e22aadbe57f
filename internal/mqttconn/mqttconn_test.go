package mqttconn

import (
	"bytes"
	"io"
	"net"
	"testing"
)

// countConn counts the read calls made on it.
type countConn struct {
	net.Conn
	reads int
}

func (c *countConn) Read(p []byte) (int, error) { c.reads++; return c.Conn.Read(p) }

// TestBufferedReads reads packets the way paho does (a byte, a byte, then the rest) and gets
// every byte in order from one read call per burst that arrived together.
func TestBufferedReads(t *testing.T) {
	client, server := net.Pipe()
	defer client.Close()
	cc := &countConn{Conn: server}
	c := Buffered(cc)
	defer c.Close()
	var burst []byte
	for i := range 50 {
		burst = append(burst, 0x30, 3, 'a'+byte(i%26), 'b', 'c') // header, length, 3 bytes
	}
	go func() { _, _ = client.Write(burst) }() // net.Pipe: one Write is one Read's worth
	var got []byte
	for range 50 {
		head := make([]byte, 2)
		if _, err := io.ReadFull(c, head[:1]); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, head[1:]); err != nil {
			t.Fatal(err)
		}
		body := make([]byte, head[1])
		if _, err := io.ReadFull(c, body); err != nil {
			t.Fatal(err)
		}
		got = append(append(got, head...), body...)
	}
	if !bytes.Equal(got, burst) {
		t.Fatalf("read %q, want %q", got, burst)
	}
	if cc.reads != 1 {
		t.Errorf("%d read calls for 150 reads of one burst, want 1", cc.reads)
	}
}
