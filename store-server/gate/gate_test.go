package gate

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/perr"
	"github.com/posgate/posgate/internal/stack"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/client"
	"github.com/posgate/posgate/store-server/store"
	"github.com/redis/go-redis/v9"
)

const day1, day2 = "2025-03-01", "2025-03-02"

// RunRedis starts a real redis-server for the test and returns a client of it.
func RunRedis(tb testing.TB) *redis.Client {
	tb.Helper()
	s := stack.Run(tb, stack.Options{Redis: true})
	rdb := redis.NewClient(&redis.Options{Addr: s.Redis[0].Addr()})
	tb.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

var storeN atomic.Int64

// newGate returns a gate of a store id used by no other test, so that subtests can share
// one redis, rebuilt from an empty ledger: the scripts refuse a projection no rebuild wrote.
func newGate(rdb Client) *Gate {
	g := New(rdb, fmt.Sprintf("S%d", storeN.Add(1)), Options{})
	if err := g.Rebuild(context.Background(), store.Snapshot{}); err != nil {
		panic(fmt.Sprintf("rebuild of a new gate: %v", err))
	}
	return g
}

func ctxT(tb testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	tb.Cleanup(cancel)
	return ctx
}

// MustExec runs ops and fails the test on an error.
func MustExec(tb testing.TB, g *Gate, ops ...Op) []Verdict {
	tb.Helper()
	v, err := g.Exec(ctxT(tb), ops)
	if err != nil {
		tb.Fatalf("Exec: %v", err)
	}
	if len(v) != len(ops) {
		tb.Fatalf("Exec returned %d verdicts for %d ops", len(v), len(ops))
	}
	return v
}

// MustOne runs one op.
func MustOne(tb testing.TB, g *Gate, op Op) Verdict {
	tb.Helper()
	return MustExec(tb, g, op)[0]
}

// MustAllow calls Allow and fails the test on an error.
func MustAllow(tb testing.TB, g *Gate, terminal, action string, n int64) Verdict {
	tb.Helper()
	v, err := g.Allow(ctxT(tb), terminal, action, n)
	if err != nil {
		tb.Fatalf("Allow: %v", err)
	}
	return v
}

// MustStock sets the stock of a store (through Rebuild) and fails the test on an error.
func MustStock(tb testing.TB, g *Gate, stock map[string]int64) {
	tb.Helper()
	if err := g.Rebuild(ctxT(tb), store.Snapshot{Stock: stock}); err != nil {
		tb.Fatalf("Rebuild: %v", err)
	}
}

func MustSetLimits(tb testing.TB, g *Gate, l store.Limits) {
	tb.Helper()
	if err := g.SetLimits(ctxT(tb), l); err != nil {
		tb.Fatalf("SetLimits: %v", err)
	}
}

func wantStock(tb testing.TB, g *Gate, want map[string]int64) {
	tb.Helper()
	got, err := g.Stock(ctxT(tb))
	if err != nil {
		tb.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		tb.Errorf("stock = %v, want %v", got, want)
	}
}

func line(sku string, qty int64) store.Line { return store.Line{SKU: sku, Qty: qty} }

// sale builds a sale op paid in cash; hash defaults to one derived from the seq.
func sale(term string, seq int64, live bool, total money.Fen, lines ...store.Line) Op {
	return Op{Kind: OpSale, Terminal: term, Seq: seq, Hash: fmt.Sprintf("h%d", seq), Live: live,
		BusinessDate: day1, Lines: lines, Total: total, ByMethod: map[string]money.Fen{wire.MethodCash: total}}
}

func scan(term string, seq int64, live bool, sku string, qty int64) Op {
	return Op{Kind: OpScan, Terminal: term, Seq: seq, Hash: fmt.Sprintf("h%d", seq), Live: live, Lines: []store.Line{line(sku, qty)}}
}

func refund(term string, seq int64, live bool, amount money.Fen, method string, restock bool, lines ...store.Line) Op {
	return Op{Kind: OpRefund, Terminal: term, Seq: seq, Hash: fmt.Sprintf("h%d", seq), Live: live, BusinessDate: day1,
		Lines: lines, Total: amount, ByMethod: map[string]money.Fen{method: amount}, Restock: restock}
}

func wantStatus(tb testing.TB, what string, v Verdict, status wire.AckStatus, code string) {
	tb.Helper()
	if v.Status != status || v.Code != code {
		tb.Fatalf("%s: verdict %+v, want status %s code %q", what, v, status, code)
	}
}

// TestLimiterWindow checks each layer's window edges: exactly the limit is allowed, one
// more is refused by that layer with a retry-after within (0, window], and allowed again
// once the window slid past the oldest entry.
func TestLimiterWindow(t *testing.T) {
	rdb := RunRedis(t)
	const win = 500
	for _, tc := range []struct {
		name   string
		limits store.Limits
		layer  string
		limit  int64
	}{
		{"store", store.Limits{WindowMs: win, Store: 3, Terminal: 100, Pay: 100}, "store", 3},
		{"terminal", store.Limits{WindowMs: win, Store: 100, Terminal: 3, Pay: 100}, "terminal", 3},
		{"action", store.Limits{WindowMs: win, Store: 100, Terminal: 100, Pay: 3}, store.ActionPay, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := newGate(rdb)
			MustSetLimits(t, g, tc.limits)
			for i := int64(1); i <= tc.limit; i++ {
				v := MustAllow(t, g, "T1", store.ActionPay, 1)
				wantStatus(t, fmt.Sprintf("call %d", i), v, wire.AckAccepted, "")
				layerRem := map[string]int{"store": 0, "terminal": 1, store.ActionPay: 2}[tc.layer]
				if v.Remaining[layerRem] != tc.limit-i {
					t.Errorf("call %d: remaining %v, want %d in the %s layer", i, v.Remaining, tc.limit-i, tc.layer)
				}
			}
			v := MustAllow(t, g, "T1", store.ActionPay, 1)
			wantStatus(t, "limit+1", v, wire.AckRateLimited, CodeRateLimited)
			if v.Layer != tc.layer {
				t.Errorf("layer %q, want %q", v.Layer, tc.layer)
			}
			if v.RetryAfter <= 0 || v.RetryAfter > win*time.Millisecond || v.RetryAfter%time.Millisecond != 0 {
				t.Errorf("retry after %v, want whole ms in (0, %dms]", v.RetryAfter, win)
			}
			if !strings.Contains(v.Message, tc.layer+" limit reached (3 per 500ms)") {
				t.Errorf("message %q", v.Message)
			}
			time.Sleep(v.RetryAfter)
			wantStatus(t, "after retry-after", MustAllow(t, g, "T1", store.ActionPay, 1), wire.AckAccepted, "")
			time.Sleep(win * time.Millisecond)
			for i := range tc.limit {
				wantStatus(t, fmt.Sprintf("next window %d", i), MustAllow(t, g, "T1", store.ActionPay, 1), wire.AckAccepted, "")
			}
		})
	}
}

