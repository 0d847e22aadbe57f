package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/posgate/posgate/e2e"
	"github.com/posgate/posgate/internal/wire"
)

// TestTillsLearnWhatHQHolds: once the uploader has sent a day to HQ and HQ acknowledged it
// whole, the store says so to its tills (wire.HQHeld, retained), and a real agent records
// it (GET /v1/status hq_through) along with the events it holds: its outbox keeps the
// acknowledged events of later days. Before the upload the store says nothing.
func TestTillsLearnWhatHQHolds(t *testing.T) {
	b := binaries(t)
	srv := biRunServer(t, "--redis-sweep-every", "100ms")
	srv.openStore(t)
	ctx := context.Background()
	dir := t.TempDir()
	secret := "s1-secret-for-the-hq-held-test"
	storesFile := filepath.Join(dir, "stores.json")
	js, _ := json.Marshal([]map[string]string{{"store": biStoreID, "secret": secret}})
	if err := os.WriteFile(storesFile, js, 0o600); err != nil {
		t.Fatal(err)
	}
	hq, err := e2e.StartServe(ctx, b.HQSync, e2e.ServeOptions{DB: filepath.Join(dir, "hq.db"), StoresFile: storesFile, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hq.Kill() })

	bus := biConnect(t, srv.Broker)
	var mu sync.Mutex
	var heard []wire.HQHeld
	if tok := bus.c.Subscribe(wire.HQHeldTopic(biStoreID), 1, func(_ mqtt.Client, m mqtt.Message) {
		h, err := wire.DecodeHQHeld(m.Payload())
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			t.Errorf("hq message %q: %v", m.Payload(), err)
			return
		}
		heard = append(heard, h)
	}); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe: %v", tok.Error())
	}
	loc, _ := time.LoadLocation(biTZ)
	// 10:00 yesterday: the sales, seconds apart, are of that day whatever the time now (now
	// less a day, they went past midnight into today, which the upload does not declare).
	now := time.Now().In(loc)
	yesterday := time.Date(now.Year(), now.Month(), now.Day()-1, 10, 0, 0, 0, loc)
	day := yesterday.Format(wire.BusinessDate)
	var events [][]byte
	for seq := int64(1); seq <= 3; seq++ {
		env := wire.NewEnvelope(wire.KindSale, biStoreID, "T1", seq, yesterday.Add(time.Duration(seq)*time.Second),
			biMarshal(t, biGoodSale(fmt.Sprintf("T1-%d", seq), int(seq))))
		env.Offline = true
		events = append(events, biMarshal(t, env))
	}
	bus.publish(t, "T1", biBatch("T1", events...))
	if d, ok := bus.next("T1", 10*time.Second); !ok || d.err != nil || len(d.acks.Acks) != 3 {
		t.Fatalf("acks %+v (%v)", d.acks, d.err)
	}
	time.Sleep(500 * time.Millisecond) // a few sweeps
	mu.Lock()
	if len(heard) != 0 {
		t.Fatalf("the store said %+v before anything was uploaded", heard)
	}
	mu.Unlock()

	cmd := exec.Command(b.HQSync, "upload", "--once", "--store", biStoreID,
		"--ledger", filepath.Join(srv.Main.DataDir, "ledger.db"), "--state", filepath.Join(srv.Main.DataDir, "upload.db"),
		"--hq-url", hq.BatchesURL(), "--tz", biTZ)
	cmd.Env = append(os.Environ(), "POSGATE_HQ_SECRET="+secret)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("hq-sync upload --once: %v\n%s", err, out)
	}
	waitFor(t, 20*time.Second, "the store to say HQ holds yesterday", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(heard) > 0 && heard[len(heard)-1].Through == day
	})

	// A till that connects later reads the retained message and keeps it.
	adir := filepath.Join(dir, "agent")
	os.MkdirAll(adir, 0o700)
	a, err := e2e.StartAgent(ctx, b.TerminalAgent, e2e.AgentOptions{Store: biStoreID, Terminal: "T9", Broker: srv.Broker,
		DataDir: adir, TZ: biTZ})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Kill() })
	c := a.Cashier()
	waitFor(t, 20*time.Second, "the till to record what HQ holds", func() bool {
		st, err := c.Status()
		return err == nil && st.HQThrough == day
	})
}
