package gate

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/store"
	"pgregory.net/rapid"
)

// TestExecGroupEqualsOneByOne: a group of ops decided in one script call gets the verdicts,
// stock, counters and flow numbers it would get op by op (the script's shared reads: the
// limits, the time and each window's count, must not change any decision). Limits are
// tight, so that groups cross every layer's edge, and stock is short, so that live sales
// are refused and offline ones oversell. The retry-after may differ by the time that passes
// between the one-by-one calls, and so may which of several full layers is named.
func TestExecGroupEqualsOneByOne(t *testing.T) {
	rdb := RunRedis(t)
	ctx := context.Background()
	rapid.Check(t, func(rt *rapid.T) {
		limits := store.Limits{WindowMs: 60_000, Store: rapid.Int64Range(1, 12).Draw(rt, "store"),
			Terminal: rapid.Int64Range(1, 6).Draw(rt, "terminal"), Scan: rapid.Int64Range(1, 4).Draw(rt, "scan"),
			Pay: rapid.Int64Range(1, 4).Draw(rt, "pay"), Refund: rapid.Int64Range(1, 3).Draw(rt, "refund")}
		stock := map[string]int64{"A": rapid.Int64Range(0, 5).Draw(rt, "stockA"), "B": rapid.Int64Range(0, 5).Draw(rt, "stockB")}
		seqs := map[string]int64{}
		ops := rapid.SliceOfN(rapid.Custom(func(rt *rapid.T) Op {
			term := rapid.SampledFrom([]string{"T1", "T2", "T3"}).Draw(rt, "term")
			var seq int64
			if seqs[term] > 0 && rapid.IntRange(0, 9).Draw(rt, "resend") == 0 {
				seq = rapid.Int64Range(1, seqs[term]).Draw(rt, "old") // a resend: duplicate or conflict
			} else {
				seqs[term]++
				seq = seqs[term]
			}
			live := rapid.Bool().Draw(rt, "live")
			sku := rapid.SampledFrom([]string{"A", "B"}).Draw(rt, "sku")
			qty := rapid.Int64Range(1, 3).Draw(rt, "qty")
			var op Op
			switch rapid.IntRange(0, 2).Draw(rt, "kind") {
			case 0:
				op = scan(term, seq, live, sku, qty)
			case 1:
				op = sale(term, seq, live, money.Fen(100*qty), line(sku, qty), line("B", 1))
			default:
				op = refund(term, seq, live, 100, wire.MethodCard, rapid.Bool().Draw(rt, "restock"), line(sku, qty))
			}
			if rapid.IntRange(0, 4).Draw(rt, "other-content") == 0 {
				op.Hash += "x"
			}
			return op
		}), 1, 40).Draw(rt, "ops")

		setup := func() *Gate {
			g := newGate(rdb)
			if err := g.SetLimits(ctx, limits); err != nil {
				rt.Fatal(err)
			}
			if err := g.Rebuild(ctx, store.Snapshot{Stock: stock}); err != nil {
				rt.Fatal(err)
			}
			return g
		}
		group, single := setup(), setup()
		got, err := group.Exec(ctx, ops)
		if err != nil || len(got) != len(ops) {
			rt.Fatalf("Exec: %d verdicts, %v", len(got), err)
		}
		for i, op := range ops {
			one, err := single.Exec(ctx, []Op{op})
			if err != nil {
				rt.Fatal(err)
			}
			want, g := one[0], got[i]
			if d := want.RetryAfter - g.RetryAfter; d > time.Second || d < -time.Second {
				rt.Errorf("op %d %s %s:%d: retry after %v in a group, %v alone", i, op.Kind, op.Terminal, op.Seq, g.RetryAfter, want.RetryAfter)
			}
			g.RetryAfter, want.RetryAfter, g.Message, want.Message = 0, 0, "", ""
			if g.Status == wire.AckRateLimited && want.Status == wire.AckRateLimited {
				// When several layers are full, the one named is the one that frees up
				// last; in a group their entries can share one time, and then any is right.
				g.Layer, want.Layer = "", ""
			}
			if g != want {
				rt.Fatalf("op %d %s %s:%d live=%v: in a group %+v, alone %+v", i, op.Kind, op.Terminal, op.Seq, op.Live, g, want)
			}
		}
		for what, get := range map[string]func(*Gate) (any, error){
			"stock":    func(g *Gate) (any, error) { return g.Stock(ctx) },
			"flow":     func(g *Gate) (any, error) { return g.Flow(ctx, day1) },
			"counters": func(g *Gate) (any, error) { return g.Counters(ctx, day1) },
		} {
			a, err1 := get(group)
			b, err2 := get(single)
			if err1 != nil || err2 != nil || fmt.Sprint(a) != fmt.Sprint(b) {
				rt.Fatalf("%s: group %v (%v), one by one %v (%v)", what, a, err1, b, err2)
			}
		}
	})
}

// TestExecChunks runs more ops than one script call takes: flow numbers follow the ops.
func TestExecChunks(t *testing.T) {
	g := newGate(RunRedis(t))
	n := 2*execChunk + 7
	ops := make([]Op, n)
	for i := range ops {
		ops[i] = sale(fmt.Sprintf("T%d", i%3), int64(i/3+1), false, 100, line("A", 1))
	}
	for i, v := range MustExec(t, g, ops...) {
		if v.Status != wire.AckAccepted || v.FlowNo != int64(i+1) || !v.Oversold {
			t.Fatalf("op %d: %+v", i, v)
		}
	}
	wantStock(t, g, map[string]int64{"A": -int64(n)})
}
