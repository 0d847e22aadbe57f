// Command posgate-demo runs the chain end to end on embedded defaults and says whether every
// fen and every unit adds up: a Redis master with 2 replicas and 3 Sentinels, store-server on
// its embedded MQTT broker, three terminal-agents and a scripted cashier load, hq-sync serve
// at HQ (SQLite) and hq-sync upload at the store. The store keeps the clock of a fixed zone
// (UTC+hh:mm) whose midnight falls during the load, so that the business day it trades is
// over by the end of the run: the tills close it, the uploader declares it to HQ, and
// hq-sync reconcile proves it there. Before midnight it takes one terminal off the network
// (its sales go on offline, across midnight, and oversell a SKU) and kills the Redis master
// once. It ends by printing, per terminal and business day, agent totals = ledger totals =
// Redis counters, stock conservation per SKU, and HQ's reconcile of the day, then PASS or
// FAIL. It prints the store dashboard's and the HQ page's addresses with their tokens; with
// --hold it keeps everything running (a till selling now and then) until Ctrl-C.
//
// make demo builds the binaries and runs it (make demo HOLD=1: --hold).
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
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/client"
)

const demoCatalog = `sku,barcode,name,price
MILK,6901234567890,Milk 1L,12.50
BREAD,6901234567891,Bread,8.99
EGGS,6901234567892,Eggs x10,15.90
RICE,6901234567893,Rice 5kg,49.00
TEA,6901234567894,Green tea,0.30
`

// opening is the stock booked at the start: enough of each SKU for the load but TEA, which
// live sales take to zero early and T02's offline sales then oversell.
var opening = map[string]int64{"MILK": 3000, "BREAD": 3000, "EGGS": 3000, "RICE": 2000, "TEA": 5}

func main() {
	bin := flag.String("bin", "bin", "directory with store-server, terminal-agent and hq-sync")
	dur := flag.Duration("duration", 20*time.Second, "how long, at least, the cashiers sell before the store's midnight")
	keep := flag.Bool("keep", false, "keep the working directory")
	hold := flag.Bool("hold", false, "after the verdict, keep everything running (a till selling now and then) until Ctrl-C")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ok, err := run(ctx, *bin, *dur, *keep, *hold)
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
	zone     string         // the store's time zone, UTC+hh:mm
	loc      *time.Location // zone
	midnight time.Time      // the store's midnight during the load
	stack    *stack.Stack
	store    *e2e.StoreServer
	hq       *e2e.Serve
	uploader *e2e.Uploader
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
	if d.uploader != nil {
		d.uploader.Stop()
	}
	if d.store != nil {
		d.store.Stop()
	}
	if d.hq != nil {
		d.hq.Stop()
	}
	if d.stack != nil {
		d.stack.Close()
	}
}

var terminals = []string{"T01", "T02", "T03"}

// setupBudget is how long starting Redis, the store, HQ and the tills takes, at most, on a
// loaded machine: the store's midnight is put at least this plus the load's duration away.
const setupBudget = 15 * time.Second

// after is how long the cashiers sell past the store's midnight, on the new business day.
const after = 6 * time.Second

func run(ctx context.Context, binDir string, dur time.Duration, keep, hold bool) (bool, error) {
	d := &demo{bins: e2e.Binaries{StoreServer: filepath.Join(binDir, "store-server"),
		TerminalAgent: filepath.Join(binDir, "terminal-agent"), HQSync: filepath.Join(binDir, "hq-sync")},
		cashiers: map[string]*e2e.Cashier{}}
	d.midnight, d.zone = e2e.ZoneWithMidnight(time.Now().Add(setupBudget + dur))
	var err error
	if d.loc, err = wire.LoadLocation(d.zone); err != nil {
		return false, err
	}
	if d.dir, err = os.MkdirTemp("", "posgate-demo-"); err != nil {
		return false, err
	}
	if keep {
		say("working directory %s (kept)", d.dir)
	} else {
		defer os.RemoveAll(d.dir)
	}
	defer d.close()
	say("the store keeps the clock of %s: its midnight is at %s here, during the load", d.zone,
		d.midnight.Local().Format("15:04:05"))
	if err := d.startStore(ctx); err != nil {
		return false, err
	}
	if err := d.startHQ(ctx); err != nil {
		return false, err
	}
	if err := d.startTills(ctx); err != nil {
		return false, err
	}
	d.printAddresses()
	d.sell(ctx)
	ok := d.verify(ctx)
	if hold && ctx.Err() == nil {
		d.hold(ctx)
	}
	d.printAddresses()
	fmt.Println(verdict(ok))
	return ok, nil
}

