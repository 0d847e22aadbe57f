//go:build unix

package stack

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"time"
)

// Cluster timings, short so that a fault test sees a replica promoted within seconds.
const (
	clusterNodeTimeout = 1000 // cluster-node-timeout, ms: a master silent this long is failing
	clusterMasters     = 3
	clusterReplicas    = 1 // per master
)

// startCluster starts the nodes of a Redis Cluster (clusterMasters masters, each with
// clusterReplicas replicas), has redis-cli create the cluster over them and waits until
// every node reports the cluster ok, every slot served and every replica in sync.
func (s *Stack) startCluster(ctx context.Context, bins binaries) error {
	n := clusterMasters * (1 + clusterReplicas)
	for i := range n {
		p, err := s.first(ctx, kindRedis, fmt.Sprintf("cluster-%d", i), bins.redis, func(p *Proc) string {
			if s.clusterTLS {
				return redisConf(p, 0) + clusterConf + s.tlsConf(p) + "tls-cluster yes\ntls-replication yes\n"
			}
			return redisConf(p, 0) + clusterConf
		}, nil)
		if err != nil {
			return err
		}
		s.Cluster = append(s.Cluster, p)
	}
	args := []string{"--cluster", "create"}
	if s.clusterTLS {
		// A node on a TLS cluster bus announces its TLS port and listens for the bus at
		// that port + 10000: the nodes must meet through their TLS ports.
		args = append([]string{"--tls", "--cacert", s.tls.CA}, append(args, s.ClusterTLSAddrs()...)...)
	} else {
		args = append(args, s.ClusterAddrs()...)
	}
	args = append(args, "--cluster-replicas", strconv.Itoa(clusterReplicas), "--cluster-yes")
	cctx, cancel := context.WithTimeout(ctx, topologyTimeout)
	defer cancel()
	out, err := exec.CommandContext(cctx, bins.cli, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("stack: redis-cli --cluster create: %w\n%s", err, out)
	}
	s.logf("stack: cluster of %d masters and %d replicas created", clusterMasters, clusterMasters*clusterReplicas)
	return s.poll(ctx, "the cluster to be ok on every node", s.clusterOK)
}

// clusterConf is what a cluster node's config adds to redisConf's.
var clusterConf = fmt.Sprintf(`cluster-enabled yes
cluster-config-file nodes.conf
cluster-node-timeout %d
# A master down leaves its slots unserved until its replica takes over; the other masters
# go on serving theirs (the stores on them never pause).
cluster-require-full-coverage no
# A replica may take over however long it was cut off from its master: posgate rebuilds
# the projection of every store whose slot moved anyway.
cluster-replica-validity-factor 0
`, clusterNodeTimeout)

// clusterOK checks that every running node says the cluster is ok with every slot served,
// and that every replica is in sync with its master.
func (s *Stack) clusterOK() error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	for _, p := range s.Cluster {
		if !p.Running() {
			continue
		}
		info, err := commandString(ctx, p.Addr(), "CLUSTER", "INFO")
		if err != nil {
			return fmt.Errorf("%s: %w", p.Name, err)
		}
		if st, slots := infoField(info, "cluster_state"), infoField(info, "cluster_slots_ok"); st != "ok" || slots != "16384" {
			return fmt.Errorf("%s: cluster_state %q, %s slots ok", p.Name, st, slots)
		}
		repl, err := commandString(ctx, p.Addr(), "INFO", "replication")
		if err != nil {
			return fmt.Errorf("%s: %w", p.Name, err)
		}
		if infoField(repl, "role") == "slave" && infoField(repl, "master_link_status") != "up" {
			return fmt.Errorf("%s: replica with master_link_status %q", p.Name, infoField(repl, "master_link_status"))
		}
	}
	return nil
}

// ClusterAddrs returns the addresses of the cluster's nodes, for --redis-cluster.
func (s *Stack) ClusterAddrs() []string {
	addrs := make([]string, len(s.Cluster))
	for i, p := range s.Cluster {
		addrs[i] = p.Addr()
	}
	return addrs
}

// ClusterTLSAddrs returns the TLS addresses of every cluster node (Options.ClusterTLS).
func (s *Stack) ClusterTLSAddrs() []string {
	addrs := make([]string, len(s.Cluster))
	for i, p := range s.Cluster {
		addrs[i] = p.TLSAddr()
	}
	return addrs
}

// KeySlot returns the cluster slot of key, as the cluster computes it (its hash tag's).
func (s *Stack) KeySlot(ctx context.Context, key string) (int, error) {
	var errs []error
	for _, p := range s.Cluster {
		if !p.Running() {
			continue
		}
		v, err := command(ctx, p.Addr(), "CLUSTER", "KEYSLOT", key)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", p.Name, err))
			continue
		}
		n, ok := v.(int64)
		if !ok {
			return 0, fmt.Errorf("stack: CLUSTER KEYSLOT answered %v", v)
		}
		return int(n), nil
	}
	return 0, fmt.Errorf("stack: no cluster node answered: %w", errors.Join(errs...))
}

// SlotMaster returns the node that serves slot as its master, as every running node that
// answers sees it (they must agree).
func (s *Stack) SlotMaster(ctx context.Context, slot int) (*Proc, error) {
	var master *Proc
	for _, p := range s.Cluster {
		if !p.Running() {
			continue
		}
		v, err := command(ctx, p.Addr(), "CLUSTER", "SLOTS")
		if err != nil {
			return nil, fmt.Errorf("stack: %s: %w", p.Name, err)
		}
		m := s.masterIn(v, slot)
		switch {
		case m == nil:
			return nil, fmt.Errorf("stack: %s: no master serves slot %d", p.Name, slot)
		case master != nil && m != master:
			return nil, fmt.Errorf("stack: %s says %s serves slot %d, another node says %s", p.Name, m.Name, slot, master.Name)
		}
		master = m
	}
	if master == nil {
		return nil, errors.New("stack: no cluster node running")
	}
	return master, nil
}

// masterIn finds, in a CLUSTER SLOTS answer, the node serving slot as master.
func (s *Stack) masterIn(v any, slot int) *Proc {
	ranges, _ := v.([]any)
	for _, r := range ranges {
		f, _ := r.([]any)
		if len(f) < 3 {
			continue
		}
		lo, _ := f[0].(int64)
		hi, _ := f[1].(int64)
		node, _ := f[2].([]any)
		if int64(slot) < lo || int64(slot) > hi || len(node) < 2 {
			continue
		}
		port, _ := node[1].(int64)
		for _, p := range s.Cluster {
			if p.Port == int(port) || (p.TLSPort != 0 && p.TLSPort == int(port)) {
				return p
			}
		}
	}
	return nil
}

// WaitClusterFailover waits until a node other than old serves slot as its master, as every
// running node sees it, and the cluster is ok again, and returns that node.
func (s *Stack) WaitClusterFailover(ctx context.Context, old *Proc, slot int) (*Proc, error) {
	var got *Proc
	err := s.poll(ctx, fmt.Sprintf("a new master of slot %d", slot), func() error {
		m, err := s.SlotMaster(ctx, slot)
		if err != nil {
			return err
		}
		if m == old {
			return fmt.Errorf("%s still serves slot %d", old.Name, slot)
		}
		if err := s.clusterOK(); err != nil {
			return err
		}
		got = m
		return nil
	})
	if err == nil {
		s.logf("stack: slot %d moved from %s to %s", slot, old.Name, got.Name)
	}
	return got, err
}