// TestLimiterAllOrNothing checks that a refusal in one layer records nothing in the others.
func TestLimiterAllOrNothing(t *testing.T) {
	rdb := RunRedis(t)
	ctx := ctxT(t)
	t.Run("terminal-refuses", func(t *testing.T) {
		g := newGate(rdb)
		MustSetLimits(t, g, store.Limits{WindowMs: 60_000, Store: 10, Terminal: 2, Pay: 10})
		MustAllow(t, g, "T1", store.ActionPay, 2)
		for range 5 {
			v := MustAllow(t, g, "T1", store.ActionPay, 1)
			wantStatus(t, "T1", v, wire.AckRateLimited, CodeRateLimited)
			if v.Layer != "terminal" || v.Remaining != [3]int64{8, 0, 8} {
				t.Fatalf("verdict %+v, want terminal layer, remaining [8 0 8]", v)
			}
		}
		if n := rdb.ZCard(ctx, g.k.rlStore()).Val(); n != 2 {
			t.Errorf("store window holds %d entries, want 2: refusals must record nothing", n)
		}
		if n := rdb.ZCard(ctx, g.k.rlAction("T1", store.ActionPay)).Val(); n != 2 {
			t.Errorf("action window holds %d entries, want 2", n)
		}
		v := MustAllow(t, g, "T2", store.ActionPay, 2)
		if v.Status != wire.AckAccepted || v.Remaining != [3]int64{6, 0, 8} {
			t.Errorf("T2: %+v, want accepted with remaining [6 0 8]", v)
		}
	})
	t.Run("n-over-store", func(t *testing.T) {
		g := newGate(rdb)
		MustSetLimits(t, g, store.Limits{WindowMs: 60_000, Store: 5, Terminal: 100, Scan: 100})
		MustAllow(t, g, "T1", store.ActionScan, 3)
		v := MustAllow(t, g, "T1", store.ActionScan, 3)
		if v.Status != wire.AckRateLimited || v.Layer != "store" {
			t.Fatalf("3 more of 5 after 3: %+v", v)
		}
		for _, k := range []string{g.k.rlStore(), g.k.rlTerminal("T1"), g.k.rlAction("T1", store.ActionScan)} {
			if n := rdb.ZCard(ctx, k).Val(); n != 3 {
				t.Errorf("%s holds %d, want 3", k, n)
			}
		}
		wantStatus(t, "2 more", MustAllow(t, g, "T1", store.ActionScan, 2), wire.AckAccepted, "")
		v = MustAllow(t, g, "T1", store.ActionScan, 6) // more than the limit: never
		if v.Status != wire.AckRateLimited || v.RetryAfter != 60*time.Second {
			t.Errorf("n over the limit: %+v, want rate limited for the window", v)
		}
	})
	t.Run("longest-wait-wins", func(t *testing.T) {
		g := newGate(rdb)
		MustSetLimits(t, g, store.Limits{WindowMs: 60_000, Store: 2, Terminal: 100, Refund: 1})
		MustAllow(t, g, "T2", store.ActionRefund, 1)
		time.Sleep(50 * time.Millisecond)
		MustAllow(t, g, "T1", store.ActionRefund, 1)
		v := MustAllow(t, g, "T1", store.ActionRefund, 1)
		// Both the store layer (room once T2's entry leaves) and T1's refund layer (room
		// once T1's entry leaves, 50ms later) refuse: the verdict names the one that frees
		// last, so that retrying after RetryAfter can succeed.
		if v.Layer != store.ActionRefund || v.RetryAfter <= 59_950*time.Millisecond {
			t.Errorf("verdict %+v, want the refund layer and a wait of about 60s", v)
		}
	})
}

// TestPromo checks that the promo coefficient scales every layer with integer math and
// ends by itself.
func TestPromo(t *testing.T) {
	rdb := RunRedis(t)
	ctx := ctxT(t)
	for _, tc := range []struct {
		name    string
		percent int64
		limit   int64
		want    int64
	}{
		{"double", 200, 3, 6},
		{"one-and-a-half-rounds-down", 150, 3, 4},
		{"halve", 50, 3, 1},
		{"none", 100, 3, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := newGate(rdb)
			MustSetLimits(t, g, store.Limits{WindowMs: 60_000, Store: 100, Terminal: 100, Scan: tc.limit})
			if err := g.SetPromo(ctx, tc.percent, time.Hour); err != nil {
				t.Fatal(err)
			}
			p, ttl, err := g.Promo(ctx)
			if err != nil || p != tc.percent || (tc.percent != 100 && (ttl <= 59*time.Minute || ttl > time.Hour)) {
				t.Fatalf("Promo = %d, %v, %v", p, ttl, err)
			}
			MustStock(t, g, map[string]int64{"A": 1})
			for i := range tc.want {
				wantStatus(t, fmt.Sprint(i), MustOne(t, g, scan("T2", i+1, true, "A", 1)), wire.AckAccepted, "")
			}
			v := MustOne(t, g, scan("T2", 99, true, "A", 1))
			if v.Status != wire.AckRateLimited || v.Layer != store.ActionScan || !strings.Contains(v.Message, fmt.Sprintf("(%d per", tc.want)) {
				t.Errorf("over the promo limit: %+v", v)
			}
		})
	}
	t.Run("expires-by-itself", func(t *testing.T) {
		t.Parallel()
		g := newGate(rdb)
		MustStock(t, g, map[string]int64{"A": 100})
		MustSetLimits(t, g, store.Limits{WindowMs: 400, Store: 100, Terminal: 100, Scan: 2})
		if err := g.SetPromo(ctx, 200, 300*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		for i := range int64(4) {
			wantStatus(t, "in promo", MustOne(t, g, scan("T1", i+1, true, "A", 1)), wire.AckAccepted, "")
		}
		time.Sleep(450 * time.Millisecond) // the promo has expired and the window is empty
		if p, ttl, err := g.Promo(ctx); err != nil || p != 100 || ttl != 0 {
			t.Fatalf("after expiry Promo = %d, %v, %v; want 100, 0", p, ttl, err)
		}
		for i := range int64(2) {
			wantStatus(t, "after promo", MustOne(t, g, scan("T1", 10+i, true, "A", 1)), wire.AckAccepted, "")
		}
		wantStatus(t, "after promo, limit+1", MustOne(t, g, scan("T1", 20, true, "A", 1)), wire.AckRateLimited, CodeRateLimited)
	})
	t.Run("end-with-100", func(t *testing.T) {
		g := newGate(rdb)
		if err := g.SetPromo(ctx, 300, 0); err != nil {
			t.Fatal(err)
		}
		if p, ttl, _ := g.Promo(ctx); p != 300 || ttl <= time.Hour || ttl > DefaultPromoTTL {
			t.Fatalf("default promo TTL: %d, %v", p, ttl)
		}
		if err := g.SetPromo(ctx, 100, 0); err != nil {
			t.Fatal(err)
		}
		if p, ttl, _ := g.Promo(ctx); p != 100 || ttl != 0 {
			t.Fatalf("after SetPromo(100): %d, %v", p, ttl)
		}
	})
	t.Run("invalid", func(t *testing.T) {
		g := newGate(rdb)
		for _, p := range []int64{0, -5, MaxPromo + 1} {
			if err := g.SetPromo(ctx, p, time.Hour); perr.KindOf(err) != perr.Invalid {
				t.Errorf("SetPromo(%d) = %v, want invalid", p, err)
			}
		}
	})
}

