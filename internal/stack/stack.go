//go:build unix

// Package stack launches posgate's local infrastructure for tests, benchmarks and the demo:
// a redis master with replicas, redis sentinels watching it, a Redis Cluster, a mosquitto
// broker and a PostgreSQL server. They are real redis-server, redis-sentinel, mosquitto and
// postgres processes on free 127.0.0.1 ports (the cluster made by redis-cli), with their
// configs, data and logs in one directory.
//
// Each process is a *Proc that can be stopped, killed and restarted with the same port,
// config and data, for fault tests. Close kills whatever still runs and removes the
// directory; on Linux the processes are also killed if the test binary dies.
//
// Tests use Run, which fails the test (it never skips) when a binary is missing:
// `make test` installs them (apt-get install -y redis-server redis-sentinel redis-tools
// mosquitto postgresql).
package stack

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/posgate/posgate/internal/freeport"
)

// DefaultMasterName is the sentinel master name used when Options.MasterName is empty.
const DefaultMasterName = "posgate"

// Sentinel timings, short so that fault tests fail over within a few seconds.
const (
	downAfter       = 1000 // sentinel down-after-milliseconds
	failoverTimeout = 5000 // sentinel failover-timeout, ms
)

// topologyTimeout bounds the wait for replicas to sync and sentinels to find each other.
const topologyTimeout = 30 * time.Second

// Options says which processes Start launches.
type Options struct {
	// Dir is the working directory for configs, data and logs. If empty, Start creates a
	// temporary directory and Close removes it; a given Dir is created if needed and kept.
	Dir string

	Redis      bool   // start a redis master
	Replicas   int    // redis replicas of that master; needs Redis
	Sentinels  int    // sentinels watching the master, quorum Sentinels/2+1; needs Redis
	MasterName string // sentinel master name; "" means DefaultMasterName

	// Cluster starts a Redis Cluster of its own: 3 masters with a replica each (redis-server
	// --cluster-enabled yes, redis-cli --cluster create ... --cluster-replicas 1), a node
	// timeout of 1 s, and cluster-require-full-coverage off so that the slots of live masters
	// are served while a dead one's replica takes over; see Stack.Cluster, KeySlot,
	// SlotMaster and WaitClusterFailover.
	Cluster bool

	// RedisPassword, if set, is every redis node's requirepass and masterauth and every
	// sentinel's requirepass and auth-pass: clients (and the launcher's own probes) AUTH.
	RedisPassword string
	// RedisTLS, if set, gives every redis node a TLS port (Proc.TLSPort) beside its plain
	// one, serving this certificate; clients need no certificate of their own.
	RedisTLS *TLSFiles
	// SentinelTLS (with RedisTLS and Sentinels) runs the Sentinel trio over TLS as well:
	// each sentinel serves a TLS port (Proc.TLSPort) beside its plain one, replicas
	// replicate and sentinels monitor and talk to each other over the TLS ports
	// (tls-replication yes), so the master a sentinel reports is a TLS address; see
	// SentinelTLSAddrs.
	SentinelTLS bool
	// ClusterTLS (with RedisTLS and Cluster) runs the cluster over TLS: each node serves a
	// TLS port (Proc.TLSPort) beside its plain one, the cluster bus and replication are TLS
	// (tls-cluster yes, tls-replication yes), and a client on a TLS port is told the
	// nodes' TLS ports; see ClusterTLSAddrs. The launcher's probes use the plain ports.
	ClusterTLS bool

	MQTT bool // start mosquitto
	// MosquittoExtra is appended to mosquitto.conf after the listener line, e.g.
	// password_file, acl_file or max_queued_messages. A setting it names replaces the
	// launcher's default for that setting (allow_anonymous true, persistence true,
	// persistence_location, max_queued_messages 100000, autosave_interval, user).
	MosquittoExtra string

	// Postgres starts a PostgreSQL server: initdb into Dir/pg/data (as the postgres OS user
	// when the launcher runs as root), then postgres on a free loopback port with fsync on,
	// trust authentication for user postgres and a database named PostgresDB; see
	// Stack.PostgresURL.
	Postgres bool
	// PostgresSettings are lines appended to the server's postgresql.conf after initdb
	// ("max_wal_size = '8GB'"), as a deployment tunes its server; they hold across a
	// Kill and Start.
	PostgresSettings []string

	// Logf, if set, receives one line per process started or stopped.
	Logf func(format string, args ...any)
}

