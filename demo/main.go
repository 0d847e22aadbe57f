// Command posgate-demo runs one store end to end on embedded defaults and says whether every
// fen and every unit adds up: a Redis master with 2 replicas and 3 Sentinels, store-server on
// its embedded MQTT broker, three terminal-agents and a scripted cashier load. Midway it
// takes one terminal off the network for a while (its sales go on offline) and kills the
// Redis master once. It ends by printing, per terminal and business day, agent totals =
// ledger totals = Redis counters, and stock conservation per SKU, then PASS or FAIL.
//
// make demo builds the binaries and runs it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/posgate/posgate/e2e"
	"github.com/posgate/posgate/internal/stack"
	"github.com/posgate/posgate/store-server/client"
)

const demoCatalog = `sku,barcode,name,price
MILK,6901234567890,Milk 1L,12.50
BREAD,6901234567891,Bread,8.99
EGGS,6901234567892,Eggs x10,15.90
RICE,6901234567893,Rice 5kg,49.00
TEA,6901234567894,Green tea,0.30
`

var opening = map[string]int64{"MILK": 400, "BREAD": 300, "EGGS": 200, "RICE": 100, "TEA": 5}

func main() {
	bin := flag.String("bin", "bin", "directory with store-server and terminal-agent")
	dur := flag.Duration("duration", 20*time.Second, "how long the cashiers sell")
	keep := flag.Bool("keep", false, "keep the working directory")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ok, err := run(ctx, *bin, *dur, *keep)
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
	if !ok {
		os.Exit(1)
	}
}

