package main

import (
	"context"
	"testing"
	"time"

	"github.com/posgate/posgate/internal/certtest"
	"github.com/posgate/posgate/internal/stack"
	"github.com/posgate/posgate/store-server/client"
)

// TestSentinelsOverTLS: Redis and the Sentinels speak TLS (each Sentinel on its tls-port,
// replication and the Sentinels' links over TLS, so the master they report is a TLS
// address) and ask for their passwords. The store finds the master through the Sentinels'
// TLS ports with --redis-tls-ca, trades through it, hears of a failover over TLS and trades
// through the new master; given the Sentinels' TLS ports without --redis-tls-ca it never
// gets to Redis mode.
func TestSentinelsOverTLS(t *testing.T) {
	t.Parallel()
	ca := certtest.NewCA(t)
	cert, key := ca.IssueFiles(t, time.Now().Add(time.Hour))
	s := stack.Run(t, stack.Options{Redis: true, Replicas: 1, Sentinels: 3, MQTT: true, RedisPassword: redisPassOfTests,
		RedisTLS: &stack.TLSFiles{Cert: cert, Key: key, CA: ca.Path}, SentinelTLS: true})
	sentinels := joinAddrs(s.SentinelTLSAddrs())
	passwords := []string{"--redis-password-file", secretFile(t, redisPassOfTests),
		"--redis-sentinel-password-file", secretFile(t, redisPassOfTests)}

	clear := biStartServer(t, s, append([]string{"--redis-sentinels", sentinels, "--redis-master", s.MasterName}, passwords...)...)
	srv := biStartServer(t, s, append([]string{"--redis-sentinels", sentinels, "--redis-master", s.MasterName,
		"--redis-tls-ca", ca.Path}, passwords...)...)
	tradesThroughRedis(t, srv)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	old, err := s.MasterAddr(ctx)
	if err != nil || old != s.Redis[0].TLSAddr() {
		t.Fatalf("master %q (%v), want redis-0's TLS address", old, err)
	}
	before := must[client.ModeAnswer](t, "mode")(srv.manager().Mode(ctx)).Stats.Rebuilds
	if err := s.Redis[0].Kill(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.WaitFailover(ctx, old); err != nil {
		t.Fatal(err)
	}
	// The store hears of the switch from the Sentinels over TLS and rebuilds on the new
	// master; the next adjustment lands there.
	resumesAfterFailover(t, srv, before)

	if m, err := clear.manager().Mode(ctx); err != nil || m.Mode == client.ModeRedis {
		t.Errorf("without --redis-tls-ca: mode %q (%v), want the gate kept out of Redis", m.Mode, err)
	}
}

// resumesAfterFailover waits until the store is in Redis mode again after a rebuild later
// than its rebuilds count before, then checks that an adjustment of A1 (25 before) lands in
// the ledger and in the Redis it rebuilt on.
func resumesAfterFailover(t *testing.T, srv *biServer, before int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	deadline := time.Now().Add(30 * time.Second)
	for {
		m := must[client.ModeAnswer](t, "mode")(srv.manager().Mode(ctx))
		if m.Mode == client.ModeRedis && m.Stats.Rebuilds > before {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the failover: mode %s, rebuilds %d (before %d)", m.Mode, m.Stats.Rebuilds, before)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if qty, applied := srv.adjust(t, "adj-after-failover", "A1", 5, "adjust"); qty != 30 || !applied {
		t.Fatalf("adjust after the failover: qty %d applied %v", qty, applied)
	}
	if row := srv.stock(t)["A1"]; row.Redis == nil || *row.Redis != 30 {
		t.Fatalf("A1 after the failover: ledger %d, Redis %v; want 30 in both", row.Ledger, biDeref(row.Redis))
	}
}
