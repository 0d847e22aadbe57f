package main

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/posgate/posgate/internal/stack"
)

// TestFailoverHeardWithASentinelDown kills the Sentinel the store would have listened to
// alone, then has the other two fail the master over: the store hears of the switch from
// them, and rebuilds once for it, though two Sentinels announce it.
func TestFailoverHeardWithASentinelDown(t *testing.T) {
	t.Parallel()
	s := stack.Run(t, stack.Options{Redis: true, Replicas: 1, Sentinels: 3})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	var rebuilds atomic.Int32
	watch, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		watchFailover(watch, s.SentinelAddrs(), s.MasterName, "", nil, func() { rebuilds.Add(1) },
			slog.New(slog.DiscardHandler))
	}()
	defer func() {
		stop()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Error("the watcher did not stop with its context")
		}
	}()

	// Every Sentinel has the subscription before the first one goes.
	for _, sn := range s.Sentinels {
		waitFor(t, 10*time.Second, "subscriber on sentinel "+sn.Addr(), func() bool {
			c := redis.NewClient(&redis.Options{Addr: sn.Addr(), Protocol: 2})
			defer c.Close()
			list, err := c.ClientList(ctx).Result()
			return err == nil && strings.Contains(list, "cmd=subscribe")
		})
	}
	if err := s.Sentinels[0].Kill(); err != nil {
		t.Fatal(err)
	}
	old, err := s.MasterAddr(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sc := redis.NewSentinelClient(&redis.Options{Addr: s.Sentinels[1].Addr()})
	defer sc.Close()
	if err := sc.Failover(ctx, s.MasterName).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.WaitFailover(ctx, old); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "rebuild", func() bool { return rebuilds.Load() > 0 })
	time.Sleep(time.Second) // the second Sentinel's announcement, if it were taken for another switch
	if n := rebuilds.Load(); n != 1 {
		t.Fatalf("%d rebuilds for one switch of master", n)
	}
}

// waitFor polls ok every 50 ms until it holds, or fails the test after within.
func waitFor(t *testing.T, within time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within %s", what, within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