// TLSFiles are a server's certificate and key and the authority that signed them (PEM
// files, e.g. from internal/certtest).
type TLSFiles struct{ Cert, Key, CA string }

// Stack is a set of running processes started by Start or Run. Its fields are fixed once
// Start returns.
type Stack struct {
	Redis      []*Proc // redis nodes; Redis[0] is the initial master, the rest its replicas
	Sentinels  []*Proc // sentinels watching the master
	Cluster    []*Proc // Redis Cluster nodes (Options.Cluster): the first 3 masters when made
	Mosquitto  *Proc   // the MQTT broker, or nil
	Postgres   *Proc   // the PostgreSQL server, or nil
	MasterName string  // sentinel master name
	Dir        string  // absolute working directory

	created    bool // Dir was made by Start and is removed by Close
	logfn      func(format string, args ...any)
	ports      map[int]bool // ports handed out, never handed out twice
	password   string       // Options.RedisPassword
	tls        *TLSFiles    // Options.RedisTLS
	tlsAll     bool         // Options.SentinelTLS: replication and sentinels over TLS
	clusterTLS bool         // Options.ClusterTLS: the cluster over TLS

	mu       sync.Mutex
	closed   bool
	keepDir  bool // Run keeps the directory of a failed test (KeepEnv)
	closeErr error
}

type binaries struct{ redis, sentinel, cli, mosquitto, postgres, initdb string }