// TestLimits checks defaults, overrides and a zero field falling back to the default.
func TestLimits(t *testing.T) {
	rdb := RunRedis(t)
	ctx := ctxT(t)
	g := newGate(rdb)
	if l, err := g.Limits(ctx); err != nil || l != store.DefaultLimits {
		t.Fatalf("Limits() = %+v, %v; want the defaults", l, err)
	}
	set := store.Limits{WindowMs: 500, Store: 7, Pay: 2}
	MustSetLimits(t, g, set)
	want := store.DefaultLimits
	want.WindowMs, want.Store, want.Pay = 500, 7, 2
	if l, _ := g.Limits(ctx); l != want {
		t.Fatalf("Limits() = %+v, want %+v", l, want)
	}
	MustSetLimits(t, g, store.Limits{Scan: 9})
	want = store.DefaultLimits
	want.Scan = 9
	if l, _ := g.Limits(ctx); l != want {
		t.Fatalf("Limits() = %+v, want %+v", l, want)
	}
	for _, bad := range []store.Limits{{Store: -1}, {WindowMs: MaxWindowMs + 1}, {Pay: MaxLimit + 1}} {
		if err := g.SetLimits(ctx, bad); perr.KindOf(err) != perr.Invalid {
			t.Errorf("SetLimits(%+v) = %v, want invalid", bad, err)
		}
	}
}

// TestOfflineNeverLimited checks that offline ops pass whatever the limits and stock.
func TestOfflineNeverLimited(t *testing.T) {
	rdb := RunRedis(t)
	g := newGate(rdb)
	MustSetLimits(t, g, store.Limits{WindowMs: 60_000, Store: 1, Terminal: 1, Scan: 1, Pay: 1, Refund: 1})
	MustStock(t, g, map[string]int64{"A": 100})
	wantStatus(t, "live", MustOne(t, g, sale("T1", 1, true, 100, line("A", 1))), wire.AckAccepted, "")
	wantStatus(t, "live", MustOne(t, g, sale("T1", 2, true, 100, line("A", 1))), wire.AckRateLimited, CodeRateLimited)
	var ops []Op
	for i := int64(10); i < 30; i++ {
		ops = append(ops, sale("T1", i, false, 100, line("A", 1)), scan("T1", 100+i, false, "NOPE", 5),
			refund("T1", 200+i, false, 100, wire.MethodCard, false, line("A", 1)))
	}
	for i, v := range MustExec(t, g, ops...) {
		if v.Status != wire.AckAccepted || v.Remaining != [3]int64{} {
			t.Fatalf("offline op %d: %+v", i, v)
		}
	}
	if n := rdb.ZCard(ctxT(t), g.k.rlStore()).Val(); n != 1 {
		t.Errorf("store window holds %d, want 1: offline ops are not recorded", n)
	}
}

// TestSaleStock checks the live stock rules of sales and scans and offline oversells.
func TestSaleStock(t *testing.T) {
	rdb := RunRedis(t)
	ctx := ctxT(t)
	t.Run("all-or-nothing", func(t *testing.T) {
		g := newGate(rdb)
		MustStock(t, g, map[string]int64{"A": 5, "B": 2, "C": 1})
		v := MustOne(t, g, sale("T1", 1, true, 600, line("A", 1), line("B", 3), line("C", 2)))
		wantStatus(t, "short B and C", v, wire.AckRejected, CodeOutOfStock)
		if v.Message != `not enough "B" in stock (2 left, 3 asked)` || v.FlowNo != 0 {
			t.Errorf("verdict %+v", v)
		}
		wantStock(t, g, map[string]int64{"A": 5, "B": 2, "C": 1})
		if f, _ := g.Flow(ctx, day1); f != 0 {
			t.Errorf("flow %d after a refusal", f)
		}
		if c, _ := g.Counters(ctx, day1); len(c) != 0 {
			t.Errorf("counters %v after a refusal", c)
		}
		if n := rdb.Exists(ctx, g.k.idem(g.epoch.Load(), "T1", 1)).Val(); n != 0 {
			t.Error("a live refusal left an idempotency record")
		}
		// The same event resent offline is processed as new: accepted, oversold.
		off := sale("T1", 1, false, 600, line("A", 1), line("B", 3), line("C", 2))
		v = MustOne(t, g, off)
		if v.Status != wire.AckAccepted || !v.Oversold || v.FlowNo != 1 {
			t.Errorf("offline resend: %+v", v)
		}
		wantStock(t, g, map[string]int64{"A": 4, "B": -1, "C": -1})
		// Its duplicate keeps the oversold flag.
		if v := MustOne(t, g, off); v.Status != wire.AckDuplicate || !v.Oversold || v.FlowNo != 1 {
			t.Errorf("duplicate of an oversold sale: %+v", v)
		}
	})
	t.Run("repeated-sku-aggregated", func(t *testing.T) {
		g := newGate(rdb)
		MustStock(t, g, map[string]int64{"A": 3})
		v := MustOne(t, g, sale("T1", 1, true, 400, line("A", 2), line("A", 2)))
		if v.Status != wire.AckRejected || v.Message != `not enough "A" in stock (3 left, 4 asked)` {
			t.Errorf("2+2 of 3: %+v", v)
		}
		wantStatus(t, "2+1 of 3", MustOne(t, g, sale("T1", 2, true, 300, line("A", 2), line("A", 1))), wire.AckAccepted, "")
		wantStock(t, g, map[string]int64{"A": 0})
	})
	t.Run("missing-sku-is-zero", func(t *testing.T) {
		g := newGate(rdb)
		MustStock(t, g, map[string]int64{"A": 3})
		v := MustOne(t, g, sale("T1", 1, true, 100, line("GHOST", 1)))
		if v.Status != wire.AckRejected || v.Message != `not enough "GHOST" in stock (0 left, 1 asked)` {
			t.Errorf("missing SKU: %+v", v)
		}
		wantStatus(t, "scan", MustOne(t, g, scan("T1", 2, true, "GHOST", 1)), wire.AckRejected, CodeOutOfStock)
		wantStock(t, g, map[string]int64{"A": 3})
	})
	t.Run("exact-stock", func(t *testing.T) {
		g := newGate(rdb)
		MustStock(t, g, map[string]int64{"A": 2, "B": 1})
		v := MustOne(t, g, sale("T1", 1, true, 300, line("A", 2), line("B", 1)))
		if v.Status != wire.AckAccepted || v.Oversold {
			t.Errorf("%+v", v)
		}
		wantStock(t, g, map[string]int64{"A": 0, "B": 0})
	})
	t.Run("offline-oversell", func(t *testing.T) {
		g := newGate(rdb)
		MustStock(t, g, map[string]int64{"A": 1, "B": 5})
		v := MustOne(t, g, sale("T1", 1, false, 400, line("A", 3), line("B", 1)))
		if v.Status != wire.AckAccepted || !v.Oversold {
			t.Errorf("%+v, want accepted and oversold", v)
		}
		v = MustOne(t, g, sale("T1", 2, false, 100, line("B", 1)))
		if v.Status != wire.AckAccepted || v.Oversold {
			t.Errorf("%+v, want accepted, not oversold", v)
		}
		wantStock(t, g, map[string]int64{"A": -2, "B": 3})
		// Live sales of a negative SKU are refused; the message shows 0 left.
		v = MustOne(t, g, sale("T1", 3, true, 100, line("A", 1)))
		if v.Status != wire.AckRejected || v.Message != `not enough "A" in stock (0 left, 1 asked)` {
			t.Errorf("%+v", v)
		}
	})
	t.Run("scan-checks-without-decrementing", func(t *testing.T) {
		g := newGate(rdb)
		MustStock(t, g, map[string]int64{"A": 2})
		wantStatus(t, "2 of 2", MustOne(t, g, scan("T1", 1, true, "A", 2)), wire.AckAccepted, "")
		wantStatus(t, "3 of 2", MustOne(t, g, scan("T1", 2, true, "A", 3)), wire.AckRejected, CodeOutOfStock)
		wantStatus(t, "offline 3 of 2", MustOne(t, g, scan("T1", 3, false, "A", 3)), wire.AckAccepted, "")
		wantStock(t, g, map[string]int64{"A": 2})
	})
}

