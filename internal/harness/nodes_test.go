package harness

import (
	"context"
	"errors"
	"net"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/posgate/posgate/internal/stack"
)

// TestStoreStartsAgainWhenItsPortWasTaken hands StartStore, for its broker, a port that
// something else took meanwhile: the store-server exits on the bind, and StartStore must
// start it again on other ports instead of failing or waiting 30 s.
func TestStoreStartsAgainWhenItsPortWasTaken(t *testing.T) {
	s := stack.Run(t, stack.Options{Redis: true})
	root, err := ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	bins, err := Build(context.Background(), root, t.TempDir(), false)
	if err != nil {
		t.Fatal(err)
	}
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	orig := freeAddr
	t.Cleanup(func() { freeAddr = orig })
	calls := 0
	freeAddr = func() (string, error) {
		calls++
		if calls == 2 { // the first start's broker port
			return taken.Addr().String(), nil
		}
		return orig()
	}
	srv, err := StartStore(context.Background(), bins.StoreServer, StoreOptions{Store: "S1", DataDir: t.TempDir(),
		RedisAddr: s.Redis[0].Addr()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	if srv.Opts.MQTTListen == taken.Addr().String() || calls != 4 {
		t.Fatalf("broker on %s after %d picks; the taken port was %s", srv.Opts.MQTTListen, calls, taken.Addr())
	}
	var status map[string]any
	if err := srv.Call(context.Background(), "GET", "/v1/mode", "", nil, &status); err != nil {
		t.Fatalf("the restarted store does not answer: %v", err)
	}
}

// TestAgentStartsAgainWhenItsPortWasTaken hands StartAgent a port another server listens
// on: a connection to it is answered, but not by the agent, which exits on its bind. The
// agent must be started again on another port, and be the one that answers.
func TestAgentStartsAgainWhenItsPortWasTaken(t *testing.T) {
	root, err := ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	bins, err := Build(context.Background(), root, t.TempDir(), false)
	if err != nil {
		t.Fatal(err)
	}
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	go func() { // answers like a server would, and holds nothing
		for {
			c, err := taken.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	orig := freeAddr
	t.Cleanup(func() { freeAddr = orig })
	calls := 0
	freeAddr = func() (string, error) {
		calls++
		if calls == 1 {
			return taken.Addr().String(), nil
		}
		return orig()
	}
	a, err := StartAgent(context.Background(), bins.TerminalAgent, AgentOptions{Store: "S1", Terminal: "T1",
		Broker: "tcp://127.0.0.1:1", DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Stop()
	if a.API == taken.Addr().String() || calls != 2 {
		t.Fatalf("agent on %s after %d picks; the taken port was %s", a.API, calls, taken.Addr())
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