// Start launches the processes o asks for and waits until they serve: replicas are in
// sync with the master and every sentinel knows the master, all replicas and all other
// sentinels, so that a failover works at once. If anything fails, everything started so
// far is killed and the error says which process failed, with the end of its logs. ctx
// bounds the start; the processes outlive it until Close.
func Start(ctx context.Context, o Options) (s *Stack, err error) {
	if !o.Redis && (o.Replicas > 0 || o.Sentinels > 0) {
		return nil, errors.New("stack: Replicas and Sentinels need Redis")
	}
	if o.Replicas < 0 || o.Sentinels < 0 {
		return nil, errors.New("stack: negative Replicas or Sentinels")
	}
	if o.SentinelTLS && (o.RedisTLS == nil || o.Sentinels == 0) {
		return nil, errors.New("stack: SentinelTLS needs RedisTLS and Sentinels")
	}
	if o.ClusterTLS && (o.RedisTLS == nil || !o.Cluster) {
		return nil, errors.New("stack: ClusterTLS needs RedisTLS and Cluster")
	}
	bins, err := lookBinaries(o)
	if err != nil {
		return nil, err
	}
	s = &Stack{MasterName: o.MasterName, logfn: o.Logf, ports: map[int]bool{}, password: o.RedisPassword, tls: o.RedisTLS,
		tlsAll: o.SentinelTLS, clusterTLS: o.ClusterTLS}
	if s.MasterName == "" {
		s.MasterName = DefaultMasterName
	}
	if o.Dir == "" {
		if s.Dir, err = os.MkdirTemp("", "posgate-stack-"); err != nil {
			return nil, fmt.Errorf("stack: %w", err)
		}
		s.created = true
	} else {
		if s.Dir, err = filepath.Abs(o.Dir); err == nil {
			err = os.MkdirAll(s.Dir, 0o755)
		}
		if err != nil {
			return nil, fmt.Errorf("stack: %w", err)
		}
	}
	started := s // the named result s is nil by the time a failing return reaches defer
	defer func() {
		if err != nil {
			_ = started.Close()
		}
	}()

	if o.Redis {
		master, err := s.first(ctx, kindRedis, "redis-0", bins.redis, func(p *Proc) string {
			return s.redisConf(p, 0)
		}, nil)
		if err != nil {
			return nil, err
		}
		s.Redis = append(s.Redis, master)
		for i := 1; i <= o.Replicas; i++ {
			r, err := s.first(ctx, kindRedis, fmt.Sprintf("redis-%d", i), bins.redis, func(p *Proc) string {
				return s.redisConf(p, s.linkPort(master))
			}, nil)
			if err != nil {
				return nil, err
			}
			s.Redis = append(s.Redis, r)
		}
		if err := s.waitReplicas(ctx); err != nil {
			return nil, err
		}
		for i := range o.Sentinels {
			sn, err := s.first(ctx, kindSentinel, fmt.Sprintf("sentinel-%d", i), bins.sentinel, func(p *Proc) string {
				return sentinelConf(p, s.MasterName, s.linkPort(master), o.Sentinels/2+1) + s.sentinelAuth() + s.sentinelTLS(p)
			}, nil)
			if err != nil {
				return nil, err
			}
			s.Sentinels = append(s.Sentinels, sn)
		}
	}
	if o.Cluster {
		if err := s.startCluster(ctx, bins); err != nil {
			return nil, err
		}
	}
	if o.MQTT {
		m, err := s.first(ctx, kindMosquitto, "mosquitto", bins.mosquitto, func(p *Proc) string {
			return mosquittoConf(p, o.MosquittoExtra)
		}, nil)
		if err != nil {
			return nil, err
		}
		s.Mosquitto = m
	}
	if o.Postgres {
		pg, err := s.startPostgres(ctx, bins, o.PostgresSettings)
		if err != nil {
			return nil, err
		}
		s.Postgres = pg
	}
	if err := s.waitSentinels(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// KeepEnv names the environment variable that, when set, makes Run keep the temporary
// directory of a failed test, so that the processes' configs and logs can be read.
const KeepEnv = "POSGATE_STACK_KEEP"

// Run starts a stack for a test or benchmark and closes it when tb ends. It calls
// tb.Fatalf, never tb.Skip, if a binary is missing or anything fails to start; only under
// `go test -short` (the fast lane of unit tests: no processes, no servers) does it skip the
// test, before it starts anything. Unless
// o.Logf is set, start and stop lines go to tb.Logf. The temporary directory is removed
// as by Close, unless the test failed and the environment variable KeepEnv is set.
func Run(tb testing.TB, o Options) *Stack {
	tb.Helper()
	SkipShort(tb)
	if o.Logf == nil {
		o.Logf = tb.Logf
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := Start(ctx, o)
	if err != nil {
		tb.Fatalf("%v", err)
	}
	tb.Cleanup(func() {
		if tb.Failed() && s.created {
			if os.Getenv(KeepEnv) != "" {
				s.mu.Lock()
				s.keepDir = true
				s.mu.Unlock()
				tb.Logf("stack: test failed; configs and logs kept in %s", s.Dir)
			} else {
				tb.Logf("stack: test failed; set %s=1 to keep configs and logs (%s)", KeepEnv, s.Dir)
			}
		}
		if err := s.Close(); err != nil {
			tb.Errorf("%v", err)
		}
	})
	return s
}

// SkipShort skips tb under `go test -short`, the fast lane that runs no process and no
// server: every test that starts one (real Redis, Sentinel, mosquitto, PostgreSQL, posgate's
// binaries) calls it first, directly or through Run. Without -short it does nothing, and a
// missing binary fails the test.
func SkipShort(tb testing.TB) {
	tb.Helper()
	if testing.Short() {
		tb.Skip("-short: this test starts real servers or processes")
	}
}

// SentinelAddrs returns the sentinels' addresses, for redis.FailoverOptions.SentinelAddrs.
func (s *Stack) SentinelAddrs() []string {
	addrs := make([]string, len(s.Sentinels))
	for i, p := range s.Sentinels {
		addrs[i] = p.Addr()
	}
	return addrs
}

// MQTTURL returns the broker's URL, "tcp://127.0.0.1:PORT", or "" without MQTT.
func (s *Stack) MQTTURL() string {
	if s.Mosquitto == nil {
		return ""
	}
	return "tcp://" + s.Mosquitto.Addr()
}

// MasterAddr returns the current master's address as the first running sentinel that
// answers reports it (SENTINEL get-master-addr-by-name). A stack without sentinels
// returns Redis[0]'s address.
func (s *Stack) MasterAddr(ctx context.Context) (string, error) {
	if len(s.Sentinels) == 0 {
		if len(s.Redis) == 0 {
			return "", errors.New("stack: no redis")
		}
		return s.Redis[0].Addr(), nil
	}
	var errs []error
	for _, sn := range s.Sentinels {
		if !sn.Running() {
			continue
		}
		addr, err := s.askMaster(ctx, sn)
		if err == nil {
			return addr, nil
		}
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		return "", errors.New("stack: no sentinel running")
	}
	return "", fmt.Errorf("stack: no sentinel answered: %w", errors.Join(errs...))
}

// WaitFailover polls the sentinels until every running one reports the same master, other
// than oldMaster, and that node answers ROLE as master. It returns the new master's
// address, or an error when ctx is done.
func (s *Stack) WaitFailover(ctx context.Context, oldMaster string) (string, error) {
	if len(s.Sentinels) == 0 {
		return "", errors.New("stack: WaitFailover needs sentinels")
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	last := "nothing"
	for {
		if addr, err := s.agreedMaster(ctx); err != nil {
			last = err.Error()
		} else if addr == oldMaster {
			last = "the old master " + addr
		} else if role, err := commandAuth(ctx, s.plainAddr(addr), s.password, "ROLE"); err != nil {
			last = fmt.Sprintf("new master %s: ROLE: %v", addr, err)
		} else if arr, _ := role.([]any); len(arr) == 0 || arr[0] != "master" {
			last = fmt.Sprintf("new master %s: ROLE %v", addr, role)
		} else {
			s.logf("stack: failover from %s to %s", oldMaster, addr)
			return addr, nil
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("stack: no failover from %s (sentinels report %s): %w", oldMaster, last, ctx.Err())
		case <-tick.C:
		}
	}
}

// Close kills every process still running, waits for them to exit and removes Dir if
// Start created it. It is safe to call more than once; later calls return the first's
// result.
func (s *Stack) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return s.closeErr
	}
	s.closed = true
	keep := s.keepDir
	s.mu.Unlock()

	var errs []error
	for _, p := range s.procs() {
		if err := p.signal(syscall.SIGKILL, false); err != nil {
			errs = append(errs, err)
		}
	}
	if s.created && !keep && len(errs) == 0 {
		if err := os.RemoveAll(s.Dir); err != nil {
			errs = append(errs, err)
		}
	}
	err := errors.Join(errs...)
	if err != nil {
		err = fmt.Errorf("stack: close: %w", err)
	} else {
		s.logf("stack: closed %s", s.Dir)
	}
	s.mu.Lock()
	s.closeErr = err
	s.mu.Unlock()
	return err
}

func (s *Stack) procs() []*Proc {
	ps := slices.Concat(s.Sentinels, s.Redis, s.Cluster)
	if s.Mosquitto != nil {
		ps = append(ps, s.Mosquitto)
	}
	if s.Postgres != nil {
		ps = append(ps, s.Postgres)
	}
	return ps
}

func (s *Stack) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

func (s *Stack) logf(format string, args ...any) {
	if s.logfn != nil {
		s.logfn(format, args...)
	}
}

// first creates a process and starts it for the first time. If it exits while starting
// because something else took its port, it is retried on another port. conf writes the
// config file (nil for postgres, configured on its command line); cred, if not nil, is the
// user the process runs as.
func (s *Stack) first(ctx context.Context, k kind, name, bin string, conf func(*Proc) string, cred *syscall.Credential) (*Proc, error) {
	p := &Proc{Name: name, Dir: filepath.Join(s.Dir, name), kind: k, bin: bin, cred: cred, owner: s}
	if conf != nil {
		p.conf = filepath.Join(p.Dir, map[kind]string{
			kindRedis: "redis.conf", kindSentinel: "sentinel.conf", kindMosquitto: "mosquitto.conf",
		}[k])
	}
	if err := os.MkdirAll(p.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("stack: %w", err)
	}
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		if p.Port, err = s.freePort(); err != nil {
			return nil, fmt.Errorf("stack: free port: %w", err)
		}
		if conf != nil {
			if err = os.WriteFile(p.conf, []byte(conf(p)), 0o644); err != nil {
				return nil, fmt.Errorf("stack: %w", err)
			}
		}
		if err = p.Start(ctx); err == nil {
			return p, nil
		}
		// The error ends with the process's logs: "bind: Address already in use".
		if !errors.Is(err, errExited) || !strings.Contains(err.Error(), "already in use") || ctx.Err() != nil {
			break
		}
		s.logf("stack: %s exited while starting on port %d; retrying on another port", name, p.Port)
	}
	return nil, fmt.Errorf("stack: %w", err)
}

// freePort returns a port that is free now and that this stack has not used yet. Another
// process may take it before ours binds it; first retries then.
func (s *Stack) freePort() (int, error) {
	for {
		port, err := pickPort()
		if err != nil {
			return 0, err
		}
		if !s.ports[port] {
			s.ports[port] = true
			return port, nil
		}
	}
}

// pickPort picks a free loopback port (freeport.Port). Tests replace it to hand out a taken
// port.
var pickPort = freeport.Port

// waitReplicas waits until every replica reports master_link_status:up.
func (s *Stack) waitReplicas(ctx context.Context) error {
	if len(s.Redis) < 2 {
		return nil
	}
	return s.poll(ctx, "replicas to sync", func() error {
		for _, r := range s.Redis[1:] {
			info, err := commandStringAuth(ctx, r.Addr(), s.password, "INFO", "replication")
			if err != nil {
				return fmt.Errorf("%s: %w", r.Name, err)
			}
			if st := infoField(info, "master_link_status"); st != "up" {
				return fmt.Errorf("%s: master_link_status %q", r.Name, st)
			}
		}
		return nil
	})
}

// waitSentinels waits until every sentinel sees the master as a healthy master, all
// replicas as connected replicas and all other sentinels as connected sentinels.
func (s *Stack) waitSentinels(ctx context.Context) error {
	n, r := len(s.Sentinels), len(s.Redis)-1
	if n == 0 {
		return nil
	}
	return s.poll(ctx, "sentinels to discover the topology", func() error {
		for _, sn := range s.Sentinels {
			v, err := commandAuth(ctx, sn.Addr(), s.password, "SENTINEL", "MASTER", s.MasterName)
			if err != nil {
				return fmt.Errorf("%s: %w", sn.Name, err)
			}
			m := flatMap(v)
			if m["flags"] != "master" || m["num-slaves"] != strconv.Itoa(r) || m["num-other-sentinels"] != strconv.Itoa(n-1) {
				return fmt.Errorf("%s: master flags %q, %s replicas, %s other sentinels", sn.Name, m["flags"], m["num-slaves"], m["num-other-sentinels"])
			}
			for _, what := range []string{"REPLICAS", "SENTINELS"} {
				v, err := commandAuth(ctx, sn.Addr(), s.password, "SENTINEL", what, s.MasterName)
				if err != nil {
					return fmt.Errorf("%s: %w", sn.Name, err)
				}
				arr, _ := v.([]any)
				for _, x := range arr {
					f := flatMap(x)
					if f["flags"] != "slave" && f["flags"] != "sentinel" {
						return fmt.Errorf("%s: %s %s:%s has flags %q", sn.Name, strings.ToLower(what), f["ip"], f["port"], f["flags"])
					}
					if what == "REPLICAS" && f["master-link-status"] != "ok" {
						return fmt.Errorf("%s: replica %s:%s master-link-status %q", sn.Name, f["ip"], f["port"], f["master-link-status"])
					}
				}
			}
			if ok, err := commandStringAuth(ctx, sn.Addr(), s.password, "SENTINEL", "CKQUORUM", s.MasterName); err != nil {
				return fmt.Errorf("%s: ckquorum: %w", sn.Name, err)
			} else if !strings.HasPrefix(ok, "OK") {
				return fmt.Errorf("%s: ckquorum: %s", sn.Name, ok)
			}
		}
		return nil
	})
}

// poll calls check every 50 ms until it returns nil, ctx is done or topologyTimeout passes.
func (s *Stack) poll(ctx context.Context, what string, check func() error) error {
	ctx, cancel := context.WithTimeout(ctx, topologyTimeout)
	defer cancel()
	start := time.Now()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		err := check()
		if err == nil {
			s.logf("stack: waited %v for %s", time.Since(start).Round(time.Millisecond), what)
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("stack: waiting for %s: %w (last: %v)", what, ctx.Err(), err)
		case <-tick.C:
		}
	}
}

