package gate

import (
	"testing"
)

// TestExpireDay: ExpireDay deletes a day's counters (of the terminals in its index and of
// those the ledger names), its index and its flow counter, and nothing of another day.
func TestExpireDay(t *testing.T) {
	rdb := RunRedis(t)
	ctx := ctxT(t)
	g := newGate(rdb)
	next := sale("T1", 3, false, 1000, line("A", 1))
	next.BusinessDate = day2
	MustExec(t, g, sale("T1", 1, false, 100, line("A", 1)), sale("T2", 1, false, 200, line("A", 1)), next)
	// A terminal's counters the index does not list (its event taken after the index was read).
	if err := rdb.HSet(ctx, g.k.counters(day1, "T9"), "sales", "1").Err(); err != nil {
		t.Fatal(err)
	}
	if err := g.ExpireDay(ctx, day1, []string{"T1", "T9"}); err != nil {
		t.Fatal(err)
	}
	keys := rdb.Keys(ctx, string(g.k)+"*").Val()
	for _, k := range keys {
		for _, gone := range []string{g.k.counters(day1, "T1"), g.k.counters(day1, "T2"), g.k.counters(day1, "T9"),
			g.k.counterIndex(day1), g.k.flow(day1)} {
			if k == gone {
				t.Errorf("key %s is left", k)
			}
		}
	}
	if c, err := g.Counters(ctx, day2); err != nil || c["T1"].Amount != 1000 {
		t.Fatalf("counters of the other day: %v (%v)", c, err)
	}
	if f, err := g.Flow(ctx, day2); err != nil || f != 1 {
		t.Fatalf("flow of the other day: %d (%v)", f, err)
	}
	if f, err := g.Flow(ctx, day1); err != nil || f != 0 {
		t.Fatalf("flow of the day let go: %d (%v)", f, err)
	}
	if err := g.ExpireDay(ctx, "2025-3-1", nil); err == nil {
		t.Fatal("a date not YYYY-MM-DD was taken")
	}
}
