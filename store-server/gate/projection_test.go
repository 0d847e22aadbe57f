package gate

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/perr"
	"github.com/posgate/posgate/internal/stack"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/client"
	"github.com/posgate/posgate/store-server/store"
	"github.com/redis/go-redis/v9"
)

// storeKeys returns every key of the gate's store with its DUMP, to tell that a call
// changed nothing.
func storeKeys(tb testing.TB, rdb *redis.Client, g *Gate) map[string]string {
	tb.Helper()
	ctx := ctxT(tb)
	out := map[string]string{}
	iter := rdb.Scan(ctx, 0, string(g.k)+"*", 1000).Iterator()
	for iter.Next(ctx) {
		out[iter.Val()] = rdb.Dump(ctx, iter.Val()).Val()
	}
	if err := iter.Err(); err != nil {
		tb.Fatal(err)
	}
	return out
}

// wantLost checks that ops answer projection_lost for reason and change nothing.
func wantLost(tb testing.TB, rdb *redis.Client, g *Gate, reason string, ops ...Op) {
	tb.Helper()
	before := storeKeys(tb, rdb, g)
	_, err := g.Exec(ctxT(tb), ops)
	if why, ok := LostReason(err); !ok || why != reason {
		tb.Fatalf("Exec = %v; want projection_lost (%s)", err, reason)
	}
	if perr.KindOf(err) != perr.Unavailable {
		tb.Errorf("kind %v, want unavailable", perr.KindOf(err))
	}
	if after := storeKeys(tb, rdb, g); !maps.Equal(before, after) {
		tb.Errorf("a lost call changed keys: before %v, after %v", slices.Sorted(maps.Keys(before)), slices.Sorted(maps.Keys(after)))
	}
}

// TestProjectionLost: a projection Redis dropped in part (a stock field, a counter hash, a
// counter index, a flow counter) or in whole (the marker, FLUSHALL) answers projection_lost
// with no effect, instead of reading absence as zero; a rebuild makes the same ops pass.
func TestProjectionLost(t *testing.T) {
	rdb := RunRedis(t)
	ctx := ctxT(t)
	snap := store.Snapshot{
		Stock: map[string]int64{"A": 10, "B": 5},
		Counters: map[string]map[string]client.Counters{day1: {"T1": {Sales: 3, Amount: 300,
			ByMethod: map[string]money.Fen{wire.MethodCash: 300}}}},
		MaxFlow: map[string]int64{day1: 3},
	}
	for _, c := range []struct {
		name, reason string
		drop         func(g *Gate)
	}{
		{"stock-field", "stock_missing", func(g *Gate) { rdb.HDel(ctx, g.k.stock(), "A") }},
		{"other-stock-field", "stock_missing", func(g *Gate) { rdb.HDel(ctx, g.k.stock(), "B") }},
		{"stock-hash", "stock_missing", func(g *Gate) { rdb.Del(ctx, g.k.stock()) }},
		{"counter-hash", "counters_missing", func(g *Gate) { rdb.Del(ctx, g.k.counters(day1, "T1")) }},
		{"counter-index", "counters_missing", func(g *Gate) { rdb.Del(ctx, g.k.counterIndex(day1)) }},
		{"flow", "flow_missing", func(g *Gate) { rdb.Del(ctx, g.k.flow(day1)) }},
		{"marker", "marker_missing", func(g *Gate) { rdb.Del(ctx, g.k.marker()) }},
		{"all-keys", "marker_missing", func(g *Gate) {
			for k := range storeKeys(t, rdb, g) {
				rdb.Del(ctx, k)
			}
		}},
		{"flushall", "marker_missing", func(*Gate) { rdb.FlushAll(ctx) }},
		{"other-epoch", "epoch_mismatch", func(g *Gate) {
			if err := New(rdb, g.store, Options{}).Rebuild(ctx, snap); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := newGate(rdb)
			if err := g.Rebuild(ctx, snap); err != nil {
				t.Fatal(err)
			}
			if why, _, err := g.CheckProjection(ctx); err != nil || why != "" {
				t.Fatalf("CheckProjection before the drop: %q, %v", why, err)
			}
			c.drop(g)
			if why, _, err := g.CheckProjection(ctx); err != nil || why != c.reason {
				t.Errorf("CheckProjection after the drop: %q, %v; want %s", why, err, c.reason)
			}
			op := sale("T1", 4, true, 100, line("A", 1))
			wantLost(t, rdb, g, c.reason, op)
			if err := g.Rebuild(ctx, snap); err != nil {
				t.Fatal(err)
			}
			v := MustOne(t, g, op)
			if v.Status != wire.AckAccepted || v.FlowNo != 4 {
				t.Errorf("after the rebuild: %+v, want accepted with flow 4", v)
			}
			c, err := g.Counters(ctx, day1)
			if err != nil || c["T1"].Sales != 4 || c["T1"].Amount != 400 {
				t.Errorf("counters after the rebuild %+v, %v; want 4 sales, 400", c["T1"], err)
			}
			wantStock(t, g, map[string]int64{"A": 9, "B": 5})
		})
	}
}