func say(format string, args ...any) {
	fmt.Printf("%s  %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

// demo is one run: what it started, to stop at its end.
type demo struct {
	dir      string
	bins     e2e.Binaries
	stack    *stack.Stack
	store    *e2e.StoreServer
	agents   []*e2e.Agent
	cashiers map[string]*e2e.Cashier
	proxy    *e2e.Proxy // T02's link to the store, which the demo cuts
}

// close stops what the demo started, the tills first.
func (d *demo) close() {
	for _, a := range d.agents {
		a.Stop()
	}
	if d.proxy != nil {
		d.proxy.Close()
	}
	if d.store != nil {
		d.store.Stop()
	}
	if d.stack != nil {
		d.stack.Close()
	}
}

var terminals = []string{"T01", "T02", "T03"}

func run(ctx context.Context, binDir string, dur time.Duration, keep bool) (bool, error) {
	d := &demo{bins: e2e.Binaries{StoreServer: filepath.Join(binDir, "store-server"),
		TerminalAgent: filepath.Join(binDir, "terminal-agent")}, cashiers: map[string]*e2e.Cashier{}}
	var err error
	if d.dir, err = os.MkdirTemp("", "posgate-demo-"); err != nil {
		return false, err
	}
	if keep {
		say("working directory %s (kept)", d.dir)
	} else {
		defer os.RemoveAll(d.dir)
	}
	defer d.close()
	if err := d.startStore(ctx); err != nil {
		return false, err
	}
	if err := d.startTills(ctx); err != nil {
		return false, err
	}
	d.sell(ctx, dur)
	return d.verify(ctx, dur), nil
}

// startStore starts Redis behind Sentinels and the store-server, and sets the opening stock.
func (d *demo) startStore(ctx context.Context) error {
	say("starting Redis: 1 master, 2 replicas, 3 Sentinels")
	var err error
	d.stack, err = stack.Start(ctx, stack.Options{Dir: filepath.Join(d.dir, "stack"), Redis: true, Replicas: 2, Sentinels: 3})
	if err != nil {
		return err
	}
	catFile := filepath.Join(d.dir, "catalog.csv")
	if err := os.WriteFile(catFile, []byte(demoCatalog), 0o600); err != nil {
		return err
	}
	storeDir := filepath.Join(d.dir, "store")
	if err := os.MkdirAll(storeDir, 0o700); err != nil {
		return err
	}
	say("starting store-server S001 on its embedded MQTT broker")
	d.store, err = e2e.StartStore(ctx, d.bins.StoreServer, e2e.StoreOptions{Store: "S001", DataDir: storeDir,
		Sentinels: d.stack.SentinelAddrs(), MasterName: d.stack.MasterName, Catalog: catFile})
	if err != nil {
		return err
	}
	for sku, q := range opening {
		req := client.AdjustRequest{ID: "opening-" + sku, SKU: sku, Delta: q, Reason: client.ReasonOpening}
		if _, err := d.store.Manager().Adjust(ctx, req); err != nil {
			return err
		}
	}
	say("opening stock set: %v", opening)
	return nil
}

// startTills starts a terminal-agent per till, T02 behind a link the demo can cut, and a
// cashier for each once its agent holds the catalog.
func (d *demo) startTills(ctx context.Context) error {
	// Refunds made while a till is cut off are allowed, each approved by the duty supervisor.
	if err := d.store.AllowOfflineRefunds(ctx); err != nil {
		return err
	}
	for _, term := range terminals {
		broker := d.store.Broker
		if term == "T02" {
			var err error
			if d.proxy, err = e2e.NewProxy(strings.TrimPrefix(d.store.Broker, "tcp://")); err != nil {
				return err
			}
			broker = "tcp://" + d.proxy.Addr()
		}
		adir := filepath.Join(d.dir, "agent-"+term)
		if err := os.MkdirAll(adir, 0o700); err != nil {
			return err
		}
		a, err := e2e.StartAgent(ctx, d.bins.TerminalAgent, e2e.AgentOptions{Store: "S001", Terminal: term,
			Broker: broker, DataDir: adir})
		if err != nil {
			return err
		}
		d.agents = append(d.agents, a)
		c, err := e2e.ReadyCashier(ctx, a.API, a.Token, 20*time.Second)
		if err != nil {
			return err
		}
		c.Supervisor = &e2e.DutySupervisor
		d.cashiers[term] = c
		say("terminal-agent %s up (API %s)", term, a.API)
	}
	return nil
}

// sell runs the cashiers for dur, with T02 offline for a while and the Redis master killed
// midway.
func (d *demo) sell(ctx context.Context, dur time.Duration) {
	say("cashiers selling for %v", dur)
	lctx, cancel := context.WithTimeout(ctx, dur)
	defer cancel()
	var wg sync.WaitGroup
	for i, term := range terminals {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sell(lctx, d.cashiers[term], i)
		}()
	}
	go d.cutT02(lctx, dur)
	go d.killMaster(lctx, ctx, dur)
	wg.Wait()
	d.proxy.Restore()
	counts := map[int]int{}
	for _, c := range d.cashiers {
		for k, v := range c.Counts() {
			counts[k] += v
		}
	}
	say("load done; answers by HTTP status: %v", counts)
}

// cutT02 takes T02 off the network for a quarter of the load, from a fifth of it in.
func (d *demo) cutT02(lctx context.Context, dur time.Duration) {
	sleep(lctx, dur/5)
	say("T02 loses its network")
	d.proxy.Cut()
	sleep(lctx, dur/4)
	st, _ := d.cashiers["T02"].Status()
	say("T02 offline: %d events waiting, oldest %d ms", st.Backlog, st.OldestAgeMs)
	d.proxy.Restore()
	say("T02 back on the network")
}

// killMaster kills the Redis master halfway through the load and waits for the Sentinels'
// failover.
func (d *demo) killMaster(lctx, ctx context.Context, dur time.Duration) {
	sleep(lctx, dur/2)
	master, err := d.stack.MasterAddr(ctx)
	if err != nil {
		say("cannot find the Redis master: %v", err)
		return
	}
	for _, r := range d.stack.Redis {
		if r.Addr() == master {
			say("killing the Redis master %s", master)
			r.Kill()
		}
	}
	if nm, err := d.stack.WaitFailover(ctx, master); err == nil {
		say("Sentinels promoted %s", nm)
	}
}

// verify waits for the store to leave its rebuild and checks the invariants over the
// business dates the cashiers sold on (the demo may cross midnight).
func (d *demo) verify(ctx context.Context, dur time.Duration) bool {
	now := time.Now().In(mustLoc("Asia/Shanghai"))
	dates := []string{now.Format("2006-01-02")}
	if y := now.Add(-dur - time.Minute).Format("2006-01-02"); y != dates[0] {
		dates = append([]string{y}, dates...)
	}
	vctx, vcancel := context.WithTimeout(ctx, 90*time.Second)
	defer vcancel()
	waitRedisMode(vctx, d.store)
	rep := e2e.Verify(vctx, d.store, d.cashiers, dates)
	fmt.Println()
	fmt.Print(rep.String())
	return rep.OK
}

// sell runs one cashier's script: mixed baskets and tenders, and a refund now and then.
func sell(ctx context.Context, c *e2e.Cashier, seed int) {
	baskets := [][]string{{"MILK"}, {"BREAD", "EGGS"}, {"RICE", "MILK", "TEA"}, {"TEA"}, {"EGGS", "EGGS"}}
	methods := []string{"cash", "card", "qr"}
	for i := seed; ctx.Err() == nil; i++ {
		c.Sale(baskets[i%len(baskets)], methods[i%len(methods)])
		if i%7 == 0 {
			c.RefundOne(i)
		}
		sleep(ctx, 20*time.Millisecond)
	}
}

func waitRedisMode(ctx context.Context, s *e2e.StoreServer) {
	for ctx.Err() == nil {
		if m, err := s.Manager().Mode(ctx); err == nil && m.Mode == client.ModeRedis {
			return
		}
		sleep(ctx, 100*time.Millisecond)
	}
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

func mustLoc(name string) *time.Location {
	l, err := time.LoadLocation(name)
	if err != nil {
		return time.Local
	}
	return l
}