// TestIdempotency checks duplicates and conflicts of every kind.
func TestIdempotency(t *testing.T) {
	rdb := RunRedis(t)
	ctx := ctxT(t)
	g := newGate(rdb)
	MustStock(t, g, map[string]int64{"A": 10})
	s1 := sale("T1", 1, true, 100, line("A", 1))
	first := MustOne(t, g, s1)
	MustOne(t, g, sale("T1", 2, true, 100, line("A", 1)))
	other := s1
	other.Hash = "different"
	offline := s1
	offline.Live = false
	otherKind := refund("T1", 1, false, 100, wire.MethodCash, true, line("A", 1))
	otherKind.Hash = "refund-content"
	for _, tc := range []struct {
		name   string
		op     Op
		status wire.AckStatus
		code   string
		flow   int64
	}{
		{"same-key-same-hash", s1, wire.AckDuplicate, "", first.FlowNo},
		{"resent-offline", offline, wire.AckDuplicate, "", first.FlowNo},
		{"same-key-other-hash", other, wire.AckConflict, CodeConflict, 0},
		{"other-kind-same-key", otherKind, wire.AckConflict, CodeConflict, 0},
		{"scan-first", scan("T2", 1, true, "A", 1), wire.AckAccepted, "", 0},
		{"scan-again", scan("T2", 1, true, "A", 1), wire.AckDuplicate, "", 0},
		{"same-seq-other-terminal", sale("T3", 1, true, 100, line("A", 1)), wire.AckAccepted, "", 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := MustOne(t, g, tc.op)
			if v.Status != tc.status || v.Code != tc.code || v.FlowNo != tc.flow {
				t.Errorf("verdict %+v, want %s %q flow %d", v, tc.status, tc.code, tc.flow)
			}
			if tc.status == wire.AckConflict && !strings.Contains(v.Message, "T1:1") {
				t.Errorf("message %q", v.Message)
			}
		})
	}
	wantStock(t, g, map[string]int64{"A": 7})
	c, _ := g.Counters(ctx, day1)
	if c["T1"].Sales != 2 || c["T1"].Refunds != 0 {
		t.Errorf("counters %+v: a duplicate or conflict changed them", c["T1"])
	}
	ttl := rdb.PTTL(ctx, g.k.idem(g.epoch.Load(), "T1", 1)).Val()
	if ttl <= DefaultIdemTTL-time.Minute || ttl > DefaultIdemTTL {
		t.Errorf("idempotency TTL %v, want about %v", ttl, DefaultIdemTTL)
	}
	short := New(rdb, "SHORT", Options{IdemTTL: 150 * time.Millisecond})
	MustStock(t, short, map[string]int64{"A": 10})
	MustOne(t, short, sale("T1", 1, true, 100, line("A", 1)))
	time.Sleep(200 * time.Millisecond)
	if v := MustOne(t, short, sale("T1", 1, true, 100, line("A", 1))); v.Status != wire.AckAccepted || v.FlowNo != 2 {
		t.Errorf("after the record expired: %+v, want accepted as new", v)
	}
}

// TestFlowNumbers checks that flow numbers count 1, 2, 3 per business date, shared by
// sales and refunds of every terminal.
func TestFlowNumbers(t *testing.T) {
	rdb := RunRedis(t)
	ctx := ctxT(t)
	g := newGate(rdb)
	at := func(op Op, date string) Op { op.BusinessDate = date; return op }
	ops := []Op{
		at(sale("T1", 1, false, 100, line("A", 1)), day1),
		at(sale("T2", 1, false, 100, line("A", 1)), day1),
		at(sale("T1", 2, false, 100, line("A", 1)), day2),
		at(refund("T1", 3, false, 100, wire.MethodCash, true, line("A", 1)), day1),
		at(sale("T2", 2, false, 100, line("A", 1)), day2),
		at(scan("T2", 3, false, "A", 1), day2),
	}
	want := []int64{1, 2, 1, 3, 2, 0}
	for i, v := range MustExec(t, g, ops...) {
		if v.FlowNo != want[i] {
			t.Errorf("op %d (%s %s): flow %d, want %d", i, ops[i].Kind, ops[i].BusinessDate, v.FlowNo, want[i])
		}
	}
	for date, want := range map[string]int64{day1: 3, day2: 2, "2025-03-03": 0} {
		if f, err := g.Flow(ctx, date); err != nil || f != want {
			t.Errorf("Flow(%s) = %d, %v; want %d", date, f, err, want)
		}
	}
}

// TestRefund checks restocking and the refund counters.
func TestRefund(t *testing.T) {
	rdb := RunRedis(t)
	ctx := ctxT(t)
	g := newGate(rdb)
	MustStock(t, g, map[string]int64{"A": 5, "B": 5})
	MustLive := func(op Op) Verdict {
		t.Helper()
		v := MustOne(t, g, op)
		wantStatus(t, op.Kind.String(), v, wire.AckAccepted, "")
		return v
	}
	MustLive(sale("T1", 1, true, 500, line("A", 2), line("B", 3)))
	v := MustLive(refund("T1", 2, true, 200, wire.MethodCash, true, line("A", 1), line("B", 1), line("A", 1)))
	if v.FlowNo != 2 {
		t.Errorf("refund flow %d, want 2", v.FlowNo)
	}
	wantStock(t, g, map[string]int64{"A": 5, "B": 3})
	MustLive(refund("T1", 3, true, 150, wire.MethodCard, false, line("B", 1)))
	wantStock(t, g, map[string]int64{"A": 5, "B": 3})
	// A refund may restock a SKU the store does not track yet.
	MustLive(refund("T1", 4, false, 50, wire.MethodQR, true, line("NEW", 2)))
	wantStock(t, g, map[string]int64{"A": 5, "B": 3, "NEW": 2})
	c, err := g.Counters(ctx, day1)
	if err != nil {
		t.Fatal(err)
	}
	want := client.Counters{Sales: 1, Amount: 500, ByMethod: map[string]money.Fen{"cash": 500},
		Refunds: 3, RefundAmount: 400, RefundByMethod: map[string]money.Fen{"cash": 200, "card": 150, "qr": 50}}
	if !c["T1"].Equal(want) {
		t.Errorf("counters %+v, want %+v", c["T1"], want)
	}
	MustSetLimits(t, g, store.Limits{WindowMs: 60_000, Refund: 1})
	MustLive(refund("T2", 1, true, 1, wire.MethodCash, false, line("A", 1)))
	v = MustOne(t, g, refund("T2", 2, true, 1, wire.MethodCash, false, line("A", 1)))
	if v.Status != wire.AckRateLimited || v.Layer != store.ActionRefund {
		t.Errorf("second live refund: %+v", v)
	}
}

