//go:build unix

package stack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Time limits for one process. They bound the launcher's own waits; callers' contexts can
// only shorten them.
const (
	readyTimeout = 20 * time.Second // from exec to answering
	stopTimeout  = 15 * time.Second // SIGTERM to exit, before falling back to SIGKILL
	killTimeout  = 10 * time.Second // SIGKILL to exit (only a stuck kernel takes longer)
)

// errExited reports that a process exited while the launcher waited for it to answer,
// typically because its port was taken in the meantime.
var errExited = errors.New("exited during start")

type kind int

const (
	kindRedis kind = iota
	kindSentinel
	kindMosquitto
	kindPostgres
)

// Proc is one server process of a Stack: a redis node, a sentinel, mosquitto or postgres.
// Its port, config file and data directory stay the same across Stop/Kill and Start, so a
// restarted process comes back as the same node. A Proc is safe for concurrent use.
type Proc struct {
	Name string // "redis-0", "sentinel-2", "mosquitto", "pg"
	Port int    // loopback TCP port; fixed once Start (the package function) returns
	// TLSPort is a redis node's TLS port (Options.RedisTLS), 0 without one.
	TLSPort int
	Dir     string // working directory holding the config file, data and logs

	kind  kind
	bin   string
	conf  string              // config file; redis and sentinel rewrite theirs; "" for postgres
	cred  *syscall.Credential // run as this user (postgres started by root), or nil
	owner *Stack

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{} // closed once cmd has been reaped
	exitErr error         // cmd.Wait's result, set before done is closed
}

// TLSAddr returns a redis node's TLS address, "127.0.0.1:TLSPORT" (Options.RedisTLS).
func (p *Proc) TLSAddr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(p.TLSPort)) }

// password is what the launcher's own probes AUTH with: the stack's RedisPassword for
// redis and sentinel, "" otherwise.
func (p *Proc) password() string {
	if p.owner == nil || (p.kind != kindRedis && p.kind != kindSentinel) {
		return ""
	}
	return p.owner.password
}

// Addr returns the process's address, "127.0.0.1:PORT".
func (p *Proc) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(p.Port)) }

// Running reports whether the process has been started and has not exited.
func (p *Proc) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.runningLocked()
}

func (p *Proc) runningLocked() bool {
	if p.done == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Pid returns the process id of the running process, or 0 if it is not running.
func (p *Proc) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.runningLocked() {
		return 0
	}
	return p.cmd.Process.Pid
}

// LogFile returns the path of the process's own log file (redis.log, sentinel.log,
// mosquitto.log or postgres.log). Anything redis, sentinel or mosquitto write to stdout or
// stderr goes to stdout.log next to it; postgres logs to stderr, which is postgres.log.
func (p *Proc) LogFile() string {
	return filepath.Join(p.Dir, map[kind]string{
		kindRedis: "redis.log", kindSentinel: "sentinel.log", kindMosquitto: "mosquitto.log",
		kindPostgres: "postgres.log",
	}[p.kind])
}

// outFile is where the process's stdout and stderr go.
func (p *Proc) outFile() string {
	if p.kind == kindPostgres {
		return p.LogFile()
	}
	return filepath.Join(p.Dir, "stdout.log")
}

// args returns the command line arguments of the process.
func (p *Proc) args() []string {
	switch p.kind {
	case kindMosquitto:
		return []string{"-c", p.conf}
	case kindPostgres:
		return []string{"-D", pgDataDir(p.Dir), "-p", strconv.Itoa(p.Port), "-k", p.Dir,
			"-c", "listen_addresses=127.0.0.1", "-c", "fsync=on"}
	default:
		return []string{p.conf}
	}
}

// Start starts the process with its port, config file and data directory and waits until
// it answers: PING (and INFO showing its own pid) for redis and sentinel, a "running" line
// in the log and a TCP connect for mosquitto, its pid and "ready" in postmaster.pid and a
// completed connection startup for postgres (after a Kill, once crash recovery is done).
// It fails if the process is already running, its stack is closed, or it exits or does not
// answer in time; then the process is killed.
func (p *Proc) Start(ctx context.Context) error {
	logOff := fileSize(p.LogFile())
	pid, done, err := p.launch()
	if err != nil {
		return err
	}
	if err := p.waitReady(ctx, pid, done, logOff); err != nil {
		_ = p.Kill()
		return fmt.Errorf("%s on port %d: %w%s", p.Name, p.Port, err, p.logTail())
	}
	p.owner.logf("stack: %s listening on %s (pid %d)", p.Name, p.Addr(), pid)
	return nil
}

