package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"golang.org/x/crypto/bcrypt"

	"github.com/posgate/posgate/e2e"
	"github.com/posgate/posgate/internal/certtest"
	"github.com/posgate/posgate/internal/stack"
	"github.com/posgate/posgate/store-server/broker"
)

// TestTerminalOverTLS: the embedded broker speaks MQTT over TLS (--mqtt-tls-cert), with an
// account per terminal. A real terminal-agent trusting the store's certificate (--broker-ca)
// sells and its sale reaches the ledger; a client speaking plain MQTT to the same port is
// not let in.
func TestTerminalOverTLS(t *testing.T) {
	bins := binaries(t)
	s := stack.Run(t, stack.Options{Redis: true})
	cert, key := selfSigned(t)
	dir := t.TempDir()
	addrs := startTLSMain(t, s, dir, cert, key, mustUser(t, "t01", "t01-pass-of-the-tests", "T01"))
	ctx := context.Background()
	if !strings.HasPrefix(addrs.Broker, "tls://") {
		t.Fatalf("broker %s, want tls://", addrs.Broker)
	}

	if err := os.MkdirAll(filepath.Join(dir, "T01"), 0o700); err != nil {
		t.Fatal(err)
	}
	a, err := e2e.StartAgent(ctx, bins.TerminalAgent, e2e.AgentOptions{Store: "S1", Terminal: "T01",
		Broker: addrs.Broker, DataDir: filepath.Join(dir, "T01"),
		Extra: []string{"--broker-ca", cert}, Username: "t01", Password: "t01-pass-of-the-tests"})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Kill()
	c := a.Cashier()
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	if err := c.WaitCatalog(wctx); err != nil {
		t.Fatalf("the agent got no catalog over TLS: %v", err)
	}
	if err := c.Sale([]string{"MILK", "BREAD"}, "cash"); err != nil {
		t.Fatal(err)
	}
	st, err := c.WaitDrained(wctx)
	if err != nil || !st.Online {
		t.Fatalf("drained over TLS: %+v, %v", st, err)
	}

	plain := mqtt.NewClient(mqtt.NewClientOptions().AddBroker("tcp://" + strings.TrimPrefix(addrs.Broker, "tls://")).
		SetClientID("plain").SetUsername("t01").SetPassword("t01-pass-of-the-tests").SetAutoReconnect(false).
		SetConnectTimeout(3 * time.Second))
	if tok := plain.Connect(); tok.WaitTimeout(5*time.Second) && tok.Error() == nil {
		plain.Disconnect(0)
		t.Fatal("a client speaking plain MQTT to the TLS port was let in")
	}
}