func verdict(ok bool) string {
	if ok {
		return "PASS"
	}
	return "FAIL"
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
	d.store, err = e2e.StartStore(ctx, d.bins.StoreServer, e2e.StoreOptions{Store: "S001", DataDir: storeDir, TZ: d.zone,
		Token: managerToken, Sentinels: d.stack.SentinelAddrs(), MasterName: d.stack.MasterName, Catalog: catFile,
		Terminals: terminals}) // its enrolled tills: the store takes no other terminal
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
			Broker: broker, DataDir: adir, TZ: d.zone})
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

// sell runs the cashiers until a few seconds past the store's midnight, with T02 offline
// across midnight and the Redis master killed midway to it.
func (d *demo) sell(ctx context.Context) {
	end := d.midnight.Add(after)
	say("cashiers selling until %s (the store's 00:00:%02d)", end.Local().Format("15:04:05"), int(after.Seconds()))
	lctx, cancel := context.WithDeadline(ctx, end)
	defer cancel()
	var wg sync.WaitGroup
	for i, term := range terminals {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sell(lctx, d.cashiers[term], i, 20*time.Millisecond)
		}()
	}
	go d.cutT02(lctx)
	go d.killMaster(lctx, ctx, time.Until(d.midnight)/2)
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

// cutT02 takes T02 off the network from 8 s before the store's midnight to 3 s after it:
// it sells offline, dates those sales by their time (the day before for those before
// midnight), and sends them when it is back (invariant 7).
func (d *demo) cutT02(lctx context.Context) {
	sleep(lctx, time.Until(d.midnight.Add(-8*time.Second)))
	if lctx.Err() != nil {
		return
	}
	say("T02 loses its network")
	d.proxy.Cut()
	sleep(lctx, time.Until(d.midnight.Add(3*time.Second)))
	st, _ := d.cashiers["T02"].Status()
	say("T02 offline: %d events waiting, oldest %d ms", st.Backlog, st.OldestAgeMs)
	d.proxy.Restore()
	say("T02 back on the network")
}

// killMaster kills the Redis master after wait and waits for the Sentinels' failover.
func (d *demo) killMaster(lctx, ctx context.Context, wait time.Duration) {
	sleep(lctx, wait)
	if lctx.Err() != nil {
		return
	}
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

// verify closes the business day before the store's midnight at every till, checks the
// invariants at the store over both days the cashiers sold on, and then HQ's reconcile of
// the closed day.
func (d *demo) verify(ctx context.Context) bool {
	closed := d.midnight.Add(-time.Second).In(d.loc).Format(wire.BusinessDate)
	today := d.midnight.In(d.loc).Format(wire.BusinessDate)
	vctx, vcancel := context.WithTimeout(ctx, 90*time.Second)
	defer vcancel()
	waitRedisMode(vctx, d.store)
	closesOK := d.closeDay(vctx, closed)
	rep := e2e.Verify(vctx, d.store, d.cashiers, []string{closed, today})
	fmt.Println()
	fmt.Print(strings.Join(rep.Lines, "\n") + "\n")
	hqOK := d.reconcile(vctx, closed)
	return closesOK && rep.OK && hqOK
}

// sell runs one cashier's script, a step every pause: mixed baskets and tenders, and a
// refund now and then.
func sell(ctx context.Context, c *e2e.Cashier, seed int, pause time.Duration) {
	baskets := [][]string{{"MILK"}, {"BREAD", "EGGS"}, {"RICE", "MILK", "TEA"}, {"TEA"}, {"EGGS", "EGGS"}}
	methods := []string{"cash", "card", "qr"}
	for i := seed; ctx.Err() == nil; i++ {
		c.Sale(baskets[i%len(baskets)], methods[i%len(methods)])
		if i%7 == 0 {
			c.RefundOne(i)
		}
		sleep(ctx, pause)
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
