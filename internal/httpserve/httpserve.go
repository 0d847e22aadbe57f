// Package httpserve builds posgate's HTTP servers with limits a slow or hostile client
// cannot get around: how long it may take to send its headers and body, how long an answer
// may take to write, how long an idle connection stays, how large its headers may be, and
// how many connections it may hold at once. Every posgate HTTP server (the manager API and
// dashboard, HQ's receiver, the metrics endpoints) is made here, so none is left without them.
//
// A handler that streams for longer than Limits.Write (a backup download) sets its own
// deadline with http.ResponseController as it makes progress.
package httpserve

import (
	"net"
	"net/http"
	"time"

	"golang.org/x/net/netutil"
)

// Limits bound what one client may hold of a server.
type Limits struct {
	ReadHeader time.Duration // to send the request line and headers
	Read       time.Duration // to send the whole request, body included
	Write      time.Duration // to take the whole answer
	Idle       time.Duration // a kept-alive connection between requests
	// MaxHeaderBytes bounds the request line and headers.
	MaxHeaderBytes int
	// MaxConns bounds the connections served at once; a further one waits in the kernel's
	// queue until one closes.
	MaxConns int
}

// Default is the limits of a server answering small requests: the manager API, the
// metrics endpoints.
var Default = Limits{
	ReadHeader:     5 * time.Second,
	Read:           30 * time.Second,
	Write:          60 * time.Second,
	Idle:           60 * time.Second,
	MaxHeaderBytes: 16 << 10,
	MaxConns:       256,
}

// Server returns a server of h with the limits l.
func Server(h http.Handler, l Limits) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: l.ReadHeader,
		ReadTimeout:       l.Read,
		WriteTimeout:      l.Write,
		IdleTimeout:       l.Idle,
		MaxHeaderBytes:    l.MaxHeaderBytes,
	}
}

// Listener caps the connections ln hands out at l.MaxConns (none when it is 0 or less).
func Listener(ln net.Listener, l Limits) net.Listener {
	if l.MaxConns <= 0 {
		return ln
	}
	return netutil.LimitListener(ln, l.MaxConns)
}

// Serve serves h on ln with the limits l until the server is shut down; it returns the
// server at once and sends Serve's error (never http.ErrServerClosed) to errc when errc is
// not nil.
func Serve(ln net.Listener, h http.Handler, l Limits, errc chan<- error) *http.Server {
	srv := Server(h, l)
	go func() {
		if err := srv.Serve(Listener(ln, l)); err != http.ErrServerClosed && errc != nil {
			errc <- err
		}
	}()
	return srv
}