// TestCounters checks that Counters reads back exactly what sales and refunds added, per
// terminal and date, in fen.
func TestCounters(t *testing.T) {
	rdb := RunRedis(t)
	ctx := ctxT(t)
	g := newGate(rdb)
	mixed := sale("T1", 1, false, 12345, line("A", 1))
	mixed.ByMethod = map[string]money.Fen{"cash": 45, "card": 12000, "qr": 300}
	big := sale("T1", 2, false, 900_000_000_000_01, line("A", 1)) // 9e13 yuan: beyond float64's exact cents
	big.ByMethod = map[string]money.Fen{"card": 900_000_000_000_01}
	other := sale("T2", 1, false, 7, line("A", 1))
	nextDay := sale("T1", 3, false, 1000, line("A", 1))
	nextDay.BusinessDate = day2
	MustExec(t, g, mixed, big, other, nextDay, refund("T2", 2, false, 7, "cash", false, line("A", 1)))
	got, err := g.Counters(ctx, day1)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]client.Counters{
		"T1": {Sales: 2, Amount: 900_000_000_123_46, ByMethod: map[string]money.Fen{"cash": 45, "card": 900_000_000_120_01, "qr": 300}},
		"T2": {Sales: 1, Amount: 7, ByMethod: map[string]money.Fen{"cash": 7}, Refunds: 1, RefundAmount: 7, RefundByMethod: map[string]money.Fen{"cash": 7}},
	}
	if len(got) != len(want) {
		t.Fatalf("Counters(%s) = %v", day1, got)
	}
	for term, w := range want {
		if !got[term].Equal(w) {
			t.Errorf("%s: %+v, want %+v", term, got[term], w)
		}
	}
	if got, _ := g.Counters(ctx, day2); len(got) != 1 || got["T1"].Amount != 1000 {
		t.Errorf("Counters(%s) = %v", day2, got)
	}
	if got, err := g.Counters(ctx, "2025-04-01"); err != nil || len(got) != 0 {
		t.Errorf("Counters of an empty day = %v, %v", got, err)
	}
	if _, err := g.Counters(ctx, "2025-4-1"); perr.KindOf(err) != perr.Invalid {
		t.Errorf("Counters(bad date) = %v", err)
	}
}

// TestRebuild checks that Rebuild sets stock and counters exactly and raises flow numbers
// without ever lowering them.
func TestRebuild(t *testing.T) {
	rdb := RunRedis(t)
	ctx := ctxT(t)
	g := newGate(rdb)
	MustStock(t, g, map[string]int64{"A": 10, "B": 10, "OLD": 4})
	day3 := "2025-03-03"
	at := func(op Op, date string) Op { op.BusinessDate = date; return op }
	MustExec(t, g,
		sale("T1", 1, false, 100, line("A", 1)), sale("T2", 1, false, 100, line("A", 1)),
		at(sale("T9", 1, false, 100, line("B", 1)), day2),
		at(sale("T1", 2, false, 100, line("B", 1)), day3), at(sale("T1", 3, false, 100, line("B", 1)), day3),
	)
	// Flow is now 2 on day1, 1 on day2, 2 on day3.
	snap := store.Snapshot{
		Stock: map[string]int64{"A": 7, "B": -2, "C": 0},
		Counters: map[string]map[string]client.Counters{
			day1: {
				"T1": {Sales: 5, Amount: 5000, ByMethod: map[string]money.Fen{"card": 5000}, Refunds: 1, RefundAmount: 10, RefundByMethod: map[string]money.Fen{"card": 10}},
				"T3": {Sales: 1, Amount: 1, ByMethod: map[string]money.Fen{"qr": 1}},
			},
			day2: {},
		},
		MaxFlow: map[string]int64{day1: 40, day3: 1},
	}
	if err := g.Rebuild(ctx, snap); err != nil {
		t.Fatal(err)
	}
	wantStock(t, g, map[string]int64{"A": 7, "B": -2, "C": 0})
	c1, _ := g.Counters(ctx, day1)
	if len(c1) != 2 || !c1["T1"].Equal(snap.Counters[day1]["T1"]) || !c1["T3"].Equal(snap.Counters[day1]["T3"]) {
		t.Errorf("day1 counters %v", c1)
	}
	if n := rdb.Exists(ctx, g.k.counters(day1, "T2")).Val(); n != 0 {
		t.Error("T2's day1 counters survived the rebuild")
	}
	if c2, _ := g.Counters(ctx, day2); len(c2) != 0 {
		t.Errorf("day2 counters %v, want none", c2)
	}
	if c3, _ := g.Counters(ctx, day3); c3["T1"].Sales != 2 {
		t.Errorf("day3 counters %v: a date not in the snapshot must be left alone", c3)
	}
	for date, want := range map[string]int64{day1: 40, day2: 1, day3: 2} {
		if f, _ := g.Flow(ctx, date); f != want {
			t.Errorf("Flow(%s) = %d, want %d", date, f, want)
		}
	}
	if v := MustOne(t, g, sale("T1", 50, false, 100, line("A", 1))); v.FlowNo != 41 {
		t.Errorf("first flow after the rebuild = %d, want 41", v.FlowNo)
	}
	// Rebuilding twice with the same snapshot and an empty one.
	if err := g.Rebuild(ctx, store.Snapshot{}); err != nil {
		t.Fatal(err)
	}
	wantStock(t, g, map[string]int64{})
	if f, _ := g.Flow(ctx, day1); f != 41 {
		t.Errorf("an empty snapshot lowered the flow to %d", f)
	}

	t.Run("stale-index-changes-nothing", func(t *testing.T) {
		g := newGate(rdb)
		MustStock(t, g, map[string]int64{"A": 1})
		MustOne(t, g, sale("T1", 1, false, 100, line("A", 1)))
		// A call built before T1 appeared in the index: the script must refuse it.
		keys := []string{g.k.stock(), g.k.marker(), g.k.flow(day1), g.k.counterIndex(day1)}
		err := rebuildScript.Run(ctx, rdb, keys, 1, "A", "99", 1, "5", "1", 0, 0).Err()
		if !redis.HasErrorPrefix(err, "STALE") {
			t.Fatalf("rebuild with a stale index: %v, want STALE", err)
		}
		wantStock(t, g, map[string]int64{"A": 0})
		if f, _ := g.Flow(ctx, day1); f != 1 {
			t.Errorf("flow %d", f)
		}
	})
	t.Run("invalid", func(t *testing.T) {
		for _, snap := range []store.Snapshot{
			{MaxFlow: map[string]int64{"yesterday": 1}},
			{MaxFlow: map[string]int64{day1: -1}},
			{Stock: map[string]int64{"": 1}},
			{Counters: map[string]map[string]client.Counters{day1: {"T 1": {}}}},
		} {
			if err := g.Rebuild(ctx, snap); perr.KindOf(err) != perr.Invalid {
				t.Errorf("Rebuild(%+v) = %v, want invalid", snap, err)
			}
		}
	})
}