// TestProjectionGrows: the scripts keep the marker exact as they add what a rebuild did not
// write (a SKU first sold offline or restocked, a terminal's first sale of a day, a new
// day's flow counter), so that the next calls pass; a part of it dropped afterwards is
// caught as well.
func TestProjectionGrows(t *testing.T) {
	rdb := RunRedis(t)
	ctx := ctxT(t)
	g := newGate(rdb)
	MustStock(t, g, map[string]int64{"A": 10})
	at := func(op Op, date string) Op { op.BusinessDate = date; return op }
	MustExec(t, g,
		sale("T1", 1, false, 100, line("NEW", 2)), // offline: NEW goes to -2
		refund("T2", 1, false, 50, wire.MethodCash, true, line("NEW2", 1)),
		at(sale("T3", 1, true, 100, line("A", 1)), day2),
	)
	for i, op := range []Op{
		sale("T1", 2, true, 100, line("A", 1)),
		refund("T2", 2, true, 10, wire.MethodCash, true, line("A", 1)),
		at(sale("T3", 2, true, 100, line("A", 1)), day2),
		at(sale("T4", 1, true, 100, line("A", 1)), day2),
	} {
		if v := MustOne(t, g, op); v.Status != wire.AckAccepted {
			t.Fatalf("op %d after the projection grew: %+v", i, v)
		}
	}
	wantStock(t, g, map[string]int64{"A": 7, "NEW": -2, "NEW2": 1})
	// What the calls added is tracked: dropping it is caught.
	rdb.HDel(ctx, g.k.stock(), "NEW2")
	wantLost(t, rdb, g, "stock_missing", sale("T1", 3, true, 100, line("A", 1)))
	MustStock(t, g, map[string]int64{"A": 7, "NEW": -2, "NEW2": 1})
	MustExec(t, g, at(sale("T3", 3, true, 100, line("A", 1)), "2025-03-05"))
	rdb.Del(ctx, g.k.counters("2025-03-05", "T3"))
	wantLost(t, rdb, g, "counters_missing", at(sale("T3", 4, true, 100, line("A", 1)), "2025-03-05"))
	MustStock(t, g, map[string]int64{"A": 6, "NEW": -2, "NEW2": 1})
	MustExec(t, g, at(sale("T3", 5, false, 100, line("A", 1)), "2025-03-06"))
	rdb.Del(ctx, g.k.flow("2025-03-06"))
	wantLost(t, rdb, g, "flow_missing", at(sale("T4", 1, false, 100, line("A", 1)), "2025-03-06"))
}

