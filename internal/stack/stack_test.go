//go:build unix

package stack

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"github.com/redis/go-redis/v9"
)

// TestFullStack starts redis with two replicas, three sentinels and mosquitto, fails redis
// over and restarts mosquitto (both at once), restarts a sentinel, and checks that Close
// leaves nothing behind.
func TestFullStack(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	s := Run(t, Options{Redis: true, Replicas: 2, Sentinels: 3, MQTT: true})
	if len(s.Redis) != 3 || len(s.Sentinels) != 3 || s.Mosquitto == nil || s.MasterName != DefaultMasterName {
		t.Fatalf("stack has %d redis, %d sentinels, mosquitto %v, master name %q", len(s.Redis), len(s.Sentinels), s.Mosquitto, s.MasterName)
	}
	if !strings.HasPrefix(s.MQTTURL(), "tcp://127.0.0.1:") {
		t.Errorf("MQTTURL = %q", s.MQTTURL())
	}
	var pids []int
	for _, p := range s.procs() {
		if !p.Running() || p.Pid() == 0 {
			t.Fatalf("%s not running", p.Name)
		}
		pids = append(pids, p.Pid())
	}

	t.Run("group", func(t *testing.T) {
		t.Run("failover", func(t *testing.T) {
			t.Parallel()
			testFailover(ctx, t, s)
		})
		t.Run("mosquitto-restart", func(t *testing.T) {
			t.Parallel()
			testMosquittoRestart(ctx, t, s)
		})
	})
	if t.Failed() {
		return // with POSGATE_STACK_KEEP=1, Run's cleanup keeps the logs
	}

	// A restarted sentinel comes back from its rewritten config knowing the current master.
	master, err := s.MasterAddr(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sn := s.Sentinels[0]
	pids = append(pids, sn.Pid())
	if err := sn.Stop(); err != nil {
		t.Fatal(err)
	}
	if got, err := s.MasterAddr(ctx); err != nil || got != master {
		t.Fatalf("MasterAddr with %s stopped = %s, %v; want %s", sn.Name, got, err, master)
	}
	if err := sn.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := s.askMaster(ctx, sn); err != nil || got != master {
		t.Fatalf("restarted %s reports master %s, %v; want %s", sn.Name, got, err, master)
	}

	// Restarted processes have new pids.
	for _, p := range s.procs() {
		if pid := p.Pid(); pid != 0 {
			pids = append(pids, pid)
		}
	}
	dir := s.Dir
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for _, p := range s.procs() {
		if p.Running() {
			t.Errorf("%s still running after Close", p.Name)
		}
	}
	checkGone(t, pids)
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s still there after Close: %v", dir, err)
	}
	if err := s.Redis[0].Start(ctx); err == nil {
		t.Error("Start after Close succeeded")
	}
}

