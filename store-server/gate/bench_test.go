package gate

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/stack"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/store"
	"github.com/redis/go-redis/v9"
)

// benchParallelism × GOMAXPROCS goroutines share one pooled client, so that round trips
// overlap as they do under many terminals.
const benchParallelism = 16

// benchGate starts a redis and returns a gate with every live limit at MaxLimit (so that
// every call takes the full path and none is refused) and plenty of stock.
func benchGate(b *testing.B) (*Gate, *redis.Client, *stack.Stack) {
	b.Helper()
	s := stack.Run(b, stack.Options{Redis: true, Logf: func(string, ...any) {}})
	rdb := redis.NewClient(&redis.Options{Addr: s.Redis[0].Addr(), PoolSize: 128})
	b.Cleanup(func() { _ = rdb.Close() })
	g := New(rdb, "BENCH", Options{})
	if err := g.SetLimits(context.Background(), store.Limits{WindowMs: 1000, Store: MaxLimit,
		Terminal: MaxLimit, Scan: MaxLimit, Pay: MaxLimit, Refund: MaxLimit}); err != nil {
		b.Fatal(err)
	}
	MustStock(b, g, map[string]int64{"A": 1 << 50, "B": 1 << 50, "C": 1 << 50})
	return g, rdb, s
}

// benchSale is a live sale of three lines paid by card and cash.
func benchSale(term string, seq int64) Op {
	op := sale(term, seq, true, 1234, line("A", 1), line("B", 2), line("C", 1))
	op.ByMethod = map[string]money.Fen{wire.MethodCash: 234, wire.MethodCard: 1000}
	return op
}