func (s *Stack) askMaster(ctx context.Context, sn *Proc) (string, error) {
	v, err := commandAuth(ctx, sn.Addr(), s.password, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", s.MasterName)
	if err != nil {
		return "", fmt.Errorf("%s: %w", sn.Name, err)
	}
	arr, _ := v.([]any)
	if len(arr) != 2 {
		return "", fmt.Errorf("%s: get-master-addr-by-name %s: %v", sn.Name, s.MasterName, v)
	}
	host, _ := arr[0].(string)
	port, _ := arr[1].(string)
	return net.JoinHostPort(host, port), nil
}

// agreedMaster returns the master every running sentinel reports.
func (s *Stack) agreedMaster(ctx context.Context) (string, error) {
	seen := map[string][]string{}
	var addr string
	for _, sn := range s.Sentinels {
		if !sn.Running() {
			continue
		}
		a, err := s.askMaster(ctx, sn)
		if err != nil {
			return "", err
		}
		addr = a
		seen[a] = append(seen[a], sn.Name)
	}
	switch len(seen) {
	case 0:
		return "", errors.New("no sentinel running")
	case 1:
		return addr, nil
	default:
		return "", fmt.Errorf("different masters %v", seen)
	}
}

func lookBinaries(o Options) (binaries, error) {
	var b binaries
	var err error
	look := func(name string, extra ...string) string {
		p, e := exec.LookPath(name)
		if e == nil {
			return p
		}
		for _, x := range extra {
			if fi, e := os.Stat(x); e == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
				return x
			}
		}
		err = errors.Join(err, fmt.Errorf("stack: %s not found in PATH: `make test` installs it (apt-get install -y redis-server redis-sentinel redis-tools mosquitto)", name))
		return ""
	}
	if o.Redis || o.Cluster {
		b.redis = look("redis-server")
	}
	if o.Cluster {
		b.cli = look("redis-cli")
	}
	if o.Sentinels > 0 {
		b.sentinel = look("redis-sentinel")
	}
	if o.MQTT {
		b.mosquitto = look("mosquitto", "/usr/sbin/mosquitto", "/usr/local/sbin/mosquitto")
	}
	if o.Postgres {
		var e error
		if b.postgres, b.initdb, e = lookPostgres(); e != nil {
			err = errors.Join(err, e)
		}
	}
	return b, err
}

