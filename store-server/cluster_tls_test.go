//go:build unix

package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/posgate/posgate/internal/certtest"
	"github.com/posgate/posgate/internal/stack"
	"github.com/posgate/posgate/store-server/client"
)

// TestClusterOverTLS: a store on a Redis Cluster whose nodes, bus and replication are TLS
// (--redis-cluster of the TLS ports, --redis-tls-ca) trades through it, follows its slot's
// master killed and its replica promoted (a rebuild, then Redis mode again) and trades on;
// without --redis-tls-ca the gate never gets to Redis mode.
func TestClusterOverTLS(t *testing.T) {
	t.Parallel()
	ca := certtest.NewCA(t)
	cert, key := ca.IssueFiles(t, time.Now().Add(time.Hour))
	s := stack.Run(t, stack.Options{Cluster: true, MQTT: true,
		RedisTLS: &stack.TLSFiles{Cert: cert, Key: key, CA: ca.Path}, ClusterTLS: true})
	nodes := strings.Join(s.ClusterTLSAddrs(), ",")
	clear := biStartServer(t, s, "--redis-cluster", nodes)
	srv := biStartServer(t, s, "--redis-cluster", nodes, "--redis-tls-ca", ca.Path)
	tradesThroughRedis(t, srv)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	slot, err := s.KeySlot(ctx, slotKey(biStoreID))
	if err != nil {
		t.Fatal(err)
	}
	master, err := s.SlotMaster(ctx, slot)
	if err != nil {
		t.Fatal(err)
	}
	before := must[client.ModeAnswer](t, "mode")(srv.manager().Mode(ctx)).Stats.Rebuilds
	if err := master.Kill(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.WaitClusterFailover(ctx, master, slot); err != nil {
		t.Fatal(err)
	}
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
	if m, err := clear.manager().Mode(ctx); err != nil || m.Mode == client.ModeRedis {
		t.Errorf("without --redis-tls-ca: mode %q (%v), want the gate kept out of Redis", m.Mode, err)
	}
}
