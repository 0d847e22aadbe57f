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

func run(ctx context.Context, binDir string, dur time.Duration, keep bool) (bool, error) {
	bins := e2e.Binaries{StoreServer: filepath.Join(binDir, "store-server"), TerminalAgent: filepath.Join(binDir, "terminal-agent")}
	dir, err := os.MkdirTemp("", "posgate-demo-")
	if err != nil {
		return false, err
	}
	if keep {
		say("working directory %s (kept)", dir)
	} else {
		defer os.RemoveAll(dir)
	}

	say("starting Redis: 1 master, 2 replicas, 3 Sentinels")
	st, err := stack.Start(ctx, stack.Options{Dir: filepath.Join(dir, "stack"), Redis: true, Replicas: 2, Sentinels: 3})
	if err != nil {
		return false, err
	}
	defer st.Close()

	catFile := filepath.Join(dir, "catalog.csv")
	if err := os.WriteFile(catFile, []byte(demoCatalog), 0o600); err != nil {
		return false, err
	}
	storeDir := filepath.Join(dir, "store")
	os.MkdirAll(storeDir, 0o700)
	say("starting store-server S001 on its embedded MQTT broker")
	srv, err := e2e.StartStore(ctx, bins.StoreServer, e2e.StoreOptions{Store: "S001", DataDir: storeDir,
		Sentinels: st.SentinelAddrs(), MasterName: st.MasterName, Catalog: catFile})
	if err != nil {
		return false, err
	}
	defer srv.Stop()
	for sku, q := range opening {
		req := client.AdjustRequest{ID: "opening-" + sku, SKU: sku, Delta: q, Reason: client.ReasonOpening}
		if _, err := srv.Manager().Adjust(ctx, req); err != nil {
			return false, err
		}
	}
	say("opening stock set: %v", opening)

	terminals := []string{"T01", "T02", "T03"}
	cashiers := map[string]*e2e.Cashier{}
	var proxy *e2e.Proxy
	for _, term := range terminals {
		broker := srv.Broker
		if term == "T02" { // T02 reaches the store through a link the demo can cut
			if proxy, err = e2e.NewProxy(strings.TrimPrefix(srv.Broker, "tcp://")); err != nil {
				return false, err
			}
			defer proxy.Close()
			broker = "tcp://" + proxy.Addr()
		}
		adir := filepath.Join(dir, "agent-"+term)
		os.MkdirAll(adir, 0o700)
		a, err := e2e.StartAgent(ctx, bins.TerminalAgent, e2e.AgentOptions{Store: "S001", Terminal: term,
			Broker: broker, DataDir: adir, Extra: []string{"--offline-refunds"}})
		if err != nil {
			return false, err
		}
		defer a.Stop()
		c := e2e.NewCashier(a.API)
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		err = c.WaitCatalog(wctx)
		cancel()
		if err != nil {
			return false, err
		}
		cashiers[term] = c
		say("terminal-agent %s up (API %s)", term, a.API)
	}

	say("cashiers selling for %v", dur)
	lctx, cancel := context.WithTimeout(ctx, dur)
	defer cancel()
	var wg sync.WaitGroup
	for i, term := range terminals {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sell(lctx, cashiers[term], i)
		}()
	}
	go func() {
		sleep(lctx, dur/5)
		say("T02 loses its network")
		proxy.Cut()
		sleep(lctx, dur/4)
		st2, _ := cashiers["T02"].Status()
		say("T02 offline: %d events waiting, oldest %d ms", st2.Backlog, st2.OldestAgeMs)
		proxy.Restore()
		say("T02 back on the network")
	}()
	go func() {
		sleep(lctx, dur/2)
		master, err := st.MasterAddr(ctx)
		if err != nil {
			say("cannot find the Redis master: %v", err)
			return
		}
		for _, r := range st.Redis {
			if r.Addr() == master {
				say("killing the Redis master %s", master)
				r.Kill()
			}
		}
		if nm, err := st.WaitFailover(ctx, master); err == nil {
			say("Sentinels promoted %s", nm)
		}
	}()
	wg.Wait()
	proxy.Restore()
	counts := map[int]int{}
	for _, c := range cashiers {
		for k, v := range c.Counts() {
			counts[k] += v
		}
	}
	say("load done; answers by HTTP status: %v", counts)

	// The business dates the cashiers sold on (the demo may cross midnight).
	now := time.Now().In(mustLoc("Asia/Shanghai"))
	dates := []string{now.Format("2006-01-02")}
	if y := now.Add(-dur - time.Minute).Format("2006-01-02"); y != dates[0] {
		dates = append([]string{y}, dates...)
	}
	vctx, vcancel := context.WithTimeout(ctx, 90*time.Second)
	defer vcancel()
	waitRedisMode(vctx, srv)
	rep := e2e.Verify(vctx, srv, cashiers, dates)
	fmt.Println()
	fmt.Print(rep.String())
	return rep.OK, nil
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
