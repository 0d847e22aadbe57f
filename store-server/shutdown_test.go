package main

import (
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/posgate/posgate/internal/stack"
)

// TestRunReturnsPromptly runs Main.Run against real Redis and 3 Sentinels, makes a Sentinel
// misbehave (one listed that accepts and never answers; one stopped after the start),
// cancels, and holds Run to returning within a second. Waiting for the Sentinel watcher,
// Run took the watcher's read timeout, 3-4 s, with a Sentinel that did not answer.
func TestRunReturnsPromptly(t *testing.T) {
	s := stack.Run(t, stack.Options{Redis: true, Replicas: 1, Sentinels: 3})
	// a "Sentinel" that accepts and never answers
	bh, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer bh.Close()
	go func() {
		for {
			c, err := bh.Accept()
			if err != nil {
				return
			}
			_ = c // held open, never read nor written
			defer c.Close()
		}
	}()
	run := func(name string, sentinels []string, before func()) {
		_, stop := startMain(t, "--store", biStoreID, "--data-dir", t.TempDir(),
			"--redis-sentinels", strings.Join(sentinels, ","), "--redis-master", s.MasterName,
			"--mqtt-listen", "127.0.0.1:0", "--api-listen", "127.0.0.1:0", "--api-token-file", secretFile(t, biToken), "--tz", biTZ,
			"--log-level", "error")
		if before != nil {
			before()
		}
		if took := stop(); took > time.Second {
			t.Errorf("%s: Run took %v to return after cancel, want under 1s", name, took.Round(time.Millisecond))
		}
	}
	addrs := s.SentinelAddrs()
	run("healthy", addrs, nil)
	run("blackhole sentinel listed", append(append([]string{}, addrs...), bh.Addr().String()), func() { time.Sleep(2 * time.Second) })
	run("sentinel SIGSTOPped after ready", addrs, func() {
		if err := syscall.Kill(s.Sentinels[2].Pid(), syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
	})
	syscall.Kill(s.Sentinels[2].Pid(), syscall.SIGCONT)
}