// redisConf is redisConf with the stack's password and TLS port.
func (s *Stack) redisConf(p *Proc, masterPort int) string {
	conf := redisConf(p, masterPort)
	if s.password != "" {
		conf += fmt.Sprintf("requirepass %q\nmasterauth %q\n", s.password, s.password)
	}
	if s.tls != nil {
		conf += s.tlsConf(p)
		if s.tlsAll {
			conf += "tls-replication yes\n"
		}
	}
	return conf
}

// tlsConf is the lines of a redis node's config for a TLS port of its own (Proc.TLSPort)
// serving the stack's certificate.
func (s *Stack) tlsConf(p *Proc) string {
	port, err := s.freePort()
	if err != nil {
		return "" // the node then serves no TLS, and the test that wants it fails
	}
	p.TLSPort = port
	return fmt.Sprintf("tls-port %d\ntls-cert-file %s\ntls-key-file %s\ntls-ca-cert-file %s\ntls-auth-clients no\n",
		port, s.tls.Cert, s.tls.Key, s.tls.CA)
}

// sentinelAuth is the lines of a sentinel's config for the stack's password: its own
// requirepass, the one it gives the master and replicas, and the one it gives other sentinels.
func (s *Stack) sentinelAuth() string {
	if s.password == "" {
		return ""
	}
	return fmt.Sprintf("requirepass %q\nsentinel auth-pass %s %q\nsentinel sentinel-pass %q\n", s.password, s.MasterName, s.password, s.password)
}