// TestAdjust checks that an adjustment applies once per id.
func TestAdjust(t *testing.T) {
	rdb := RunRedis(t)
	ctx := ctxT(t)
	g := newGate(rdb)
	MustStock(t, g, map[string]int64{"A": 5})
	for _, tc := range []struct {
		name    string
		id, sku string
		delta   int64
		qty     int64
		applied bool
		kind    perr.Kind
	}{
		{"first", "adj-1", "A", 10, 15, true, ""},
		{"again", "adj-1", "A", 10, 15, false, ""},
		{"other-id", "adj-2", "A", -3, 12, true, ""},
		{"again-after-other", "adj-1", "A", 10, 12, false, ""},
		{"new-sku", "adj-3", "B", -2, -2, true, ""},
		{"same-id-other-delta", "adj-1", "A", 11, 12, false, perr.Conflict},
		{"same-id-other-sku", "adj-1", "B", 10, -2, false, perr.Conflict},
		{"zero", "adj-4", "A", 0, 0, false, perr.Invalid},
		{"no-id", "", "A", 1, 0, false, perr.Invalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			qty, applied, err := g.Adjust(ctx, tc.id, tc.sku, tc.delta)
			if perr.KindOf(err) != tc.kind || qty != tc.qty || applied != tc.applied {
				t.Errorf("Adjust = %d, %v, %v; want %d, %v, kind %q", qty, applied, err, tc.qty, tc.applied, tc.kind)
			}
		})
	}
	wantStock(t, g, map[string]int64{"A": 12, "B": -2})
}

// TestExecOrder checks that the ops of one Exec run in order and see each other's effects.
func TestExecOrder(t *testing.T) {
	rdb := RunRedis(t)
	ctx := ctxT(t)
	t.Run("same-sku", func(t *testing.T) {
		g := newGate(rdb)
		MustStock(t, g, map[string]int64{"A": 2})
		ops := []Op{
			scan("T1", 1, true, "A", 2),
			sale("T1", 2, true, 100, line("A", 1)),
			scan("T1", 3, true, "A", 2),                                     // 1 left
			sale("T2", 1, true, 100, line("A", 1)),                          // the last one
			sale("T2", 2, true, 100, line("A", 1)),                          // none left
			refund("T1", 4, true, 100, wire.MethodCash, true, line("A", 1)), // back to 1
			sale("T2", 3, true, 100, line("A", 1)),                          // takes it
			sale("T2", 2, true, 100, line("A", 1)),                          // resent, processed as new now? no: stock 0
			sale("T1", 2, true, 100, line("A", 1)),                          // duplicate of op 1
		}
		want := []struct {
			status wire.AckStatus
			flow   int64
		}{
			{wire.AckAccepted, 0}, {wire.AckAccepted, 1}, {wire.AckRejected, 0}, {wire.AckAccepted, 2},
			{wire.AckRejected, 0}, {wire.AckAccepted, 3}, {wire.AckAccepted, 4}, {wire.AckRejected, 0},
			{wire.AckDuplicate, 1},
		}
		for i, v := range MustExec(t, g, ops...) {
			if v.Status != want[i].status || v.FlowNo != want[i].flow {
				t.Errorf("op %d: %+v, want %s flow %d", i, v, want[i].status, want[i].flow)
			}
		}
		wantStock(t, g, map[string]int64{"A": 0})
	})
	t.Run("after-script-flush", func(t *testing.T) {
		g := newGate(rdb)
		MustStock(t, g, map[string]int64{"A": 1})
		if err := rdb.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		vs := MustExec(t, g,
			sale("T1", 1, true, 100, line("A", 1)),
			refund("T1", 2, true, 100, wire.MethodCash, true, line("A", 1)),
			sale("T1", 3, true, 100, line("A", 1)),
			scan("T1", 4, true, "A", 1),
		)
		for i, want := range []wire.AckStatus{wire.AckAccepted, wire.AckAccepted, wire.AckAccepted, wire.AckRejected} {
			if vs[i].Status != want || (i < 3 && vs[i].FlowNo != int64(i+1)) {
				t.Errorf("op %d: %+v, want %s flow %d", i, vs[i], want, i+1)
			}
		}
	})
	t.Run("empty", func(t *testing.T) {
		if v, err := newGate(rdb).Exec(ctx, nil); err != nil || len(v) != 0 {
			t.Errorf("Exec(nil) = %v, %v", v, err)
		}
	})
	t.Run("invalid-op-sends-nothing", func(t *testing.T) {
		g := newGate(rdb)
		bad := sale("T1", 2, true, 100, line("A", 1))
		bad.ByMethod = map[string]money.Fen{"cash": 99}
		_, err := g.Exec(ctx, []Op{sale("T1", 1, false, 100, line("A", 1)), bad})
		if perr.KindOf(err) != perr.Invalid {
			t.Fatalf("Exec = %v, want invalid", err)
		}
		if f, _ := g.Flow(ctx, day1); f != 0 {
			t.Error("an Exec with an invalid op ran the valid ones")
		}
	})
}

