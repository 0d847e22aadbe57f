package main

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/posgate/posgate/e2e"
	"github.com/posgate/posgate/store-server/broker"
)

// lanAddr returns an address of this machine beyond loopback (an interface's IPv4), or
// 127.0.0.1 when it has none: a listener on 0.0.0.0 answers on both.
func lanAddr(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			return n.IP.String()
		}
	}
	t.Log("no address beyond loopback: the listeners on 0.0.0.0 are reached on 127.0.0.1")
	return "127.0.0.1"
}

// freePort returns a free TCP port of this machine.
func freePort(t *testing.T) string {
	t.Helper()
	addr, err := e2e.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(addr)
	return port
}

// TestInsecureLANFromOutside runs the store-server binary with its manager API and its
// embedded broker on every address (0.0.0.0) and no certificate. Without --insecure-lan it
// refuses to start, naming the listener that would speak in clear and what to give
// (a certificate, loopback, or --insecure-lan); nothing listens. With --insecure-lan it
// starts and says so at every start, naming each listener: the manager API answers its
// token over plain HTTP on the machine's LAN address, and a till's account logs in to the
// broker there in clear — what the flag allows.
func TestInsecureLANFromOutside(t *testing.T) {
	t.Parallel()
	bins := binaries(t)
	dir := t.TempDir()
	users := filepath.Join(dir, "users.json")
	js, _ := json.Marshal([]broker.User{mustUser(t, "t01", "password-of-till-t01", "T01")})
	if err := os.WriteFile(users, js, 0o600); err != nil {
		t.Fatal(err)
	}
	apiPort, mqttPort := freePort(t), freePort(t)
	args := func(api, mqttListen string, extra ...string) []string {
		return append([]string{"--store", biStoreID, "--data-dir", filepath.Join(dir, "data"), "--tz", biTZ,
			"--redis-addr", "127.0.0.1:1", "--mqtt-users", users, "--api-listen", api, "--mqtt-listen", mqttListen}, extra...)
	}
	for _, c := range []struct {
		name, api, mqtt, want string
	}{
		{"the manager API beyond loopback", "0.0.0.0:" + apiPort, "127.0.0.1:" + mqttPort,
			"the manager API on 0.0.0.0:" + apiPort + " would carry its tokens in clear"},
		{"the broker beyond loopback", "127.0.0.1:" + apiPort, "0.0.0.0:" + mqttPort,
			"the embedded broker on 0.0.0.0:" + mqttPort + " would carry the tills' passwords and sales in clear"},
	} {
		code, stderr := runStoreServer(t, bins.StoreServer, args(c.api, c.mqtt)...)
		if code == 0 || !strings.Contains(stderr, c.want) || !strings.Contains(stderr, "--insecure-lan") ||
			!strings.Contains(stderr, "-tls-cert") || !strings.Contains(stderr, "loopback") {
			t.Errorf("%s without --insecure-lan: exit %d, stderr %q: want a refusal naming it", c.name, code, stderr)
		}
	}

	lan := lanAddr(t)
	for start := 1; start <= 2; start++ {
		log := filepath.Join(dir, fmt.Sprintf("start-%d.log", start))
		f, err := os.Create(log)
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bins.StoreServer, args("0.0.0.0:"+apiPort, "0.0.0.0:"+mqttPort, "--insecure-lan")...)
		cmd.Env = append(os.Environ(), "POSGATE_API_TOKEN="+biToken)
		cmd.Stdout, cmd.Stderr = f, f
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		stop := func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			_ = cmd.Wait()
			f.Close()
		}
		status := 0
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			req, _ := http.NewRequest(http.MethodGet, "http://"+net.JoinHostPort(lan, apiPort)+"/v1/whoami", nil)
			req.Header.Set("Authorization", "Bearer "+biToken)
			if res, err := http.DefaultClient.Do(req); err == nil {
				status = res.StatusCode
				res.Body.Close()
				break
			}
		}
		if status != http.StatusOK {
			stop()
			b, _ := os.ReadFile(log)
			t.Fatalf("start %d with --insecure-lan: the manager API on %s answered %d\n%s", start, lan, status, b)
		}
		cl := mqtt.NewClient(mqtt.NewClientOptions().AddBroker("tcp://" + net.JoinHostPort(lan, mqttPort)).
			SetClientID("posgate-" + biStoreID + "-T01").SetUsername("t01").SetPassword("password-of-till-t01").
			SetConnectTimeout(10 * time.Second).SetAutoReconnect(false))
		tok := cl.Connect()
		if !tok.WaitTimeout(15*time.Second) || tok.Error() != nil {
			t.Errorf("start %d: the till's login in clear on %s: %v", start, lan, tok.Error())
		} else {
			cl.Disconnect(100)
		}
		stop()
		b, _ := os.ReadFile(log)
		for _, want := range []string{
			`INSECURE: the embedded broker listens beyond loopback without TLS (--insecure-lan)`,
			`INSECURE: the manager API listens beyond loopback without TLS (--insecure-lan)`,
			`listen=0.0.0.0:` + mqttPort, `listen=0.0.0.0:` + apiPort,
		} {
			if !strings.Contains(string(b), want) {
				t.Errorf("start %d with --insecure-lan: the log lacks %q:\n%s", start, want, b)
			}
		}
	}
}
