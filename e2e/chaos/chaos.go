// Package chaos is posgate's randomized fault suite, in the spirit of Jepsen's nemesis: a
// schedule drawn from a seed injects faults into real processes (Redis master killed or
// frozen, projection keys dropped, the broker restarted, a till's network cut, the
// store-server with its uploader, an agent or HQ's serve killed, a till's clock stepped)
// while cashiers sell, and the invariants are checked after every fault and at the end,
// when HQ must also hold every row and exception of the store's ledger. The same seed draws
// the same schedule: a failing seed is run again with `make chaos SEED=… MINUTES=…`.
package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/posgate/posgate/e2e"
	"github.com/posgate/posgate/internal/clock"
	"github.com/posgate/posgate/internal/stack"
	"github.com/posgate/posgate/internal/wire"
)

// Fault is one kind of fault the nemesis injects.
type Fault int

// The faults.
const (
	RedisKill     Fault = iota // SIGKILL the Redis master; Sentinel fails over; the node comes back as a replica
	RedisFreeze                // SIGSTOP the Redis master until Sentinel fails over, then SIGCONT: the old master returns
	DropSKU                    // HDEL one SKU's field from the stock hash
	DropCounters               // DEL one terminal's counter hash of today
	DropStoreKeys              // DEL every key of the store
	FlushAll                   // FLUSHALL on the master
	BrokerRestart              // SIGKILL mosquitto, then start it again (the store and the tills reconnect)
	TillCut                    // cut one till's network (e2e.Proxy), then restore it
	StoreKill                  // SIGKILL the store-server and its uploader, then start them again
	AgentKill                  // SIGKILL one terminal-agent, then start it again
	ClockStep                  // step one till's clock forward or back (its offset file), then set it right
	HQKill                     // SIGKILL HQ's serve, hold it down, then start it again (the uploader waits)
	numFaults
)

var faultNames = [...]string{"redis-kill", "redis-freeze", "drop-sku", "drop-counters", "drop-store-keys",
	"flushall", "broker-restart", "till-cut", "store-kill", "agent-kill", "clock-step", "hq-kill"}

func (f Fault) String() string {
	if f < 0 || f >= numFaults {
		return fmt.Sprintf("Fault(%d)", int(f))
	}
	return faultNames[f]
}

// Step is one fault of a schedule: the calm before it, the fault, how long it is held
// before it heals, which terminal or SKU it aims at (an index into the cluster's), and, for
// a clock step, by how much.
type Step struct {
	Calm   time.Duration
	Fault  Fault
	Hold   time.Duration
	Target int
	Clock  time.Duration
}

func (s Step) String() string {
	if s.Fault == ClockStep {
		return fmt.Sprintf("%s %s (target %d) held %v after %v calm", s.Fault, clock.FormatOffset(s.Clock), s.Target, s.Hold, s.Calm)
	}
	return fmt.Sprintf("%s (target %d) held %v after %v calm", s.Fault, s.Target, s.Hold, s.Calm)
}

// Schedule draws the steps of a seed, one at a time: the same seed gives the same steps in
// the same order, however long the run.
type Schedule struct {
	Seed uint64
	rng  *rand.Rand
}