func redisConf(p *Proc, masterPort int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s, written by posgate internal/stack\n", p.Name)
	fmt.Fprintf(&b, "port %d\nbind 127.0.0.1\nprotected-mode no\ndaemonize no\n", p.Port)
	fmt.Fprintf(&b, "dir %s\nlogfile %s\n", p.Dir, p.LogFile())
	b.WriteString("appendonly no\nsave \"\"\n")
	// Sync replicas through an RDB file, which a replica arriving during a sync shares
	// (diskless sync makes it wait for the next one), and delete that file afterwards so
	// that a restarted node comes back empty, as without persistence it should.
	b.WriteString("repl-diskless-sync no\nrdb-del-sync-files yes\n")
	if masterPort != 0 {
		fmt.Fprintf(&b, "replicaof 127.0.0.1 %d\n", masterPort)
	}
	return b.String()
}

func sentinelConf(p *Proc, master string, masterPort, quorum int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s, written by posgate internal/stack; sentinel rewrites it\n", p.Name)
	fmt.Fprintf(&b, "port %d\nbind 127.0.0.1\nprotected-mode no\ndaemonize no\n", p.Port)
	fmt.Fprintf(&b, "dir %s\nlogfile %s\n", p.Dir, p.LogFile())
	b.WriteString("sentinel resolve-hostnames no\nsentinel announce-hostnames no\n")
	fmt.Fprintf(&b, "sentinel monitor %s 127.0.0.1 %d %d\n", master, masterPort, quorum)
	fmt.Fprintf(&b, "sentinel down-after-milliseconds %s %d\n", master, downAfter)
	fmt.Fprintf(&b, "sentinel failover-timeout %s %d\n", master, failoverTimeout)
	fmt.Fprintf(&b, "sentinel parallel-syncs %s 1\n", master)
	return b.String()
}

