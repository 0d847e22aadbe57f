//go:build unix

package e2e

import (
	"context"
	"errors"
	"net"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/posgate/posgate/internal/stack"
	"github.com/posgate/posgate/internal/wire"
)

// TestStoreStartsAgainWhenItsPortWasTaken hands StartStore, for its broker, a port that
// something else took meanwhile: the store-server exits on the bind, and StartStore must
// start it again on other ports instead of failing or waiting 30 s.
func TestStoreStartsAgainWhenItsPortWasTaken(t *testing.T) {
	stack.SkipShort(t)
	s := stack.Run(t, stack.Options{Redis: true})
	bins, taken, calls := takenOnPick(t, 2) // the first start's broker port
	srv, err := StartStore(context.Background(), bins.StoreServer, StoreOptions{Store: "S1", DataDir: t.TempDir(),
		RedisAddr: s.Redis[0].Addr()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	if srv.Opts.MQTTListen == taken || *calls != 4 {
		t.Fatalf("broker on %s after %d picks; the taken port was %s", srv.Opts.MQTTListen, *calls, taken)
	}
	if _, err := srv.Manager().Mode(context.Background()); err != nil {
		t.Fatalf("the restarted store does not answer: %v", err)
	}
}

// TestAgentStartsAgainWhenItsPortWasTaken hands StartAgent a port another server listens
// on: a connection to it is answered, but not by the agent, which exits on its bind. The
// agent must be started again on another port, and be the one that answers.
func TestAgentStartsAgainWhenItsPortWasTaken(t *testing.T) {
	stack.SkipShort(t)
	bins, taken, calls := takenOnPick(t, 1)
	a, err := StartAgent(context.Background(), bins.TerminalAgent, AgentOptions{Store: "S1", Terminal: "T1",
		Broker: "tcp://127.0.0.1:1", DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Stop()
	if a.API == taken || *calls != 2 {
		t.Fatalf("agent on %s after %d picks; the taken port was %s", a.API, *calls, taken)
	}
	_, port, _ := net.SplitHostPort(a.API)
	p, _ := strconv.Atoi(port)
	if ours, err := listensOn(a.cmd.Process.Pid, p); err != nil || !ours {
		t.Fatalf("the agent does not hold %s: %v %v", a.API, ours, err)
	}
}

// TestExitedProcessWhosePortAnotherHolds: the process has ended and been reaped (no /proc
// entry) while another server answers on its port: waitListening says errExited, so that
// StartAgent and StartStore start again on another port instead of failing.
func TestExitedProcessWhosePortAnotherHolds(t *testing.T) {
	stack.SkipShort(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil { // reaped
		t.Fatal(err)
	}
	done := make(chan struct{})
	close(done)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := waitListening(ctx, ln.Addr().String(), cmd.Process.Pid, done); !errors.Is(err, errExited) {
		t.Fatalf("waitListening: %v, want errExited", err)
	}
}

// takenOnPick builds the binaries and makes the n-th address freeAddr hands out one another
// server listens on (and answers, holding nothing). It returns that address and the count of
// picks so far.
func takenOnPick(t *testing.T, n int) (bins Binaries, taken string, calls *int) {
	t.Helper()
	root, err := ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	if bins, err = Build(context.Background(), root, t.TempDir(), false); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	orig := freeAddr
	t.Cleanup(func() { freeAddr = orig })
	calls = new(int)
	freeAddr = func() (string, error) {
		if *calls++; *calls == n {
			return ln.Addr().String(), nil
		}
		return orig()
	}
	return bins, ln.Addr().String(), calls
}

// TestZoneWithMidnight: the zone's midnight is the first whole minute at or after the time
// given, at every minute of the day, within the offsets internal/wire reads.
func TestZoneWithMidnight(t *testing.T) {
	base := time.Date(2026, 3, 4, 0, 0, 30, 0, time.UTC)
	for i := range 24 * 60 {
		at := base.Add(time.Duration(i) * time.Minute)
		m, zone := ZoneWithMidnight(at)
		loc, err := wire.LoadLocation(zone)
		if err != nil {
			t.Fatalf("%v: zone %q: %v", at, zone, err)
		}
		if l := m.In(loc); l.Hour() != 0 || l.Minute() != 0 || m.Before(at) || m.Sub(at) >= time.Minute {
			t.Fatalf("%v: midnight %v in %s is %v", at, m, zone, l)
		}
	}
}
