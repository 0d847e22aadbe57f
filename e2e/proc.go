// Package e2e is posgate's end-to-end harness: it builds and runs posgate's own binaries —
// store-server and terminal-agents — as real processes for end-to-end tests, benchmarks and
// the demo, drives a cashier load through the agents' local API (terminal-agent/client),
// and checks the invariants of docs/architecture.md across agents, ledger and Redis through
// the store's manager API (store-server/client). It starts only loopback services and never
// talks to anything else. It is the top of the tree: it may import anything, and only tests
// and the demo import it.
package e2e

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/posgate/posgate/internal/freeport"
)

// Binaries are the paths of the posgate binaries.
type Binaries struct {
	StoreServer   string
	TerminalAgent string
	HQSync        string
}

// Build compiles the binaries into dir (with the race detector when race is true). root is
// the module's root directory.
func Build(ctx context.Context, root, dir string, race bool) (Binaries, error) {
	b := Binaries{StoreServer: filepath.Join(dir, "store-server"), TerminalAgent: filepath.Join(dir, "terminal-agent"),
		HQSync: filepath.Join(dir, "hq-sync")}
	for pkg, out := range map[string]string{"./store-server": b.StoreServer, "./terminal-agent": b.TerminalAgent,
		"./hq-sync": b.HQSync} {
		args := []string{"build", "-o", out}
		if race {
			args = append(args, "-race")
		}
		cmd := exec.CommandContext(ctx, "go", append(args, pkg)...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			return b, fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
		}
	}
	return b, nil
}

// ModuleRoot finds the directory holding go.mod, from the working directory up.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("go.mod not found")
		}
		dir = parent
	}
}

// Proc is a posgate process that can be killed and started again with the same arguments.
type Proc struct {
	Name string
	Bin  string
	Args []string
	Env  []string
	Log  string // its stderr and stdout

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// Start starts the process (again).
func (p *Proc) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return fmt.Errorf("%s already running", p.Name)
	}
	logf, err := os.OpenFile(p.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.Command(p.Bin, p.Args...)
	cmd.Env = append(os.Environ(), p.Env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", p.Name, err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); logf.Close(); close(done) }()
	p.cmd, p.done = cmd, done
	return nil
}

// Kill sends SIGKILL and waits for the process to end.
func (p *Proc) Kill() error { return p.signal(syscall.SIGKILL) }

// Stop sends SIGTERM and waits (up to 10 s, then SIGKILL).
func (p *Proc) Stop() error { return p.signal(syscall.SIGTERM) }

func (p *Proc) signal(sig syscall.Signal) error {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.cmd = nil
	p.mu.Unlock()
	if cmd == nil {
		return nil
	}
	syscall.Kill(-cmd.Process.Pid, sig)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
	return nil
}

// WaitListening waits until addr accepts TCP connections.
func WaitListening(ctx context.Context, addr string) error { return waitListening(ctx, addr, 0, nil) }

// waitListening is WaitListening that, for a pid other than 0, also waits until that
// process is the one listening (listensOn), and gives up when exited is closed.
func waitListening(ctx context.Context, addr string, pid int, exited <-chan struct{}) error {
	port := 0
	if _, p, err := net.SplitHostPort(addr); err == nil {
		port, _ = strconv.Atoi(p)
	}
	for {
		conn, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			conn.Close()
			ours := true
			if pid != 0 {
				// A process reaped since the dial has no /proc entry: not ours, and exited
				// below tells why.
				if ours, err = listensOn(pid, port); err != nil && !errors.Is(err, fs.ErrNotExist) {
					return fmt.Errorf("who listens on %s: %w", addr, err)
				}
			}
			if ours {
				return nil
			}
			err = fmt.Errorf("%s is answered by another process", addr)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s never listened: %w", addr, err)
		case <-exited:
			return errExited
		case <-time.After(25 * time.Millisecond):
		}
	}
}

// errExited is a process that ended while it was awaited.
var errExited = errors.New("exited")

// waitUp waits until the process listens on every one of addrs (itself, not another process
// that took one of its ports; see listensOn). If it exits first, the error
// ends with the end of its log; a port that something else took before the process bound
// it reads "address already in use" there (portTaken).
func (p *Proc) waitUp(ctx context.Context, addrs ...string) error {
	p.mu.Lock()
	done, pid := p.done, 0
	if p.cmd != nil {
		pid = p.cmd.Process.Pid
	}
	p.mu.Unlock()
	for _, a := range addrs {
		err := waitListening(ctx, a, pid, done)
		if errors.Is(err, errExited) {
			p.mu.Lock()
			p.cmd = nil // it has ended: Start may run it again
			p.mu.Unlock()
			log, _ := os.ReadFile(p.Log)
			return fmt.Errorf("%s exited while starting: %w; its log ends:\n%s", p.Name, errExited, log[max(0, len(log)-2000):])
		}
		if err != nil {
			return fmt.Errorf("%s (log %s): %w", p.Name, p.Log, err)
		}
	}
	return nil
}

// portTaken says a first start failed because another process took one of its ports
// between FreeAddr and the bind; it is then worth starting again on other ports.
func portTaken(err error) bool {
	return errors.Is(err, errExited) && strings.Contains(err.Error(), "address already in use")
}

// FreeAddr returns a loopback TCP address that is free now (freeport.Addr: below the
// kernel's ephemeral range, so that no test's outgoing connection takes it meanwhile).
func FreeAddr() (string, error) { return freeport.Addr() }

// running says the process was started and has not been killed or stopped since.
func (p *Proc) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil
}

// Pid returns the process id of the running process, 0 if it is not running.
func (p *Proc) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}