// TestTerminalOverTLSRenewed: the embedded broker's certificate, issued by the chain's CA,
// is renewed in place under the running store-server. Between the two renames an MQTT
// client is still served the old certificate and let in; after them a new MQTT connection
// is served the new one, and a real terminal-agent that read the CA (--broker-ca) at its
// start, its connection cut, reconnects to the renewed broker and its sale reaches the
// store. The expiry metric follows.
func TestTerminalOverTLSRenewed(t *testing.T) {
	fastCertChecks(t)
	bins := binaries(t)
	s := stack.Run(t, stack.Options{Redis: true})
	ca := certtest.NewCA(t)
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "mqtt.pem"), filepath.Join(dir, "mqtt-key.pem")
	first := time.Now().Add(30 * 24 * time.Hour).Truncate(time.Second)
	c1, k1 := ca.Issue(t, first)
	certtest.Replace(t, cert, c1)
	certtest.Replace(t, key, k1)
	addrs := startTLSMain(t, s, dir, cert, key, mustUser(t, "t01", "t01-pass-of-the-tests", "T01"),
		mustUser(t, "t02", "t02-pass-of-the-tests", "T02"))
	brokerAddr := strings.TrimPrefix(addrs.Broker, "tls://")
	srv := &biServer{Base: "http://" + addrs.API, Client: &http.Client{Timeout: 10 * time.Second}}
	expiry := func() float64 {
		v, _ := srv.scrape(t).value("posgate_store_tls_cert_expiry_timestamp_seconds", "listener", "mqtt")
		return v
	}
	// probe connects over MQTT as T02 and returns when the certificate it was served expires.
	probe := func() time.Time {
		t.Helper()
		var served atomic.Pointer[x509.Certificate]
		c := mqtt.NewClient(mqtt.NewClientOptions().AddBroker(addrs.Broker).SetClientID("posgate-S1-T02").
			SetUsername("t02").SetPassword("t02-pass-of-the-tests").SetAutoReconnect(false).SetConnectTimeout(5 * time.Second).
			SetTLSConfig(&tls.Config{RootCAs: ca.Pool, MinVersion: tls.VersionTLS12,
				VerifyConnection: func(cs tls.ConnectionState) error {
					served.Store(cs.PeerCertificates[0])
					return nil
				}}))
		if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("MQTT over TLS as T02: %v", tok.Error())
		}
		c.Disconnect(0)
		return served.Load().NotAfter
	}

	proxy, err := e2e.NewProxy(brokerAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	ctx := context.Background()
	if err := os.MkdirAll(filepath.Join(dir, "T01"), 0o700); err != nil {
		t.Fatal(err)
	}
	a, err := e2e.StartAgent(ctx, bins.TerminalAgent, e2e.AgentOptions{Store: "S1", Terminal: "T01",
		Broker: "tls://" + proxy.Addr(), DataDir: filepath.Join(dir, "T01"),
		Extra: []string{"--broker-ca", ca.Path}, Username: "t01", Password: "t01-pass-of-the-tests"})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Kill()
	c := a.Cashier()
	wctx, wcancel := context.WithTimeout(ctx, 60*time.Second)
	defer wcancel()
	if err := c.WaitCatalog(wctx); err != nil {
		t.Fatalf("the agent got no catalog over TLS: %v", err)
	}
	if err := c.Sale([]string{"MILK"}, "cash"); err != nil {
		t.Fatal(err)
	}
	if st, err := c.WaitDrained(wctx); err != nil || !st.Online {
		t.Fatalf("drained over TLS: %+v, %v", st, err)
	}
	if got := probe(); !got.Equal(first) {
		t.Fatalf("served a certificate expiring %v, want %v", got, first)
	}
	if v := expiry(); v != float64(first.Unix()) {
		t.Errorf("expiry metric %v, want %d", v, first.Unix())
	}

	second := first.Add(60 * 24 * time.Hour)
	c2, k2 := ca.Issue(t, second)
	certtest.Replace(t, cert, c2) // the key not yet
	time.Sleep(200 * time.Millisecond)
	if got := probe(); !got.Equal(first) {
		t.Fatalf("mid-rotation: served a certificate expiring %v, want the old one (%v)", got, first)
	}
	certtest.Replace(t, key, k2)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		got := probe()
		if got.Equal(second) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("10 s after the renewal a new MQTT connection is served the certificate expiring %v, want %v", got, second)
		}
	}
	if v := expiry(); v != float64(second.Unix()) {
		t.Errorf("expiry metric %v, want %d", v, second.Unix())
	}

	// The agent's connection, made with the old certificate, is cut; it reconnects to the
	// renewed broker trusting the CA it read at its start.
	proxy.Cut()
	if err := c.Sale([]string{"BREAD"}, "cash"); err != nil {
		t.Fatal(err)
	}
	proxy.Restore()
	if st, err := c.WaitDrained(wctx); err != nil || !st.Online {
		agentLog, _ := os.ReadFile(a.Log)
		t.Fatalf("the agent after the renewal: %+v, %v\n%s", st, err, agentLog)
	}
}

// startTLSMain starts a store-server in dir whose embedded broker speaks MQTT over TLS with
// cert and key and admits users, on s's Redis, with the e2e catalog.
func startTLSMain(t *testing.T, s *stack.Stack, dir, cert, key string, users ...broker.User) Addrs {
	t.Helper()
	usersFile := filepath.Join(dir, "users.json")
	b, _ := json.Marshal(users)
	if err := os.WriteFile(usersFile, b, 0o600); err != nil {
		t.Fatal(err)
	}
	catalog := filepath.Join(dir, "catalog.csv")
	if err := os.WriteFile(catalog, []byte(e2eCatalog), 0o600); err != nil {
		t.Fatal(err)
	}
	addrs, _ := startMain(t, "--store", "S1", "--data-dir", filepath.Join(dir, "data"),
		"--redis-addr", s.Redis[0].Addr(), "--mqtt-listen", "127.0.0.1:0", "--mqtt-users", usersFile,
		"--mqtt-tls-cert", cert, "--mqtt-tls-key", key, "--api-listen", "127.0.0.1:0", "--api-token-file", secretFile(t, biToken),
		"--tz", "Asia/Shanghai", "--catalog", catalog, "--log-level", "error")
	return addrs
}

// mustUser returns a terminal account whose password is hashed at bcrypt's least cost.
func mustUser(t *testing.T, username, password, terminal string) broker.User {
	t.Helper()
	u, err := broker.NewUser(username, password, terminal, bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
