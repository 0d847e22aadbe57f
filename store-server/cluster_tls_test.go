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
	resumesAfterFailover(t, srv, before)
	if m, err := clear.manager().Mode(ctx); err != nil || m.Mode == client.ModeRedis {
		t.Errorf("without --redis-tls-ca: mode %q (%v), want the gate kept out of Redis", m.Mode, err)
	}
}