// BenchmarkSale measures one live sale (three lines) per Exec: limits in three layers,
// stock of every line, counters, flow number, idempotency record; one round trip each.
func BenchmarkSale(b *testing.B) {
	g, _, _ := benchGate(b)
	var term atomic.Int64
	ctx := context.Background()
	b.SetParallelism(benchParallelism)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		t := fmt.Sprintf("T%d", term.Add(1))
		var seq int64
		for pb.Next() {
			seq++
			v, err := g.Exec(ctx, []Op{benchSale(t, seq)})
			if err != nil || v[0].Status != wire.AckAccepted {
				b.Errorf("sale: %+v, %v", v, err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "sales/s")
}

// BenchmarkExecBatch100 measures a backlog drain: 100 offline sales of one terminal per
// Exec, one script call.
func BenchmarkExecBatch100(b *testing.B) {
	g, _, _ := benchGate(b)
	var term atomic.Int64
	ctx := context.Background()
	b.SetParallelism(4)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		t := fmt.Sprintf("T%d", term.Add(1))
		var seq int64
		ops := make([]Op, 100)
		for pb.Next() {
			for i := range ops {
				seq++
				ops[i] = benchSale(t, seq)
				ops[i].Live = false
			}
			if _, err := g.Exec(ctx, ops); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N*100)/b.Elapsed().Seconds(), "sales/s")
}

// BenchmarkLimiter3Layers measures Allow: store, terminal and action windows checked and
// recorded all-or-nothing in one script call, one round trip.
func BenchmarkLimiter3Layers(b *testing.B) {
	g, _, _ := benchGate(b)
	var term atomic.Int64
	ctx := context.Background()
	b.SetParallelism(benchParallelism)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		t := fmt.Sprintf("T%d", term.Add(1))
		for pb.Next() {
			v, err := g.Allow(ctx, t, store.ActionPay, 1)
			if err != nil || v.Status != wire.AckAccepted {
				b.Errorf("allow: %+v, %v", v, err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "checks/s")
}

// BenchmarkRedisRate3Calls is the same three-layer check done with go-redis/redis_rate
// (GCRA), one Allow per layer: three round trips, and not all-or-nothing (a refusal by the
// third layer leaves the first two charged).
func BenchmarkRedisRate3Calls(b *testing.B) {
	_, rdb, _ := benchGate(b)
	lim := redis_rate.NewLimiter(rdb)
	limit := redis_rate.PerSecond(MaxLimit)
	var term atomic.Int64
	ctx := context.Background()
	b.SetParallelism(benchParallelism)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		t := fmt.Sprintf("T%d", term.Add(1))
		keys := []string{"{BENCH}:store", "{BENCH}:t:" + t, "{BENCH}:a:" + t + ":pay"}
		for pb.Next() {
			for _, k := range keys {
				res, err := lim.Allow(ctx, k, limit)
				if err != nil || res.Allowed != 1 {
					b.Errorf("redis_rate: %+v, %v", res, err)
					return
				}
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "checks/s")
}

// redisBenchmark is where Debian's redis-tools (a dependency of redis-server) puts it.
const redisBenchmark = "/usr/bin/redis-benchmark"

// BenchmarkRedisBenchmarkSale runs redis-benchmark (the C client, 50 connections, no Go in
// the loop) on EVALSHA of the gate's script (lua/exec.lua) with the exact KEYS and ARGV of
// one live three-line sale, each request with a fresh idempotency key (__rand_int__), and reports
// its requests per second: the server-side ceiling of the sale script on this machine.
// It runs once, whatever b.N.
func BenchmarkRedisBenchmarkSale(b *testing.B) {
	if _, err := os.Stat(redisBenchmark); err != nil {
		b.Fatalf("%s is missing: apt-get install -y redis-tools", redisBenchmark)
	}
	g, rdb, s := benchGate(b)
	ctx := context.Background()
	if err := execScript.Load(ctx, rdb).Err(); err != nil {
		b.Fatal(err)
	}
	keys, cargs := g.execCall([]Op{benchSale("T1", 1)})
	keys[6] = strings.TrimSuffix(keys[6], ":1") + ":__rand_int__" // the sale's idempotency key
	args := []string{"-p", strconv.Itoa(s.Redis[0].Port), "-n", "100000", "-c", "50", "-r", "1000000000", "-q",
		"EVALSHA", execScript.Hash(), strconv.Itoa(len(keys))}
	args = append(args, keys...)
	for _, a := range cargs {
		args = append(args, fmt.Sprint(a))
	}
	b.Logf("%s %s", redisBenchmark, strings.Join(args, " "))
	b.ResetTimer()
	out, err := exec.Command(redisBenchmark, args...).CombinedOutput()
	b.StopTimer()
	if err != nil {
		b.Fatalf("redis-benchmark: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`([0-9.]+) requests per second`).FindAllSubmatch(out, -1)
	if len(m) == 0 {
		b.Fatalf("redis-benchmark said:\n%s", out)
	}
	rps, _ := strconv.ParseFloat(string(m[len(m)-1][1]), 64)
	b.Logf("redis-benchmark: %s requests per second", m[len(m)-1][1])
	// Every request must have been a sale, not an error or a duplicate.
	if n, err := g.Flow(ctx, day1); err != nil || n < 90_000 {
		b.Fatalf("flow after 100000 sales = %d, %v", n, err)
	}
	b.ReportMetric(rps, "sales/s")
}

// redisCPU returns the CPU time the Redis server has used (INFO cpu: user + system).
func redisCPU(b *testing.B, rdb *redis.Client) time.Duration {
	info, err := rdb.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var total float64
	for _, line := range strings.Split(info, "\r\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok && (k == "used_cpu_user" || k == "used_cpu_sys") {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatal(err)
			}
			total += f
		}
	}
	return time.Duration(total * float64(time.Second))
}

// BenchmarkExecGroup measures what the store's ingest sends for a group of events: 100
// sales of 20 terminals (three lines each) in one pipelined Exec, live (limits, stock check)
// or offline, and 20 live sales (the store's groups at 5,000 live sales/s are about that). ns/op is per group; redis-µs/sale is the Redis server's own CPU time per
// sale (INFO cpu), the cost that competes with the store-server for the machine's cores.
func BenchmarkExecGroup(b *testing.B) {
	for _, c := range []struct {
		live  bool
		group int
	}{{true, 100}, {false, 100}, {true, 20}} {
		b.Run(fmt.Sprintf("live=%v/group=%d", c.live, c.group), func(b *testing.B) {
			live := c.live
			g, rdb, _ := benchGate(b)
			ctx := context.Background()
			seq := map[string]int64{}
			ops := make([]Op, c.group)
			cpu0 := redisCPU(b, rdb)
			for b.Loop() {
				for i := range ops {
					t := fmt.Sprintf("T%d", i%20)
					seq[t]++
					ops[i] = benchSale(t, seq[t])
					ops[i].Live = live
				}
				v, err := g.Exec(ctx, ops)
				if err != nil {
					b.Fatal(err)
				}
				for _, x := range v {
					if x.Status != wire.AckAccepted {
						b.Fatalf("sale: %+v", x)
					}
				}
			}
			sales := float64(b.N * len(ops))
			b.ReportMetric(float64((redisCPU(b, rdb)-cpu0).Microseconds())/sales, "redis-µs/sale")
			b.ReportMetric(sales/b.Elapsed().Seconds(), "sales/s")
		})
	}
}