// mosquittoConf writes the broker's config. Settings named in extra replace the defaults
// of the same name: mosquitto rejects some settings given twice.
func mosquittoConf(p *Proc, extra string) string {
	set := map[string]bool{}
	for _, l := range strings.Split(extra, "\n") {
		if f := strings.Fields(l); len(f) > 0 && !strings.HasPrefix(f[0], "#") {
			set[f[0]] = true
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# %s, written by posgate internal/stack\n", p.Name)
	def := func(key, line string) {
		if !set[key] {
			b.WriteString(line + "\n")
		}
	}
	if os.Geteuid() == 0 {
		def("user", "user root") // as root, mosquitto would switch to the mosquitto user, which cannot write Dir
	}
	def("persistence", "persistence true")
	def("persistence_location", "persistence_location "+p.Dir+string(filepath.Separator))
	def("autosave_interval", "autosave_interval 1800") // saved on Stop (SIGTERM), not on Kill
	def("max_queued_messages", "max_queued_messages 100000")
	def("allow_anonymous", "allow_anonymous true")
	// Without it Nagle's algorithm meets delayed ACKs and each small QoS 1 message waits
	// ~40 ms: a live verdict round trip went from ~50 ms to ~10 ms once set.
	def("set_tcp_nodelay", "set_tcp_nodelay true")
	// Readiness is detected from the "running" notice in this log, so it is always written.
	fmt.Fprintf(&b, "log_dest file %s\n", p.LogFile())
	b.WriteString("log_type error\nlog_type warning\nlog_type notice\nlog_type information\n")
	fmt.Fprintf(&b, "listener %d 127.0.0.1\n", p.Port)
	if extra != "" {
		b.WriteString(strings.TrimRight(extra, "\n") + "\n")
	}
	return b.String()
}