// TestValidation checks the rules Exec enforces before sending anything.
func TestValidation(t *testing.T) {
	rdb := RunRedis(t)
	ctx := ctxT(t)
	g := newGate(rdb)
	ok := sale("T1", 1, true, 100, line("A", 1))
	for _, tc := range []struct {
		name string
		edit func(*Op)
	}{
		{"kind", func(o *Op) { o.Kind = 0 }},
		{"terminal", func(o *Op) { o.Terminal = "T:1" }},
		{"seq", func(o *Op) { o.Seq = 0 }},
		{"hash", func(o *Op) { o.Hash = "" }},
		{"date", func(o *Op) { o.BusinessDate = "01/03/2025" }},
		{"no-lines", func(o *Op) { o.Lines = nil }},
		{"qty", func(o *Op) { o.Lines[0].Qty = 0 }},
		{"sku", func(o *Op) { o.Lines[0].SKU = "" }},
		{"method", func(o *Op) { o.ByMethod = map[string]money.Fen{"cheque": 100} }},
		{"sum", func(o *Op) { o.ByMethod = map[string]money.Fen{"cash": 50, "card": 49} }},
		{"negative", func(o *Op) { o.Total = -100; o.ByMethod = map[string]money.Fen{"cash": -100} }},
		{"scan-two-lines", func(o *Op) { o.Kind = OpScan; o.Lines = append(o.Lines, line("B", 1)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			op := ok
			op.Lines = append([]store.Line(nil), ok.Lines...)
			tc.edit(&op)
			if _, err := g.Exec(ctx, []Op{op}); perr.KindOf(err) != perr.Invalid {
				t.Errorf("Exec = %v, want invalid", err)
			}
		})
	}
	for _, tc := range []struct {
		term, action string
		n            int64
	}{{"", "pay", 1}, {"T1", "dance", 1}, {"T1", "pay", 0}, {"T1", "pay", MaxAllowN + 1}} {
		if _, err := g.Allow(ctx, tc.term, tc.action, tc.n); perr.KindOf(err) != perr.Invalid {
			t.Errorf("Allow(%q, %q, %d) = %v, want invalid", tc.term, tc.action, tc.n, err)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("New with a store id holding a brace did not panic")
		}
	}()
	New(rdb, "S}1", Options{})
}

// TestKeysCarryTag runs every operation of the gate and checks that every key in Redis
// carries the store's hash tag (so all of a store's keys are in one cluster slot), and,
// watching Redis with MONITOR, that every key a script touched was passed in its KEYS.
func TestKeysCarryTag(t *testing.T) {
	rdb := RunRedis(t)
	ctx := ctxT(t)
	mon := StartMonitor(t, rdb.Options().Addr)
	g := New(rdb, "S-tag_1", Options{})
	MustStock(t, g, map[string]int64{"A": 5})
	MustSetLimits(t, g, store.Limits{Pay: 50})
	if err := g.SetPromo(ctx, 150, time.Minute); err != nil {
		t.Fatal(err)
	}
	MustExec(t, g, scan("T1", 1, true, "A", 1), sale("T1", 2, true, 100, line("A", 1)),
		refund("T1", 3, true, 100, "card", true, line("A", 1)), sale("T2", 1, false, 100, line("A", 9)))
	MustAllow(t, g, "T3", store.ActionScan, 2)
	if _, _, err := g.Adjust(ctx, "a1", "A", 1); err != nil {
		t.Fatal(err)
	}
	if err := g.Rebuild(ctx, store.Snapshot{Stock: map[string]int64{"A": 1},
		Counters: map[string]map[string]client.Counters{day1: {"T1": {Sales: 1}}}, MaxFlow: map[string]int64{day1: 9}}); err != nil {
		t.Fatal(err)
	}
	// Scripts refusing, duplicates, conflicts, and a pipeline re-sent after NOSCRIPT.
	MustExec(t, g, sale("T1", 2, true, 100, line("A", 1)), sale("T1", 2, true, 1, line("A", 1)),
		sale("T1", 9, true, 100, line("A", 99)))
	rdb.ScriptFlush(ctx)
	MustExec(t, g, sale("T1", 10, true, 100, line("A", 1)), refund("T1", 11, false, 100, "qr", false, line("A", 1)))
	for _, n := range []int64{50, 51} {
		MustAllow(t, g, "T3", store.ActionScan, n)
	}
	g.Adjust(ctx, "a1", "A", 1)
	g.Adjust(ctx, "a1", "B", 1)

	scripts := mon.Stop(t, rdb)
	if scripts < 15 {
		t.Errorf("MONITOR saw %d script calls, want at least 15", scripts)
	}
	keys := rdb.Keys(ctx, "*").Val()
	if len(keys) < 10 {
		t.Fatalf("only %d keys: %v", len(keys), keys)
	}
	slot := keySlot("S-tag_1")
	for _, k := range keys {
		if !strings.HasPrefix(k, "pg:{S-tag_1}:") {
			t.Errorf("key %q lacks the prefix pg:{S-tag_1}:", k)
		}
		if s := keySlot(k); s != slot {
			t.Errorf("key %q is in slot %d, not %d", k, s, slot)
		}
	}
	t.Logf("%d keys: %v", len(keys), keys)
}

// keySlot is Redis Cluster's HASH_SLOT: CRC16 (XMODEM) of the hash tag mod 16384.
func keySlot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}