func testFailover(ctx context.Context, t *testing.T, s *Stack) {
	old, err := s.MasterAddr(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if old != s.Redis[0].Addr() {
		t.Fatalf("master is %s, want redis-0 %s", old, s.Redis[0].Addr())
	}
	rdb := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:    s.MasterName,
		SentinelAddrs: s.SentinelAddrs(),
		DialTimeout:   500 * time.Millisecond,
		ReadTimeout:   500 * time.Millisecond,
		WriteTimeout:  500 * time.Millisecond,
	})
	defer rdb.Close()
	if err := rdb.Set(ctx, "before", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	// Make sure both replicas have the key, so the new master has it whichever is chosen.
	if n, err := rdb.Do(ctx, "WAIT", 2, 5000).Int(); err != nil || n != 2 {
		t.Fatalf("WAIT 2 = %d, %v", n, err)
	}

	start := time.Now()
	if err := s.Redis[0].Kill(); err != nil {
		t.Fatal(err)
	}
	if s.Redis[0].Running() {
		t.Fatal("redis-0 running after Kill")
	}
	fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	newMaster, err := s.WaitFailover(fctx, old)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("failover %s -> %s took %v", old, newMaster, time.Since(start).Round(time.Millisecond))
	if newMaster != s.Redis[1].Addr() && newMaster != s.Redis[2].Addr() {
		t.Fatalf("new master %s is not a replica", newMaster)
	}
	if got, err := s.MasterAddr(ctx); err != nil || got != newMaster {
		t.Fatalf("MasterAddr = %s, %v; want %s", got, err, newMaster)
	}

	// The failover client finds the new master by itself.
	eventually(ctx, t, 15*time.Second, "SET through the failover client", func() error {
		return rdb.Set(ctx, "after", "2", 0).Err()
	})
	if n, err := rdb.Do(ctx, "WAIT", 1, 5000).Int(); err != nil || n != 1 {
		t.Fatalf("WAIT 1 = %d, %v", n, err)
	}
	if v, err := rdb.Get(ctx, "before").Result(); err != nil || v != "1" {
		t.Fatalf("GET before = %q, %v", v, err)
	}

	// The old master comes back empty, as a master; the sentinels turn it into a replica of
	// the new one.
	start = time.Now()
	if err := s.Redis[0].Start(ctx); err != nil {
		t.Fatal(err)
	}
	if s.Redis[0].Addr() != old {
		t.Fatalf("restarted redis-0 on %s, want %s", s.Redis[0].Addr(), old)
	}
	oldc := redis.NewClient(&redis.Options{Addr: old, MaxRetries: -1})
	defer oldc.Close()
	eventually(ctx, t, 30*time.Second, "old master to rejoin as replica", func() error {
		// Ask again: on a loaded machine the sentinels may have failed over once more.
		master, err := s.MasterAddr(ctx)
		if err != nil {
			return err
		}
		info, err := oldc.Info(ctx, "replication").Result()
		if err != nil {
			return err
		}
		host, port := infoField(info, "master_host"), infoField(info, "master_port")
		role, link := infoField(info, "role"), infoField(info, "master_link_status")
		if role != "slave" || net.JoinHostPort(host, port) != master || link != "up" {
			return fmt.Errorf("role %s of %s:%s, link %q; sentinels say the master is %s", role, host, port, link, master)
		}
		return nil
	})
	t.Logf("old master rejoined as replica after %v", time.Since(start).Round(time.Millisecond))
	if v, err := oldc.Get(ctx, "after").Result(); err != nil || v != "2" {
		t.Fatalf("GET after on the rejoined replica = %q, %v", v, err)
	}
}

func testMosquittoRestart(ctx context.Context, t *testing.T, s *Stack) {
	const topic = "posgate/stack-test"
	msgs := make(chan string, 10)
	seen := map[string]bool{}
	onMsg := func(_ mqtt.Client, m mqtt.Message) { msgs <- string(m.Payload()) }

	sub := connectMQTT(t, s.MQTTURL(), "stack-sub", false, onMsg)
	if tok := sub.Subscribe(topic, 1, onMsg); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe: %v", tok.Error())
	}
	pub := connectMQTT(t, s.MQTTURL(), "stack-pub", true, nil)
	publish(t, pub, topic, "before")
	receive(t, msgs, seen, "before")

	// Queue one message for the offline persistent session, then restart the broker: the
	// session and the queued message survive in the persistence file.
	sub.Disconnect(250)
	publish(t, pub, topic, "queued")
	pub.Disconnect(250)

	port := s.Mosquitto.Port
	if err := s.Mosquitto.Stop(); err != nil {
		t.Fatal(err)
	}
	if s.Mosquitto.Running() {
		t.Fatal("mosquitto running after Stop")
	}
	if c, err := net.DialTimeout("tcp", s.Mosquitto.Addr(), time.Second); err == nil {
		c.Close()
		t.Fatal("broker port still accepts connections after Stop")
	}
	if err := s.Mosquitto.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if s.Mosquitto.Port != port {
		t.Fatalf("port changed from %d to %d", port, s.Mosquitto.Port)
	}
	if err := s.Mosquitto.Start(ctx); err == nil {
		t.Fatal("second Start of a running broker succeeded")
	}

	sub = connectMQTT(t, s.MQTTURL(), "stack-sub", false, onMsg) // resumes the session, no SUBSCRIBE
	receive(t, msgs, seen, "queued")
	pub = connectMQTT(t, s.MQTTURL(), "stack-pub", true, nil)
	publish(t, pub, topic, "after")
	receive(t, msgs, seen, "after")
	pub.Disconnect(250)
	sub.Disconnect(250)
}

