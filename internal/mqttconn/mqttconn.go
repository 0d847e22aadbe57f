// Package mqttconn sets up posgate's MQTT clients (paho): TCP connections with their reads
// going through a buffer, and a store that keeps its own copies of outbound messages.
// paho reads each packet's fixed header a byte at a time: an up message or an acks message
// costs four read system calls, a PUBACK three. Through the buffer, one read call takes
// whatever has arrived.
package mqttconn

import (
	"bufio"
	"net"
	"net/url"

	mqtt "github.com/eclipse/paho.mqtt.golang"
)

// readBuffer is the most one read call takes.
const readBuffer = 64 << 10

// buffered is a connection whose reads go through a buffer. Only paho's reader goroutine
// reads; writes go straight to the connection.
type buffered struct {
	net.Conn
	r *bufio.Reader
}

// Buffered returns c with its reads going through a buffer.
func Buffered(c net.Conn) net.Conn { return &buffered{Conn: c, r: bufio.NewReaderSize(c, readBuffer)} }

func (b *buffered) Read(p []byte) (int, error) { return b.r.Read(p) }

// Use makes opts open a tcp:// or mqtt:// broker with a Buffered connection, passed through
// wrap if wrap is not nil (other schemes, tls:// and ws://, keep paho's own way), and makes
// its store keep its own copies (OwnCopies).
func Use(opts *mqtt.ClientOptions, broker string, wrap func(net.Conn) net.Conn) {
	OwnCopies(opts)
	u, err := url.Parse(broker)
	if err != nil || (u.Scheme != "tcp" && u.Scheme != "mqtt") {
		return
	}
	opts.SetCustomOpenConnectionFn(func(uri *url.URL, o mqtt.ClientOptions) (net.Conn, error) {
		c, err := net.DialTimeout("tcp", uri.Host, o.ConnectTimeout)
		if err != nil {
			return nil, err
		}
		c = Buffered(c)
		if wrap != nil {
			c = wrap(c)
		}
		return c, nil
	})
}
