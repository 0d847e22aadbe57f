package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/posgate/posgate/internal/harness"
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
	users := filepath.Join(dir, "users.json")
	b, _ := json.Marshal([]broker.User{{Username: "t01", Password: "t01-pass", Terminal: "T01"}})
	if err := os.WriteFile(users, b, 0o600); err != nil {
		t.Fatal(err)
	}
	catalog := filepath.Join(dir, "catalog.csv")
	if err := os.WriteFile(catalog, []byte(e2eCatalog), 0o600); err != nil {
		t.Fatal(err)
	}
	addrs, _ := startMain(t, "--store", "S1", "--data-dir", filepath.Join(dir, "data"),
		"--redis-addr", s.Redis[0].Addr(), "--mqtt-listen", "127.0.0.1:0", "--mqtt-users", users,
		"--mqtt-tls-cert", cert, "--mqtt-tls-key", key, "--api-listen", "127.0.0.1:0", "--api-token", biToken,
		"--tz", "Asia/Shanghai", "--catalog", catalog, "--log-level", "error")
	ctx := context.Background()
	if !strings.HasPrefix(addrs.Broker, "tls://") {
		t.Fatalf("broker %s, want tls://", addrs.Broker)
	}

	if err := os.MkdirAll(filepath.Join(dir, "T01"), 0o700); err != nil {
		t.Fatal(err)
	}
	a, err := harness.StartAgent(ctx, bins.TerminalAgent, harness.AgentOptions{Store: "S1", Terminal: "T01",
		Broker: addrs.Broker, DataDir: filepath.Join(dir, "T01"),
		Extra: []string{"--broker-ca", cert, "--username", "t01", "--password", "t01-pass"}})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Kill()
	c := harness.NewCashier(a.API)
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
		SetClientID("plain").SetUsername("t01").SetPassword("t01-pass").SetAutoReconnect(false).
		SetConnectTimeout(3 * time.Second))
	if tok := plain.Connect(); tok.WaitTimeout(5*time.Second) && tok.Error() == nil {
		plain.Disconnect(0)
		t.Fatal("a client speaking plain MQTT to the TLS port was let in")
	}
}
