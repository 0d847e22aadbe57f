// Package freeport picks loopback TCP ports for the servers tests start as processes of
// their own (redis-server, mosquitto, store-server, terminal-agent), which must be told their
// port before they bind it.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// Ports are picked from [low, the kernel's ephemeral range). The kernel hands out ports
// from that range for every listener on port 0 and as the source port of every outgoing
// connection, so a port it chose and that was then closed, to be passed to a server, could
// be taken again by any test's connection before the server bound it. A port below the
// range can only be taken meanwhile by another caller of Port.
const low = 10000

// ephemeralRange is where Linux keeps its ephemeral ports.
const ephemeralRange = "/proc/sys/net/ipv4/ip_local_port_range"

// Port returns a loopback TCP port that is free now, chosen at random below the kernel's
// ephemeral range (from the kernel's range itself if nothing below it is free).
func Port() (int, error) {
	high := ephemeralLow()
	if high-low >= 1000 {
		for range 100 {
			p := low + rand.IntN(high-low)
			if free(p) {
				return p, nil
			}
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Addr returns "127.0.0.1:port" for a Port.
func Addr() (string, error) {
	p, err := Port()
	if err != nil {
		return "", err
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(p)), nil
}

func free(port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// ephemeralLow reads the low end of the kernel's ephemeral range (32768, Linux's default,
// when it cannot be read).
func ephemeralLow() int {
	b, err := os.ReadFile(ephemeralRange)
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 32768
	}
	n, err := strconv.Atoi(f[0])
	if err != nil || n <= 0 || n > 65535 {
		return 32768
	}
	return n
}