// TestAdjustProjectionLost: an adjustment on a lost projection changes nothing.
func TestAdjustProjectionLost(t *testing.T) {
	rdb := RunRedis(t)
	ctx := ctxT(t)
	g := newGate(rdb)
	MustStock(t, g, map[string]int64{"A": 10})
	if _, applied, err := g.Adjust(ctx, "adj-new", "NEW", 5); err != nil || !applied {
		t.Fatalf("adjust of a new sku: %v %v", applied, err)
	}
	MustOne(t, g, sale("T1", 1, true, 100, line("NEW", 1))) // the marker counts NEW
	rdb.HDel(ctx, g.k.stock(), "A")
	before := storeKeys(t, rdb, g)
	_, _, err := g.Adjust(ctx, "adj-1", "A", 5)
	if why, ok := LostReason(err); !ok || why != "stock_missing" {
		t.Fatalf("adjust on a lost projection: %v", err)
	}
	if after := storeKeys(t, rdb, g); !maps.Equal(before, after) {
		t.Errorf("a lost adjustment changed keys")
	}
}

// TestCheckEviction reads maxmemory-policy from a real redis-server: allkeys-* is refused,
// noeviction and volatile-* pass, and a client denied CONFIG reads INFO memory instead.
func TestCheckEviction(t *testing.T) {
	s := stack.Run(t, stack.Options{Redis: true})
	rdb := redis.NewClient(&redis.Options{Addr: s.Redis[0].Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := ctxT(t)
	g := New(rdb, "S1", Options{})
	for _, p := range []string{"noeviction", "volatile-lru", "volatile-ttl", "allkeys-lru", "allkeys-lfu", "allkeys-random"} {
		if err := rdb.ConfigSet(ctx, "maxmemory-policy", p).Err(); err != nil {
			t.Fatal(err)
		}
		e, err := g.CheckEviction(ctx)
		refused := strings.HasPrefix(p, "allkeys-")
		if e.Policy != p || e.Source != "config" || (err != nil) != refused {
			t.Errorf("%s: %+v, %v", p, e, err)
		}
		if refused && (perr.As(err).Code != CodeEvictionPolicy || !strings.Contains(err.Error(), "maxmemory-policy is "+p)) {
			t.Errorf("%s refused with %v", p, err)
		}
	}
	// A user without CONFIG (as managed services have it): the policy comes from INFO.
	if err := rdb.Do(ctx, "ACL", "SETUSER", "store", "on", ">pw", "~*", "+@all", "-config").Err(); err != nil {
		t.Fatal(err)
	}
	limited := redis.NewClient(&redis.Options{Addr: s.Redis[0].Addr(), Username: "store", Password: "pw"})
	t.Cleanup(func() { _ = limited.Close() })
	e, err := New(limited, "S1", Options{}).CheckEviction(ctx)
	if e.Policy != "allkeys-random" || e.Source != "info" || perr.As(err).Code != CodeEvictionPolicy ||
		!strings.Contains(e.Why, "NOPERM") {
		t.Errorf("without CONFIG: %+v, %v", e, err)
	}
	rdb.ConfigSet(ctx, "maxmemory-policy", "noeviction")
	if e, err := New(limited, "S1", Options{}).CheckEviction(ctx); err != nil || e.Policy != "noeviction" {
		t.Errorf("without CONFIG, noeviction: %+v, %v", e, err)
	}
	// Neither CONFIG nor INFO: the store proceeds and says why.
	rdb.Do(ctx, "ACL", "SETUSER", "store", "-info")
	e, err = New(limited, "S1", Options{}).CheckEviction(ctx)
	if err != nil || e.Policy != "" || !strings.Contains(e.Why, "INFO memory failed") {
		t.Errorf("without CONFIG and INFO: %+v, %v", e, err)
	}
}

// TestProjectionOldDate: the counters of a date outside the rebuild's window are neither
// exact nor checked: a loss there cannot make every call answer projection_lost again after
// each rebuild, which would leave the store rebuilding for good.
func TestProjectionOldDate(t *testing.T) {
	rdb := RunRedis(t)
	ctx := ctxT(t)
	g := newGate(rdb)
	MustStock(t, g, map[string]int64{"A": 10})
	old := "2024-01-01"
	at := func(op Op) Op { op.BusinessDate = old; return op }
	MustExec(t, g, at(sale("T1", 1, false, 100, line("A", 1))), at(sale("T2", 1, false, 100, line("A", 1))))
	// A rebuild whose snapshot has only the flow number of that date (older than its week).
	if err := g.Rebuild(ctx, store.Snapshot{Stock: map[string]int64{"A": 8}, MaxFlow: map[string]int64{old: 2}}); err != nil {
		t.Fatal(err)
	}
	rdb.Del(ctx, g.k.counters(old, "T1"))
	for seq := int64(2); seq <= 3; seq++ {
		if v := MustOne(t, g, at(sale("T1", seq, false, 100, line("A", 1)))); v.Status != wire.AckAccepted || v.FlowNo != seq+1 {
			t.Fatalf("late sale of an old date: %+v", v)
		}
	}
}

// TestCheckProjectionEveryDay: the marker check reads every business date the marker
// tracks, not one: a past day's counter hash, counter index or flow counter dropped while
// no call touches that day is found, and its date named, although the later day is whole.
// A day the store expired (ExpireDay) is no longer tracked: its keys' absence is no loss,
// and the day after it is still checked.
func TestCheckProjectionEveryDay(t *testing.T) {
	rdb := RunRedis(t)
	ctx := ctxT(t)
	cash := func(n int64) client.Counters {
		return client.Counters{Sales: n, Amount: money.Fen(100 * n), ByMethod: map[string]money.Fen{wire.MethodCash: money.Fen(100 * n)}}
	}
	snap := store.Snapshot{
		Stock:    map[string]int64{"A": 10},
		Counters: map[string]map[string]client.Counters{day1: {"T1": cash(3), "T2": cash(1)}, day2: {"T1": cash(2)}},
		MaxFlow:  map[string]int64{day1: 4, day2: 2},
	}
	rebuilt := func(t *testing.T) *Gate {
		t.Helper()
		g := newGate(rdb)
		if err := g.Rebuild(ctx, snap); err != nil {
			t.Fatal(err)
		}
		if why, date, err := g.CheckProjection(ctx); err != nil || why != "" || date != "" {
			t.Fatalf("CheckProjection after the rebuild: %q %q, %v", why, date, err)
		}
		return g
	}
	for _, c := range []struct {
		name, reason string
		drop         func(g *Gate)
	}{
		{"counter-hash", LostCountersMissing, func(g *Gate) { rdb.Del(ctx, g.k.counters(day1, "T2")) }},
		{"counter-index", LostCountersMissing, func(g *Gate) { rdb.Del(ctx, g.k.counterIndex(day1)) }},
		{"flow", LostFlowMissing, func(g *Gate) { rdb.Del(ctx, g.k.flow(day1)) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := rebuilt(t)
			c.drop(g)
			if why, date, err := g.CheckProjection(ctx); err != nil || why != c.reason || date != day1 {
				t.Errorf("CheckProjection after %s of %s dropped: %q on %q, %v; want %s on %s", c.name, day1, why, date,
					err, c.reason, day1)
			}
		})
	}
	t.Run("expired", func(t *testing.T) {
		g := rebuilt(t)
		if err := g.ExpireDay(ctx, day1, []string{"T1", "T2"}); err != nil {
			t.Fatal(err)
		}
		if why, date, err := g.CheckProjection(ctx); err != nil || why != "" {
			t.Fatalf("CheckProjection after %s expired: %q on %q, %v; want none", day1, why, date, err)
		}
		rdb.Del(ctx, g.k.counters(day2, "T1"))
		if why, date, err := g.CheckProjection(ctx); err != nil || why != LostCountersMissing || date != day2 {
			t.Errorf("CheckProjection after %s's counters dropped: %q on %q, %v; want counters_missing on it", day2,
				why, date, err)
		}
	})
}
