//go:build unix

package stack

import (
	"context"
	"testing"
	"time"
)

// TestCluster: the launcher makes a cluster of 3 masters with a replica each, answers which
// node serves a key's slot, and, once that master is killed, sees its replica take the slot
// over while the other masters keep theirs.
func TestCluster(t *testing.T) {
	s := Run(t, Options{Cluster: true})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if len(s.Cluster) != 6 {
		t.Fatalf("%d cluster nodes, want 6", len(s.Cluster))
	}
	masters := map[*Proc]bool{}
	for _, p := range s.Cluster {
		repl, err := commandString(ctx, p.Addr(), "INFO", "replication")
		if err != nil {
			t.Fatal(err)
		}
		if infoField(repl, "role") == "master" {
			masters[p] = true
		}
	}
	if len(masters) != 3 {
		t.Fatalf("%d masters, want 3", len(masters))
	}
	slot, err := s.KeySlot(ctx, "pg:{S1}:stock")
	if err != nil {
		t.Fatal(err)
	}
	if other, err := s.KeySlot(ctx, "pg:{S1}:flow:2026-12-01"); err != nil || other != slot {
		t.Fatalf("a store's keys are in slots %d and %d (%v): the hash tag is not taken", slot, other, err)
	}
	m, err := s.SlotMaster(ctx, slot)
	if err != nil || !masters[m] {
		t.Fatalf("slot %d served by %v (%v), not a master", slot, m, err)
	}
	// A slot of another master, which must not move.
	var keep int
	for sl := 0; sl < 16384; sl += 97 {
		if o, err := s.SlotMaster(ctx, sl); err == nil && o != m {
			keep = sl
			break
		}
	}
	keeper, _ := s.SlotMaster(ctx, keep)
	if err := m.Kill(); err != nil {
		t.Fatal(err)
	}
	n, err := s.WaitClusterFailover(ctx, m, slot)
	if err != nil {
		t.Fatal(err)
	}
	if n == m || masters[n] {
		t.Fatalf("slot %d moved to %s, want the dead master's replica", slot, n.Name)
	}
	if k, err := s.SlotMaster(ctx, keep); err != nil || k != keeper {
		t.Fatalf("slot %d of a live master moved from %s to %v (%v)", keep, keeper.Name, k, err)
	}
}