// TestSentinelFailover kills the master under a FailoverClient: once the sentinels have
// promoted a replica, Exec works again, the scripts coming back through the NOSCRIPT
// fallback, and after a rebuild flow numbers continue above the ledger's maximum.
func TestSentinelFailover(t *testing.T) {
	s := stack.Run(t, stack.Options{Redis: true, Replicas: 2, Sentinels: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	rdb := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName: s.MasterName, SentinelAddrs: s.SentinelAddrs(),
		DialTimeout: 300 * time.Millisecond, ReadTimeout: 300 * time.Millisecond, WriteTimeout: 300 * time.Millisecond,
		MaxRetries: -1,
	})
	defer rdb.Close()
	g := newGate(rdb)
	MustStock(t, g, map[string]int64{"A": 100})
	for i := int64(1); i <= 3; i++ {
		wantStatus(t, "before", MustOne(t, g, sale("T1", i, true, 100, line("A", 1))), wire.AckAccepted, "")
	}
	if n, err := rdb.Do(ctx, "WAIT", 2, 5000).Int(); err != nil || n != 2 {
		t.Fatalf("WAIT = %d, %v", n, err)
	}
	old := s.Redis[0].Addr()
	if err := s.Redis[0].Kill(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	newMaster, err := s.WaitFailover(ctx, old)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("failover %s -> %s in %v", old, newMaster, time.Since(start).Round(time.Millisecond))
	direct := redis.NewClient(&redis.Options{Addr: newMaster})
	defer direct.Close()
	if ex, err := direct.ScriptExists(ctx, execScript.Hash()).Result(); err != nil || ex[0] {
		t.Fatalf("new master has the script already (%v, %v): the test would not cover NOSCRIPT", ex, err)
	}

	// The first calls may still hit the dead master; retry until the client follows.
	var vs []Verdict
	for {
		vs, err = g.Exec(ctx, []Op{
			refund("T1", 10, true, 100, wire.MethodCash, true, line("A", 1)),
			sale("T1", 11, true, 100, line("A", 1)),
		})
		if err == nil {
			break
		}
		if perr.KindOf(err) != perr.Unavailable || ctx.Err() != nil {
			t.Fatalf("Exec after failover: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if vs[0].Status != wire.AckAccepted || vs[1].Status != wire.AckAccepted || vs[1].FlowNo != vs[0].FlowNo+1 {
		t.Fatalf("after failover: %+v", vs)
	}
	if ex, err := direct.ScriptExists(ctx, execScript.Hash()).Result(); err != nil || !ex[0] {
		t.Errorf("script on the new master after Exec: %v, %v", ex, err)
	}
	// Replicated writes survived (WAIT): the duplicate is recognized.
	if v := MustOne(t, g, sale("T1", 2, true, 100, line("A", 1))); v.Status != wire.AckDuplicate || v.FlowNo != 2 {
		t.Errorf("duplicate after failover: %+v", v)
	}
	// The rebuild raises the flow counter to the ledger's maximum.
	if err := g.Rebuild(ctx, store.Snapshot{Stock: map[string]int64{"A": 95}, MaxFlow: map[string]int64{day1: 20}}); err != nil {
		t.Fatal(err)
	}
	if v := MustOne(t, g, sale("T1", 12, false, 100, line("A", 1))); v.FlowNo != 21 {
		t.Errorf("flow after rebuild %d, want 21", v.FlowNo)
	}
	if err := g.Ping(ctx); err != nil {
		t.Error(err)
	}
}

// TestUnavailable checks that a dead Redis is a perr.Unavailable error.
func TestUnavailable(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer rdb.Close()
	g := New(rdb, "S1", Options{})
	ctx := ctxT(t)
	_, err := g.Exec(ctx, []Op{sale("T1", 1, true, 100, line("A", 1)), sale("T1", 2, true, 100, line("A", 1))})
	var pe *perr.Error
	if !errors.As(err, &pe) || pe.Kind != perr.Unavailable || pe.Code != CodeUnavailable {
		t.Errorf("Exec = %v, want unavailable", err)
	}
	if err := g.Ping(ctx); perr.KindOf(err) != perr.Unavailable {
		t.Errorf("Ping = %v", err)
	}
}

// Monitor reads a MONITOR connection to check the keys scripts touch.
type Monitor struct {
	conn  net.Conn
	lines chan string
	done  chan struct{}
}

// StartMonitor opens a MONITOR connection to addr.
func StartMonitor(tb testing.TB, addr string) *Monitor {
	tb.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	m := &Monitor{conn: conn, lines: make(chan string, 1<<16), done: make(chan struct{})}
	r := bufio.NewReaderSize(conn, 1<<20)
	if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
		tb.Fatal(err)
	}
	if l, err := r.ReadString('\n'); err != nil || l != "+OK\r\n" {
		tb.Fatalf("MONITOR: %q, %v", l, err)
	}
	go func() {
		defer close(m.lines)
		for {
			l, err := r.ReadString('\n')
			if err != nil {
				return
			}
			m.lines <- strings.TrimSuffix(l, "\r\n")
		}
	}()
	tb.Cleanup(func() { conn.Close() })
	return m
}

// Stop reads what MONITOR logged up to now and checks every command a script ran: its key
// must be one of the KEYS of that script call (Redis 7.0 logs the EVALSHA or EVAL, then the
// commands its script ran, marked "lua"). It returns the number of script calls.
func (m *Monitor) Stop(tb testing.TB, rdb *redis.Client) int {
	tb.Helper()
	const end = "monitor-end-marker"
	rdb.Echo(context.Background(), end)
	timeout := time.After(10 * time.Second)
	var declared map[string]bool // KEYS of the script call running
	calls, checked := 0, 0
	for {
		var l string
		select {
		case l = <-m.lines:
		case <-timeout:
			tb.Fatal("MONITOR: no end marker")
		}
		if strings.Contains(l, end) {
			break
		}
		i := strings.Index(l, "] ")
		if i < 0 {
			continue
		}
		args := monitorArgs(l[i+2:])
		if len(args) == 0 {
			continue
		}
		cmd := strings.ToUpper(args[0])
		switch {
		case strings.Contains(l[:i], " lua"):
			if cmd == "TIME" {
				continue
			}
			checked++
			keys := args[1:2]
			if cmd == "DEL" {
				keys = args[1:]
			}
			for _, k := range keys {
				if !declared[k] {
					tb.Errorf("script ran %v on key %q not in its KEYS", args, k)
				}
			}
		case cmd == "EVALSHA" || cmd == "EVAL":
			calls++
			n, _ := strconv.Atoi(args[2])
			declared = map[string]bool{}
			for _, k := range args[3 : 3+n] {
				declared[k] = true
			}
		default:
			declared = nil // another client's command: no script runs
		}
	}
	if checked < 3*calls {
		tb.Errorf("MONITOR showed %d script commands for %d script calls: are lua lines logged?", checked, calls)
	}
	tb.Logf("MONITOR: %d script calls ran %d key commands, all on declared KEYS", calls, checked)
	return calls
}

// monitorArgs splits a MONITOR line's quoted arguments, undoing Redis's escapes.
func monitorArgs(s string) []string {
	var out []string
	for i := 0; i < len(s); {
		if s[i] != '"' {
			i++
			continue
		}
		i++
		var b strings.Builder
		for i < len(s) && s[i] != '"' {
			if s[i] != '\\' || i+1 >= len(s) {
				b.WriteByte(s[i])
				i++
				continue
			}
			switch c := s[i+1]; c {
			case 'x':
				v, _ := strconv.ParseUint(s[i+2:i+4], 16, 8)
				b.WriteByte(byte(v))
				i += 4
				continue
			case 'n':
				b.WriteByte('\n')
			case 'r':
				b.WriteByte('\r')
			case 't':
				b.WriteByte('\t')
			case 'a':
				b.WriteByte('\a')
			case 'b':
				b.WriteByte('\b')
			default:
				b.WriteByte(c)
			}
			i += 2
		}
		i++
		out = append(out, b.String())
	}
	return out
}

// TestRebuildForgetsIdempotency: a sale whose Lua effects a rebuild discarded (it never
// reached the ledger, so the snapshot does not hold it) must be applied again when it is
// redelivered, not answered as a duplicate of effects that no longer exist.
func TestRebuildForgetsIdempotency(t *testing.T) {
	rdb := RunRedis(t)
	ctx := ctxT(t)
	g := newGate(rdb)
	MustStock(t, g, map[string]int64{"A": 10})
	if v := MustOne(t, g, sale("T1", 1, false, 100, line("A", 3))); v.Status != wire.AckAccepted {
		t.Fatalf("first sale: %+v", v)
	}
	// The store died before its ledger commit; the ledger still says 10 in stock.
	if err := g.Rebuild(ctx, store.Snapshot{Stock: map[string]int64{"A": 10}}); err != nil {
		t.Fatal(err)
	}
	v := MustOne(t, g, sale("T1", 1, false, 100, line("A", 3)))
	if v.Status != wire.AckAccepted {
		t.Fatalf("redelivered sale after rebuild: %+v, want accepted", v)
	}
	wantStock(t, g, map[string]int64{"A": 7})
	// Within one epoch a redelivery is still a duplicate.
	if v := MustOne(t, g, sale("T1", 1, false, 100, line("A", 3))); v.Status != wire.AckDuplicate {
		t.Fatalf("second redelivery: %+v, want duplicate", v)
	}
	wantStock(t, g, map[string]int64{"A": 7})
}

// TestRedisServerChanged: Redis restarts between two calls (empty here: no persistence; an
// older dump would do the same). go-redis reconnects without an error; the new connection
// finds another server (Connected), and the gate answers Unavailable instead of deciding
// on a projection that is not the ledger's, until a rebuild.
func TestRedisServerChanged(t *testing.T) {
	s := stack.Run(t, stack.Options{Redis: true})
	var g *Gate
	rdb := redis.NewClient(&redis.Options{Addr: s.Redis[0].Addr(),
		OnConnect: func(ctx context.Context, cn *redis.Conn) error { return g.Connected(ctx, cn) }})
	t.Cleanup(func() { _ = rdb.Close() })
	g = New(rdb, "S1", Options{})
	MustStock(t, g, map[string]int64{"A": 10})
	if v := MustOne(t, g, sale("T1", 1, true, 100, store.Line{SKU: "A", Qty: 1})); v.Status != wire.AckAccepted {
		t.Fatalf("before the restart: %+v", v)
	}
	p := s.Redis[0]
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := p.Start(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	_, err := g.Exec(ctxT(t), []Op{sale("T1", 2, true, 100, store.Line{SKU: "A", Qty: 1})})
	if perr.KindOf(err) != perr.Unavailable {
		t.Fatalf("Exec after the restart: %v; want unavailable", err)
	}
	if _, err := g.Exec(ctxT(t), []Op{sale("T1", 2, true, 100, store.Line{SKU: "A", Qty: 1})}); perr.KindOf(err) != perr.Unavailable {
		t.Fatalf("Exec again before a rebuild: %v; want unavailable", err)
	}
	MustStock(t, g, map[string]int64{"A": 9})
	if v := MustOne(t, g, sale("T1", 2, true, 100, store.Line{SKU: "A", Qty: 1})); v.Status != wire.AckAccepted {
		t.Fatalf("after the rebuild: %+v", v)
	}
}