// NewSchedule returns the schedule of seed.
func NewSchedule(seed uint64) *Schedule {
	return &Schedule{Seed: seed, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

// Next draws the next step.
func (s *Schedule) Next() Step {
	st := Step{
		Calm:   time.Duration(500+s.rng.IntN(2500)) * time.Millisecond,
		Fault:  Fault(s.rng.IntN(int(numFaults))),
		Hold:   time.Duration(300+s.rng.IntN(3700)) * time.Millisecond,
		Target: s.rng.IntN(1 << 16),
		Clock:  drawClockStep(s.rng),
	}
	return st
}

// Cluster is what the nemesis acts on: one store on a Redis Sentinel trio and mosquitto,
// and its tills, one of them (CutTerminal) behind a proxy.
type Cluster struct {
	Stack       *stack.Stack
	Store       *e2e.StoreServer
	StoreID     string
	TZ          string
	Agents      map[string]*e2e.Agent
	Terminals   []string // sorted
	SKUs        []string // sorted
	Proxy       *e2e.Proxy
	CutTerminal string
	// ClockFiles are the tills' clock offset files (--clock-offset-file), by terminal.
	ClockFiles map[string]string
	// Cashiers sell at the tills, by terminal (a clock step sells through them too).
	Cashiers map[string]*e2e.Cashier
	// HQ is hq-sync serve, and Uploader the store's hq-sync upload sending it the ledger:
	// killed with the store-server (StoreKill), as on the store's machine.
	HQ       *e2e.Serve
	Uploader *e2e.Uploader

	// dates are the business dates a till's stepped clock gave its sales (Dates).
	dates []string

	mu           sync.Mutex
	lastFailover time.Time
}

// Inject applies a step's fault, holds it, and heals it. What it did is returned as text
// for the run's log.
func (c *Cluster) Inject(ctx context.Context, st Step) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch st.Fault {
	case RedisKill, RedisFreeze:
		return c.redisMaster(ctx, st)
	case DropSKU, DropCounters, DropStoreKeys, FlushAll:
		return c.dropKeys(ctx, st)
	case BrokerRestart:
		if err := c.Stack.Mosquitto.Kill(); err != nil {
			return "", err
		}
		sleep(ctx, st.Hold)
		return "mosquitto killed and started", c.Stack.Mosquitto.Start(ctx)
	case TillCut:
		c.Proxy.Cut()
		sleep(ctx, st.Hold)
		c.Proxy.Restore()
		return "till " + c.CutTerminal + " cut off and back", nil
	case StoreKill:
		if err := c.Store.Kill(); err != nil {
			return "", err
		}
		if err := c.Uploader.Kill(); err != nil {
			return "", err
		}
		if err := c.Store.Restart(ctx); err != nil {
			return "", err
		}
		return "store-server and uploader killed and started", c.Uploader.Restart(ctx)
	case AgentKill:
		t := c.Terminals[st.Target%len(c.Terminals)]
		a := c.Agents[t]
		if err := a.Kill(); err != nil {
			return "", err
		}
		sleep(ctx, st.Hold/4)
		return "agent " + t + " killed and started", a.Restart(ctx)
	case ClockStep:
		return c.clockStep(ctx, st)
	case HQKill:
		if err := c.HQ.Kill(); err != nil {
			return "", err
		}
		sleep(ctx, st.Hold)
		return "HQ's serve killed and started", c.HQ.Restart(ctx)
	}
	return "", fmt.Errorf("unknown fault %v", st.Fault)
}

// sentinelRest is how long after a failover Sentinel declines another of the same master
// (twice its failover-timeout, 5 s in internal/stack), with a margin.
const sentinelRest = 12 * time.Second

// settleRedis waits, while the load goes on, until Sentinel would fail over again and the
// master has every other node as an online replica: a fault of the Redis master is one of
// a healthy trio, not of one still healing from the last.
func (c *Cluster) settleRedis(ctx context.Context) string {
	sleep(ctx, time.Until(c.lastFailover.Add(sentinelRest)))
	deadline := time.Now().Add(60 * time.Second)
	for {
		master, err := c.Stack.MasterAddr(ctx)
		if err == nil {
			rdb := redis.NewClient(&redis.Options{Addr: master})
			info, ierr := rdb.Info(ctx, "replication").Result()
			rdb.Close()
			if ierr == nil && strings.Count(info, "state=online") == len(c.Stack.Redis)-1 {
				return ""
			}
		}
		if time.Now().After(deadline) {
			return " (replicas not all online after 60s)"
		}
		sleep(ctx, 200*time.Millisecond)
	}
}

// redisMaster kills or freezes the current master and waits for Sentinel's failover; the
// old master is started again (or continued) and rejoins as a replica. A failover that
// does not come is an outcome, not a failure of the run: the store sells on the ledger
// alone until the node is back.
func (c *Cluster) redisMaster(ctx context.Context, st Step) (string, error) {
	note := c.settleRedis(ctx)
	master, err := c.Stack.MasterAddr(ctx)
	if err != nil {
		return "", err
	}
	var p *stack.Proc
	for _, r := range c.Stack.Redis {
		if r.Addr() == master {
			p = r
		}
	}
	if p == nil {
		return "", fmt.Errorf("master %s is no redis of the stack", master)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if st.Fault == RedisKill {
		if err := p.Kill(); err != nil {
			return "", err
		}
		to, err := c.Stack.WaitFailover(wctx, master)
		c.lastFailover = time.Now()
		if err != nil {
			return fmt.Sprintf("redis master %s killed, no failover (%v)%s, started again", master, err, note), p.Start(ctx)
		}
		sleep(ctx, st.Hold)
		return fmt.Sprintf("redis master %s killed, failed over to %s%s, started again", master, to, note), p.Start(ctx)
	}
	// Frozen until Sentinel has failed over, and a while more: then it returns, still
	// believing itself the master, until Sentinel turns it into a replica.
	pid := p.Pid()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return "", err
	}
	frozen := time.Now()
	to, err := c.Stack.WaitFailover(wctx, master)
	c.lastFailover = time.Now()
	sleep(ctx, st.Hold)
	if cerr := syscall.Kill(pid, syscall.SIGCONT); cerr != nil {
		return "", cerr
	}
	if err != nil {
		to = fmt.Sprintf("no failover (%v)", err)
	}
	return fmt.Sprintf("redis master %s frozen %v, failed over to %s%s, continued", master,
		time.Since(frozen).Round(time.Millisecond), to, note), nil
}

// dropKeys drops projection keys from the master while it stays up.
func (c *Cluster) dropKeys(ctx context.Context, st Step) (string, error) {
	master, err := c.Stack.MasterAddr(ctx)
	if err != nil {
		return "", err
	}
	rdb := redis.NewClient(&redis.Options{Addr: master})
	defer rdb.Close()
	prefix := "pg:{" + c.StoreID + "}:"
	switch st.Fault {
	case DropSKU:
		sku := c.SKUs[st.Target%len(c.SKUs)]
		return "stock field " + sku + " dropped", rdb.HDel(ctx, prefix+"stock", sku).Err()
	case DropCounters:
		t := c.Terminals[st.Target%len(c.Terminals)]
		key := prefix + "cnt:" + Today(c.TZ) + ":" + t
		return "counter hash " + key + " dropped", rdb.Del(ctx, key).Err()
	case DropStoreKeys:
		var keys []string
		iter := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		if err := iter.Err(); err != nil {
			return "", err
		}
		if len(keys) > 0 {
			if err := rdb.Del(ctx, keys...).Err(); err != nil {
				return "", err
			}
		}
		return fmt.Sprintf("%d keys of store %s dropped", len(keys), c.StoreID), nil
	}
	return "FLUSHALL on " + master, rdb.FlushAll(ctx).Err()
}

// Today returns the business date now in the zone tz.
func Today(tz string) string {
	loc, err := wire.LoadLocation(tz)
	if err != nil {
		loc = time.UTC
	}
	return time.Now().In(loc).Format("2006-01-02")
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// joinLines indents a multi-line report for a log.
func joinLines(s string) string { return "\t" + strings.ReplaceAll(strings.TrimSpace(s), "\n", "\n\t") }
