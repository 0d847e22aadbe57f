package main

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// A store on a Redis Cluster shared by many stores: every key of the store carries its hash
// tag "{store}" (store-server/gate), so they all live in one slot, on one master, and each
// script call of the store runs there. The cluster client sends every keyed command to the
// master of its slot; clusterGate sends the two keyless ones the gate uses (PING, INFO) there
// too, and the store watches that master (watchCluster): when another node serves the slot
// (its master died and a replica took over, without the writes it had not received), the
// store rebuilds its projection from the ledger. A store whose master did not change never
// pauses.

// slotKey is a key of the store, whose slot is the store's: that of every key of the gate.
func slotKey(store string) string { return "pg:{" + store + "}:stock" }

// clusterGate is the gate's client on a Redis Cluster: the cluster client, with PING and
// INFO (keyless, which the cluster client would send to any node) sent to the master of
// the store's slot, the server the gate's projection lives on.
type clusterGate struct {
	*redis.ClusterClient
	key string // slotKey of the store
}

// Ping pings the master of the store's slot.
func (c clusterGate) Ping(ctx context.Context) *redis.StatusCmd {
	m, err := c.MasterForKey(ctx, c.key)
	if err != nil {
		cmd := redis.NewStatusCmd(ctx, "ping")
		cmd.SetErr(err)
		return cmd
	}
	return m.Ping(ctx)
}

// Info asks the master of the store's slot.
func (c clusterGate) Info(ctx context.Context, section ...string) *redis.StringCmd {
	m, err := c.MasterForKey(ctx, c.key)
	if err != nil {
		cmd := redis.NewStringCmd(ctx, "info")
		cmd.SetErr(err)
		return cmd
	}
	return m.Info(ctx, section...)
}

// servesSlotOf reports whether the node at the other end of cn is, as it sees itself, the
// master serving the slot of key: the cluster client opens connections to every node (to
// learn the slots, to route other stores' commands), and only one to the store's master
// may tell the gate that its projection's server changed (gate.Gate.Connected).
func servesSlotOf(ctx context.Context, cn *redis.Conn, key string) (bool, error) {
	slot, err := cn.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		return false, err
	}
	nodes, err := cn.ClusterNodes(ctx).Result()
	if err != nil {
		return false, err
	}
	for line := range strings.Lines(nodes) {
		f := strings.Fields(line)
		if len(f) < 8 || !strings.Contains(f[2], "myself") {
			continue
		}
		if !strings.Contains(f[2], "master") {
			return false, nil
		}
		for _, r := range f[8:] {
			if inRange(r, slot) {
				return true, nil
			}
		}
		return false, nil
	}
	return false, errors.New("CLUSTER NODES names no node as myself")
}

// inRange reports whether a slot range of CLUSTER NODES ("5461", "0-5460"; a slot being
// moved, "[42->-id]", is not served) holds slot.
func inRange(r string, slot int64) bool {
	lo, hi, found := strings.Cut(r, "-")
	a, err := strconv.ParseInt(lo, 10, 64)
	if err != nil {
		return false
	}
	b := a
	if found {
		if b, err = strconv.ParseInt(hi, 10, 64); err != nil {
			return false
		}
	}
	return a <= slot && slot <= b
}

// clusterEvery is how often watchCluster asks which node serves the store's slot.
var clusterEvery = 250 * time.Millisecond

// firstSlotServer is the server of the store's slot (slotServer) before the store builds
// its projection, "" if the cluster does not answer within clusterFirstWait.
func firstSlotServer(ctx context.Context, rdb *redis.ClusterClient, key string) string {
	ctx, cancel := context.WithTimeout(ctx, clusterFirstWait)
	defer cancel()
	id, _ := slotServer(ctx, rdb, key)
	return id
}

// clusterFirstWait bounds firstSlotServer, which the store's start waits for.
const clusterFirstWait = 2 * time.Second

// watchCluster follows the master of the store's slot until ctx is done: when another
// server serves it than last (another node, or the same one restarted: its run_id), it
// asks for a rebuild. last is the server seen before the store built its projection
// (firstSlotServer): a failover between that build and the watch's first look is a change
// too. When it is "" (the cluster did not answer then), the first server seen asks for a
// rebuild, since the projection may have been built on another. It looks again every
// clusterEvery, and has the cluster client learn the slots anew each time, so that the
// client sends the store's commands to the new master soon after a failover.
func watchCluster(ctx context.Context, rdb *redis.ClusterClient, key, last string, rebuild func(), log *slog.Logger) {
	t := time.NewTicker(clusterEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rdb.ReloadState(ctx)
		id, err := slotServer(ctx, rdb, key)
		if err != nil {
			continue // down or failing over: the gate's own errors say so
		}
		if id != last {
			log.Warn("redis cluster: another server serves the store's slot; rebuilding the projection",
				"was", last, "now", id)
			rebuild()
		}
		last = id
	}
}

// slotServer returns the address and run_id of the master serving key's slot.
func slotServer(ctx context.Context, rdb *redis.ClusterClient, key string) (string, error) {
	m, err := rdb.MasterForKey(ctx, key)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	info, err := m.Info(ctx, "server").Result()
	if err != nil {
		return "", err
	}
	for line := range strings.Lines(info) {
		if id, ok := strings.CutPrefix(strings.TrimSpace(line), "run_id:"); ok {
			return m.Options().Addr + "/" + id, nil
		}
	}
	return "", errors.New("INFO server names no run_id")
}
