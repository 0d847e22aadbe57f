//go:build unix

package stack

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/posgate/posgate/internal/certtest"
)

// TestRedisPasswordAndTLS: with RedisPassword every node and sentinel refuses a client
// that does not AUTH and answers one that does; the sentinels still see the whole topology
// (Start waits for it); with RedisTLS each node also answers on its TLS port, to a client
// trusting the test's authority.
func TestRedisPasswordAndTLS(t *testing.T) {
	const pass = "redis-pass-of-the-tests"
	ca := certtest.NewCA(t)
	cert, key := ca.IssueFiles(t, time.Now().Add(time.Hour))
	s := Run(t, Options{Redis: true, Replicas: 1, Sentinels: 3, RedisPassword: pass,
		RedisTLS: &TLSFiles{Cert: cert, Key: key, CA: ca.Path}})
	ctx := context.Background()
	for _, p := range append(append([]*Proc{}, s.Redis...), s.Sentinels...) {
		var re respError
		if _, err := command(ctx, p.Addr(), "PING"); !errors.As(err, &re) || !strings.HasPrefix(string(re), "NOAUTH") {
			t.Errorf("%s: PING without AUTH: %v, want NOAUTH", p.Name, err)
		}
		if pong, err := commandStringAuth(ctx, p.Addr(), pass, "PING"); err != nil || pong != "PONG" {
			t.Errorf("%s: PING after AUTH: %q %v", p.Name, pong, err)
		}
		if _, err := commandAuth(ctx, p.Addr(), "wrong-password", "PING"); err == nil {
			t.Errorf("%s: a wrong password was taken", p.Name)
		}
	}
	for _, r := range s.Redis {
		if r.TLSPort == 0 {
			t.Fatalf("%s has no TLS port", r.Name)
		}
		conn, err := tls.Dial("tcp", r.TLSAddr(), &tls.Config{RootCAs: ca.Pool, MinVersion: tls.VersionTLS12})
		if err != nil {
			t.Fatalf("%s: TLS: %v", r.Name, err)
		}
		var b strings.Builder
		writeCommand(&b, "AUTH", pass)
		writeCommand(&b, "PING")
		if _, err := conn.Write([]byte(b.String())); err != nil {
			t.Fatal(err)
		}
		rd := bufio.NewReader(conn)
		ok, err1 := readReply(rd)
		pong, err2 := readReply(rd)
		conn.Close()
		if ok != "OK" || pong != "PONG" || err1 != nil || err2 != nil {
			t.Errorf("%s over TLS: AUTH %v (%v), PING %v (%v)", r.Name, ok, err1, pong, err2)
		}
	}
	if _, err := s.MasterAddr(ctx); err != nil {
		t.Errorf("MasterAddr through sentinels with a password: %v", err)
	}
}

// TestSentinelsOverTLS: with SentinelTLS the replica replicates and the sentinels monitor
// and find each other over the TLS ports (Start waits for the whole topology), and a client
// trusting the test's authority asks a sentinel over TLS for the master: a TLS address.
func TestSentinelsOverTLS(t *testing.T) {
	const pass = "redis-pass-of-the-tests"
	ca := certtest.NewCA(t)
	cert, key := ca.IssueFiles(t, time.Now().Add(time.Hour))
	s := Run(t, Options{Redis: true, Replicas: 1, Sentinels: 3, RedisPassword: pass,
		RedisTLS: &TLSFiles{Cert: cert, Key: key, CA: ca.Path}, SentinelTLS: true})
	ctx := context.Background()
	master, err := s.MasterAddr(ctx)
	if err != nil || master != s.Redis[0].TLSAddr() {
		t.Fatalf("master %q (%v), want redis-0's TLS address %s", master, err, s.Redis[0].TLSAddr())
	}
	for _, sn := range s.Sentinels {
		if sn.TLSPort == 0 {
			t.Fatalf("%s has no TLS port", sn.Name)
		}
		conn, err := tls.Dial("tcp", sn.TLSAddr(), &tls.Config{RootCAs: ca.Pool, MinVersion: tls.VersionTLS12})
		if err != nil {
			t.Fatalf("%s: TLS: %v", sn.Name, err)
		}
		var b strings.Builder
		writeCommand(&b, "AUTH", pass)
		writeCommand(&b, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", s.MasterName)
		if _, err := conn.Write([]byte(b.String())); err != nil {
			t.Fatal(err)
		}
		rd := bufio.NewReader(conn)
		ok, err1 := readReply(rd)
		addr, err2 := readReply(rd)
		conn.Close()
		if arr, _ := addr.([]any); ok != "OK" || err1 != nil || err2 != nil || len(arr) != 2 || arr[1] != strconv.Itoa(s.Redis[0].TLSPort) {
			t.Errorf("%s over TLS: AUTH %v (%v), master %v (%v)", sn.Name, ok, err1, addr, err2)
		}
	}
	info, err := commandStringAuth(ctx, s.Redis[1].Addr(), pass, "INFO", "replication")
	if err != nil || infoField(info, "master_port") != strconv.Itoa(s.Redis[0].TLSPort) {
		t.Errorf("the replica's master port %q (%v), want the master's TLS port %d", infoField(info, "master_port"), err, s.Redis[0].TLSPort)
	}
}