// Stop sends SIGTERM to the process (and its process group) and waits for it to exit. If it
// has not exited after 15 s it is killed and Stop reports that. Stopping a process that is
// not running does nothing. Mosquitto saves its persistence database when stopped.
// Postgres gets SIGINT instead, its "fast shutdown": it ends its sessions, writes a
// shutdown checkpoint and exits after its children.
func (p *Proc) Stop() error {
	if p.kind == kindPostgres {
		return p.signal(syscall.SIGINT, true)
	}
	return p.signal(syscall.SIGTERM, true)
}

// Kill sends SIGKILL to the process (and its process group) and waits for it to exit,
// simulating a crash: nothing is saved. Killing a process that is not running does nothing.
func (p *Proc) Kill() error { return p.signal(syscall.SIGKILL, true) }

func (p *Proc) launch() (int, chan struct{}, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.runningLocked() {
		return 0, nil, fmt.Errorf("%s is already running (pid %d)", p.Name, p.cmd.Process.Pid)
	}
	if p.owner.isClosed() {
		return 0, nil, fmt.Errorf("%s: stack is closed", p.Name)
	}
	out, err := os.OpenFile(p.outFile(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return 0, nil, err
	}
	defer out.Close() // the child has its own copy once started
	cmd := exec.Command(p.bin, p.args()...)
	cmd.Dir = p.Dir
	cmd.Stdout = out
	cmd.Stderr = out
	cmd.SysProcAttr = sysProcAttr()
	cmd.SysProcAttr.Credential = p.cred
	if err := spawn(cmd); err != nil {
		return 0, nil, fmt.Errorf("%s: start %s: %w", p.Name, p.bin, err)
	}
	done := make(chan struct{})
	p.cmd, p.done, p.exitErr = cmd, done, nil
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		p.exitErr = err
		p.mu.Unlock()
		close(done)
	}()
	return cmd.Process.Pid, done, nil
}

func (p *Proc) waitReady(ctx context.Context, pid int, done chan struct{}, logOff int64) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	// A probe of a port someone else holds may hang; stop it as soon as our process exits.
	probeCtx, stopProbes := context.WithCancel(ctx)
	defer stopProbes()
	go func() {
		select {
		case <-done:
			stopProbes()
		case <-probeCtx.Done():
		}
	}()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		pctx, pcancel := context.WithTimeout(probeCtx, time.Second)
		ok := p.answers(pctx, pid, logOff)
		pcancel()
		select {
		case <-done:
			p.mu.Lock()
			err := p.exitErr
			p.mu.Unlock()
			return fmt.Errorf("%w (%v)", errExited, err)
		default:
		}
		if ok {
			return nil
		}
		select {
		case <-done:
		case <-ctx.Done():
			return fmt.Errorf("not answering: %w", ctx.Err())
		case <-tick.C:
		}
	}
}

// answers reports whether this very process (not another one that took the port) serves
// the port.
func (p *Proc) answers(ctx context.Context, pid int, logOff int64) bool {
	switch p.kind {
	case kindRedis, kindSentinel:
		info, err := commandStringAuth(ctx, p.Addr(), p.password(), "INFO", "server")
		if err != nil || infoField(info, "process_id") != strconv.Itoa(pid) {
			return false
		}
		pong, err := commandStringAuth(ctx, p.Addr(), p.password(), "PING") // fails while loading a dump
		return err == nil && pong == "PONG"
	case kindPostgres:
		// postmaster.pid: line 1 is the postmaster's pid, line 8 its status ("ready" once it
		// accepts connections); a session startup then proves it answers on our port.
		data, err := os.ReadFile(filepath.Join(pgDataDir(p.Dir), "postmaster.pid"))
		if err != nil {
			return false
		}
		lines := strings.Split(string(data), "\n")
		if len(lines) < 8 || strings.TrimSpace(lines[0]) != strconv.Itoa(pid) || strings.TrimSpace(lines[7]) != "ready" {
			return false
		}
		return pgExec(ctx, p.Addr(), "postgres", "") == nil
	default:
		if !strings.Contains(readFrom(p.LogFile(), logOff), " running") {
			return false
		}
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", p.Addr())
		if err != nil {
			return false
		}
		c.Close()
		return true
	}
}