// TestRedisOnly runs a standalone redis, stops and restarts it on the same port.
func TestRedisOnly(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()
	s := Run(t, Options{Dir: dir, Redis: true})
	if len(s.Redis) != 1 || len(s.Sentinels) != 0 || s.Mosquitto != nil || s.MQTTURL() != "" {
		t.Fatalf("stack: %d redis, %d sentinels, mosquitto %v", len(s.Redis), len(s.Sentinels), s.Mosquitto)
	}
	addr, err := s.MasterAddr(ctx)
	if err != nil || addr != s.Redis[0].Addr() {
		t.Fatalf("MasterAddr = %s, %v", addr, err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	if err := rdb.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	pid := s.Redis[0].Pid()
	if err := s.Redis[0].Stop(); err != nil {
		t.Fatal(err)
	}
	if s.Redis[0].Running() || s.Redis[0].Pid() != 0 {
		t.Fatal("running after Stop")
	}
	checkGone(t, []int{pid})
	if err := s.Redis[0].Stop(); err != nil { // stopping a stopped process is a no-op
		t.Fatal(err)
	}
	if err := s.Redis[0].Start(ctx); err != nil {
		t.Fatal(err)
	}
	// No persistence: the restarted node is empty, on the same address.
	if err := rdb.Get(ctx, "k").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET after restart: %v, want redis.Nil", err)
	}
	pid = s.Redis[0].Pid()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	checkGone(t, []int{pid})
	if _, err := os.Stat(dir); err != nil {
		t.Errorf("given Dir removed by Close: %v", err)
	}
	if err := s.Close(); err != nil { // idempotent; Run's cleanup calls it again
		t.Fatal(err)
	}
}

// TestTakenPort hands out the port of another stack's redis first: the new redis must not
// mistake that one for itself, and must move to another port.
func TestTakenPort(t *testing.T) {
	other := Run(t, Options{Redis: true})
	orig := pickPort
	t.Cleanup(func() { pickPort = orig })
	taken := true
	pickPort = func() (int, error) {
		if taken {
			taken = false
			return other.Redis[0].Port, nil
		}
		return orig()
	}
	s := Run(t, Options{Redis: true})
	if s.Redis[0].Port == other.Redis[0].Port {
		t.Fatalf("both stacks claim port %d", s.Redis[0].Port)
	}
	rdb := redis.NewClient(&redis.Options{Addr: s.Redis[0].Addr()})
	defer rdb.Close()
	info, err := rdb.Info(context.Background(), "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	if pid := infoField(info, "process_id"); pid != fmt.Sprint(s.Redis[0].Pid()) {
		t.Fatalf("%s answers with pid %s, want %d", s.Redis[0].Addr(), pid, s.Redis[0].Pid())
	}
}

// TestMissingBinary checks that a missing binary is an error naming it and `make test`.
func TestMissingBinary(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := Start(context.Background(), Options{Redis: true, Sentinels: 1})
	if err == nil {
		t.Fatal("Start succeeded without binaries")
	}
	for _, want := range []string{"redis-server", "redis-sentinel", "make test"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if _, err := Start(context.Background(), Options{Sentinels: 1}); err == nil {
		t.Error("Sentinels without Redis accepted")
	}
}

// TestStartFails makes mosquitto fail after redis and a sentinel started: Start must
// report mosquitto's complaint and leave no process behind.
func TestStartFails(t *testing.T) {
	SkipShort(t)
	t.Parallel()
	var (
		mu   sync.Mutex
		pids []int
	)
	logf := func(format string, args ...any) {
		t.Logf(format, args...)
		var name, addr string
		var pid int
		if n, _ := fmt.Sscanf(fmt.Sprintf(format, args...), "stack: %s listening on %s (pid %d)", &name, &addr, &pid); n == 3 {
			mu.Lock()
			pids = append(pids, pid)
			mu.Unlock()
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := Start(ctx, Options{Redis: true, Sentinels: 1, MQTT: true, MosquittoExtra: "no_such_option 1", Logf: logf})
	if err == nil {
		s.Close()
		t.Fatal("Start succeeded with a bad mosquitto config")
	}
	t.Log(err)
	for _, want := range []string{"mosquitto", "no_such_option"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not mention %q", want)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(pids) != 2 {
		t.Fatalf("started pids %v, want redis and sentinel", pids)
	}
	checkGone(t, pids)
}

// TestMosquittoAuth replaces the anonymous default through MosquittoExtra.
func TestMosquittoAuth(t *testing.T) {
	SkipShort(t)
	t.Parallel()
	pw := filepath.Join(t.TempDir(), "passwd")
	if out, err := exec.Command("mosquitto_passwd", "-c", "-b", pw, "till", "secret").CombinedOutput(); err != nil {
		t.Fatalf("mosquitto_passwd: %v\n%s", err, out)
	}
	s := Run(t, Options{MQTT: true, MosquittoExtra: "allow_anonymous false\npassword_file " + pw + "\n"})
	connect := func(user, pass string) error {
		o := mqtt.NewClientOptions().AddBroker(s.MQTTURL()).SetClientID("auth-" + user).
			SetUsername(user).SetPassword(pass).SetConnectTimeout(2 * time.Second).SetAutoReconnect(false)
		c := mqtt.NewClient(o)
		tok := c.Connect()
		if !tok.WaitTimeout(5 * time.Second) {
			return errors.New("connect timed out")
		}
		if tok.Error() == nil {
			c.Disconnect(100)
		}
		return tok.Error()
	}
	if err := connect("", ""); err == nil {
		t.Error("anonymous connect accepted")
	}
	if err := connect("till", "wrong"); err == nil {
		t.Error("wrong password accepted")
	}
	if err := connect("till", "secret"); err != nil {
		t.Errorf("connect with password: %v", err)
	}
}

func TestMosquittoConf(t *testing.T) {
	p := &Proc{Name: "mosquitto", Port: 1883, Dir: "/d", kind: kindMosquitto}
	conf := mosquittoConf(p, "allow_anonymous false\npassword_file /d/pw\nmax_queued_messages 5\n")
	for _, want := range []string{"listener 1883 127.0.0.1\n", "persistence true\n", "persistence_location /d/\n", "allow_anonymous false\n", "max_queued_messages 5\n", "log_dest file /d/mosquitto.log\n"} {
		if !strings.Contains(conf, want) {
			t.Errorf("conf lacks %q:\n%s", want, conf)
		}
	}
	for _, bad := range []string{"allow_anonymous true", "max_queued_messages 100000"} {
		if strings.Contains(conf, bad) {
			t.Errorf("conf has overridden default %q:\n%s", bad, conf)
		}
	}
}

// checkGone fails unless every pid and its process group have disappeared.
func checkGone(t *testing.T, pids []int) {
	t.Helper()
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("pid %d still exists: kill 0 = %v", pid, err)
		}
		if err := syscall.Kill(-pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("process group %d still exists: kill 0 = %v", pid, err)
		}
	}
}

func eventually(ctx context.Context, t *testing.T, d time.Duration, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("%s: still failing after %v: %v", what, d, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func connectMQTT(t *testing.T, url, id string, clean bool, onMsg mqtt.MessageHandler) mqtt.Client {
	t.Helper()
	o := mqtt.NewClientOptions().AddBroker(url).SetClientID(id).SetCleanSession(clean).
		SetConnectTimeout(2 * time.Second).SetAutoReconnect(false).SetOrderMatters(false)
	if onMsg != nil {
		o.SetDefaultPublishHandler(onMsg)
	}
	c := mqtt.NewClient(o)
	if tok := c.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("connect %s to %s: %v", id, url, tok.Error())
	}
	return c
}

func publish(t *testing.T, c mqtt.Client, topic, payload string) {
	t.Helper()
	if tok := c.Publish(topic, 1, false, payload); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("publish %q: %v", payload, tok.Error())
	}
}

// receive waits for the message want. QoS 1 is at-least-once: a message the broker did
// not see acknowledged before a disconnect comes again, so repeats of earlier messages are
// skipped.
func receive(t *testing.T, msgs <-chan string, seen map[string]bool, want string) {
	t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case got := <-msgs:
			if got == want {
				seen[got] = true
				return
			}
			if !seen[got] {
				t.Fatalf("received %q, want %q", got, want)
			}
		case <-timeout:
			t.Fatalf("no message, want %q", want)
		}
	}
}
