package freeport

import (
	"net"
	"testing"
)

// TestPortBelowEphemeralRange: a picked port is free, can be bound, and lies below the
// kernel's ephemeral range, where no listener on port 0 and no outgoing connection takes it.
func TestPortBelowEphemeralRange(t *testing.T) {
	high := ephemeralLow()
	if high-low < 1000 {
		t.Fatalf("ephemeral range starts at %d: no room below it on this machine", high)
	}
	seen := map[int]bool{}
	for range 20 {
		p, err := Port()
		if err != nil {
			t.Fatal(err)
		}
		if p < low || p >= high {
			t.Fatalf("port %d is outside [%d, %d)", p, low, high)
		}
		seen[p] = true
	}
	if len(seen) < 15 {
		t.Fatalf("20 picks gave only %d ports: not random", len(seen))
	}
	a, err := Addr()
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", a)
	if err != nil {
		t.Fatalf("bind %s: %v", a, err)
	}
	l.Close()
}

// TestTakenPortNotFree: a port something listens on is not free; once closed, it is.
func TestTakenPortNotFree(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := l.Addr().(*net.TCPAddr).Port
	if free(p) {
		t.Fatalf("port %d reads free while listened on", p)
	}
	l.Close()
	if !free(p) {
		t.Fatalf("port %d reads taken after its listener closed", p)
	}
}