func (p *Proc) signal(sig syscall.Signal, logStop bool) error {
	p.mu.Lock()
	if !p.runningLocked() {
		p.mu.Unlock()
		return nil
	}
	pid, done := p.cmd.Process.Pid, p.done
	p.mu.Unlock()

	// The process is not reaped before done is closed, so -pid is still its group. Postgres
	// is asked to stop by its postmaster alone, which stops its children itself.
	target := -pid
	if p.kind == kindPostgres && sig != syscall.SIGKILL {
		target = pid
	}
	// A postgres crash takes its backends too: they lead process groups of their own, so
	// they are found by parent (before the postmaster dies and they are handed to init).
	var kids []int
	if p.kind == kindPostgres && sig == syscall.SIGKILL {
		kids = childrenOf(pid)
	}
	if err := syscall.Kill(target, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("%s: signal %v: %w", p.Name, sig, err)
	}
	for _, k := range kids {
		_ = syscall.Kill(-k, syscall.SIGKILL)
		_ = syscall.Kill(k, syscall.SIGKILL)
	}
	timeout := stopTimeout
	if sig == syscall.SIGKILL {
		timeout = killTimeout
	}
	select {
	case <-done:
		if err := p.waitChildren(pid, kids); err != nil {
			return err
		}
		if logStop {
			p.owner.logf("stack: %s stopped (%v)", p.Name, sig)
		}
		return nil
	case <-time.After(timeout):
	}
	if sig == syscall.SIGKILL {
		return fmt.Errorf("%s (pid %d) did not exit %v after SIGKILL", p.Name, pid, timeout)
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	select {
	case <-done:
		_ = p.waitChildren(pid, kids)
	case <-time.After(killTimeout):
	}
	return fmt.Errorf("%s (pid %d) did not exit %v after %v; sent SIGKILL", p.Name, pid, timeout, sig)
}

// waitChildren waits until neither the process group of pid nor any of kids holds a live
// process: a postgres backend outliving a killed postmaster keeps its shared memory
// attached, and a new postmaster refuses to start until it is gone ("pre-existing shared
// memory block is still in use"). Other processes fork nothing that lasts.
func (p *Proc) waitChildren(pid int, kids []int) error {
	if p.kind != kindPostgres {
		return nil
	}
	deadline := time.Now().Add(killTimeout)
	for groupAlive(pid) || slices.ContainsFunc(kids, alive) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(-pid, syscall.SIGKILL)
			return fmt.Errorf("%s: children of pid %d still running %v after it exited", p.Name, pid, killTimeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

// logTail returns the last lines of the process's logs, for error messages.
func (p *Proc) logTail() string {
	var b strings.Builder
	for _, f := range []string{p.LogFile(), filepath.Join(p.Dir, "stdout.log")} { // postgres has only the first
		data, err := os.ReadFile(f)
		if err != nil || len(strings.TrimSpace(string(data))) == 0 {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		if len(lines) > 12 {
			lines = lines[len(lines)-12:]
		}
		fmt.Fprintf(&b, "\n--- %s:\n%s", f, strings.Join(lines, "\n"))
	}
	return b.String()
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

func readFrom(path string, off int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if _, err := f.Seek(off, 0); err != nil {
		return ""
	}
	data, _ := io.ReadAll(f)
	return string(data)
}

// spawn starts cmd from one goroutine locked to its OS thread for the life of the test
// binary. On Linux the children get Pdeathsig, which fires when the *thread* that forked
// them exits; Go may retire other threads, but never this one.
func spawn(cmd *exec.Cmd) error {
	spawnOnce.Do(func() {
		spawnCh = make(chan spawnReq)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread lives as long as the process
			for r := range spawnCh {
				r.err <- r.cmd.Start()
			}
		}()
	})
	r := spawnReq{cmd: cmd, err: make(chan error, 1)}
	spawnCh <- r
	return <-r.err
}

type spawnReq struct {
	cmd *exec.Cmd
	err chan error
}

var (
	spawnOnce sync.Once
	spawnCh   chan spawnReq
)
