package main

import (
	"context"
	"testing"
	"time"

	"github.com/posgate/posgate/internal/certtest"
	"github.com/posgate/posgate/internal/stack"
	"github.com/posgate/posgate/store-server/client"
)

const (
	redisPassOfTests    = "redis-pass-of-the-tests"
	sentinelPassOfTests = "sentinel-pass-of-the-tests"
)

// tradesThroughRedis checks that the store's gate decides in Redis: a stock adjustment
// lands in Redis as in the ledger.
func tradesThroughRedis(t *testing.T, srv *biServer) {
	t.Helper()
	srv.waitMode(t, client.ModeRedis, 20*time.Second)
	srv.importCSV(t, []byte(biCatalogCSV))
	if qty, applied := srv.adjust(t, "adj-redis-auth", "A1", 25, "adjust"); qty != 25 || !applied {
		t.Fatalf("adjust: qty %d applied %v", qty, applied)
	}
	row := srv.stock(t)["A1"]
	if row.Redis == nil || *row.Redis != 25 || row.Ledger != 25 {
		t.Fatalf("A1: ledger %d, Redis %v; want 25 in both", row.Ledger, biDeref(row.Redis))
	}
}

// TestRedisOverTLSWithPassword: the store reaches Redis on its own TLS port
// (--redis-tls-ca) with its requirepass (--redis-password-file) and trades through it; with
// no password, or with no TLS on the TLS port, it never gets to Redis mode.
func TestRedisOverTLSWithPassword(t *testing.T) {
	t.Parallel()
	ca := certtest.NewCA(t)
	cert, key := ca.IssueFiles(t, time.Now().Add(time.Hour))
	s := stack.Run(t, stack.Options{Redis: true, MQTT: true, RedisPassword: redisPassOfTests,
		RedisTLS: &stack.TLSFiles{Cert: cert, Key: key, CA: ca.Path}})
	tradesThroughRedis(t, biStartServer(t, s, "--redis-addr", s.Redis[0].TLSAddr(), "--redis-tls-ca", ca.Path,
		"--redis-password-file", secretFile(t, redisPassOfTests)))

	for name, args := range map[string][]string{
		"no password": {"--redis-addr", s.Redis[0].TLSAddr(), "--redis-tls-ca", ca.Path},
		"no TLS":      {"--redis-addr", s.Redis[0].TLSAddr(), "--redis-password-file", secretFile(t, redisPassOfTests)},
		"wrong password": {"--redis-addr", s.Redis[0].TLSAddr(), "--redis-tls-ca", ca.Path,
			"--redis-password-file", secretFile(t, "not-the-password")},
	} {
		srv := biStartServer(t, s, args...)
		time.Sleep(2 * time.Second)
		if m, err := srv.manager().Mode(context.Background()); err != nil || m.Mode == client.ModeRedis {
			t.Errorf("%s: mode %q (%v), want the gate kept out of Redis", name, m.Mode, err)
		}
	}
}

// TestSentinelsWithPasswords: Redis asks for its password and the Sentinels for theirs
// (requirepass, sentinel auth-pass); the store finds the master through the Sentinels and
// trades through it.
func TestSentinelsWithPasswords(t *testing.T) {
	t.Parallel()
	s := stack.Run(t, stack.Options{Redis: true, Replicas: 1, Sentinels: 3, MQTT: true, RedisPassword: redisPassOfTests})
	tradesThroughRedis(t, biStartServer(t, s, "--redis-sentinels", joinAddrs(s.SentinelAddrs()), "--redis-master", s.MasterName,
		"--redis-password-file", secretFile(t, redisPassOfTests),
		"--redis-sentinel-password-file", secretFile(t, redisPassOfTests)))
}

func joinAddrs(a []string) string {
	out := ""
	for i, s := range a {
		if i > 0 {
			out += ","
		}
		out += s
	}
	return out
}
