package ingest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/posgate/posgate/internal/stack"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/client"
	"github.com/redis/go-redis/v9"
)

// TestProjectionLostRetried: a stock field, a terminal's counter hash or the whole store's
// keys dropped from Redis while it stays up: the next live sale is not refused out_of_stock
// nor counted from zero; the group is decided again after a rebuild, the drift counted by
// reason, and Redis equals the ledger after.
func TestProjectionLostRetried(t *testing.T) {
	s := stack.Run(t, stack.Options{Redis: true})
	rdb := redis.NewClient(&redis.Options{Addr: s.Redis[0].Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	in, led, out := newIngestOn(t, s)
	in.cfg.AuditEvery = -1 // the marker alone
	runIngest(t, in)
	ctx := context.Background()
	at := time.Now()
	date := led.BusinessDate(at)
	prefix := "pg:{" + testStore + "}:"
	seq, acks := int64(0), 0
	sell := func() wire.Ack {
		t.Helper()
		seq++
		in.Handle(wire.UpTopic(testStore, "T1"), testSale("T1", seq, at, false))
		a := acksOf(t, out, acks)[0]
		acks++
		return a
	}
	for range 3 {
		if a := sell(); a.Status != wire.AckAccepted {
			t.Fatalf("sale before: %+v", a)
		}
	}
	for i, c := range []struct {
		reason string
		drop   func()
	}{
		{"stock_missing", func() { rdb.HDel(ctx, prefix+"stock", "A") }},
		{"counters_missing", func() { rdb.Del(ctx, prefix+"cnt:"+date+":T1") }},
		{"marker_missing", func() {
			keys, _ := rdb.Keys(ctx, prefix+"*").Result()
			rdb.Del(ctx, keys...)
		}},
		{"marker_missing", func() { rdb.FlushAll(ctx) }},
	} {
		c.drop()
		if a := sell(); a.Status != wire.AckAccepted || !a.Live {
			t.Fatalf("%d %s: the live sale after the drop: %+v, want accepted", i, c.reason, a)
		}
		st := in.Stats()
		if st.DriftReasons[c.reason] == 0 || st.Refused != 0 {
			t.Errorf("%d: stats %+v: want a drift %s and no refusal", i, st, c.reason)
		}
		wantProjected(t, in)
	}
	if st := in.Stats(); st.Drift != 4 || st.Rebuilds != 5 {
		t.Errorf("stats: %d drifts, %d rebuilds; want 4 and 5 (the start's)", st.Drift, st.Rebuilds)
	}
}

// wantProjected checks Redis = ledger: stock and today's counters.
func wantProjected(t *testing.T, in *Ingest) {
	t.Helper()
	reason, detail, err := in.compare(context.Background())
	if err != nil || reason != "" {
		t.Errorf("redis after the rebuild: %s %s %v", reason, detail, err)
	}
}

// countersOn returns the counters of date as Redis and the ledger hold them.
func countersOn(t *testing.T, in *Ingest, date string) (red, led map[string]client.Counters) {
	t.Helper()
	ctx := context.Background()
	red, err := in.cfg.Gate.Counters(ctx, date)
	if err != nil {
		t.Fatal(err)
	}
	led, err = in.cfg.Ledger.Totals(ctx, date)
	if err != nil {
		t.Fatal(err)
	}
	return red, led
}

// TestDriftAudit: a difference the marker cannot see (a figure changed in place) is found by
// the scheduled audit, counted, and rebuilt.
func TestDriftAudit(t *testing.T) {
	s := stack.Run(t, stack.Options{Redis: true})
	rdb := redis.NewClient(&redis.Options{Addr: s.Redis[0].Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	in, led, out := newIngestOn(t, s)
	in.cfg.AuditEvery = 200 * time.Millisecond
	// The audit reads "today" by the store's clock: it stands at the sale's time, so that the
	// counters changed are today's whenever the test runs (at 23:59:59 the audit read the
	// next day's, which nothing had changed).
	at := time.Now()
	in.cfg.Now = func() time.Time { return at }
	runIngest(t, in)
	ctx := context.Background()
	date := led.BusinessDate(at)
	in.Handle(wire.UpTopic(testStore, "T1"), testSale("T1", 1, at, false))
	if a := acksOf(t, out, 0)[0]; a.Status != wire.AckAccepted {
		t.Fatalf("sale: %+v", a)
	}
	prefix := "pg:{" + testStore + "}:"
	for _, c := range []struct {
		reason string
		change func()
	}{
		{DriftAuditStock, func() { rdb.HSet(ctx, prefix+"stock", "A", 5) }},
		{DriftAuditCounters, func() { rdb.HIncrBy(ctx, prefix+"cnt:"+date+":T1", "amount", 100) }},
	} {
		rebuilds := in.Stats().Rebuilds
		c.change()
		deadline := time.Now().Add(5 * time.Second)
		for st := in.Stats(); st.DriftReasons[c.reason] == 0 || st.Rebuilds == rebuilds || in.Mode() != client.ModeRedis; st = in.Stats() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: no drift found and rebuilt in 5s: %+v", c.reason, st)
			}
			time.Sleep(20 * time.Millisecond)
		}
		wantProjected(t, in)
	}
	if st := in.Stats(); st.LastDrift != DriftAuditCounters || fmt.Sprint(st.DriftReasons) != "map[audit_counters:1 audit_stock:1]" {
		t.Errorf("stats %+v", st)
	}
}

// TestIdleLoss: a key dropped while no sale comes is found by the marker check at the next
// probe (a second), and rebuilt: Redis equals the ledger within 2 s, with no gate call. A
// key of yesterday (an offline sale of it came late) is found as well, not at that day's
// next late sale.
func TestIdleLoss(t *testing.T) {
	s := stack.Run(t, stack.Options{Redis: true})
	rdb := redis.NewClient(&redis.Options{Addr: s.Redis[0].Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	in, led, out := newIngestOn(t, s)
	in.cfg.AuditEvery = -1 // the marker check alone
	// The marker check reads today's counters by the store's clock: it stands at the sale's
	// time, so that the hash dropped is today's whenever the test runs.
	at := time.Now()
	in.cfg.Now = func() time.Time { return at }
	runIngest(t, in)
	ctx := context.Background()
	in.Handle(wire.UpTopic(testStore, "T1"), testSale("T1", 1, at, false))
	if a := acksOf(t, out, 0)[0]; a.Status != wire.AckAccepted {
		t.Fatalf("sale: %+v", a)
	}
	yesterday := at.AddDate(0, 0, -1)
	in.Handle(wire.UpTopic(testStore, "T2"), testSale("T2", 1, yesterday, true))
	if a := acksOf(t, out, 1)[0]; a.Status != wire.AckAccepted {
		t.Fatalf("yesterday's offline sale: %+v", a)
	}
	date, yday := led.BusinessDate(at), led.BusinessDate(yesterday)
	for i, drop := range []func(){
		func() { rdb.HDel(ctx, "pg:{"+testStore+"}:stock", "A") },
		func() { rdb.Del(ctx, "pg:{"+testStore+"}:cnt:"+date+":T1") },
		func() { rdb.Del(ctx, "pg:{"+testStore+"}:cnt:"+yday+":T2") },
		func() { rdb.Del(ctx, "pg:{"+testStore+"}:flow:"+yday) },
		func() { rdb.FlushAll(ctx) },
	} {
		before := in.Stats()
		drop()
		start := time.Now()
		for st := in.Stats(); st.Drift == before.Drift || st.Rebuilds == before.Rebuilds || in.Mode() != client.ModeRedis; st = in.Stats() {
			if time.Since(start) > 2*time.Second {
				t.Fatalf("drop %d: not found and rebuilt within 2s: %+v", i, in.Stats())
			}
			time.Sleep(10 * time.Millisecond)
		}
		wantProjected(t, in)
		rc, lc := countersOn(t, in, yday)
		if d := countersDiff(lc, rc); d != "" || rc["T2"].Sales != 1 {
			t.Errorf("drop %d: yesterday's counters after the rebuild: %s (T2 %+v)", i, d, rc["T2"])
		}
	}
}

// TestDriftAuditPastDays: the audit compares, in turn, the counters of every date besides
// today that Redis tracks within the rebuild's window: a figure of yesterday's or of the day
// before's changed in place is found and rebuilt, as today's is. A day whose keys left Redis
// (the day sweep) is not compared: a late sale of it, which the gate counts there from zero,
// is no drift.
func TestDriftAuditPastDays(t *testing.T) {
	s := stack.Run(t, stack.Options{Redis: true})
	rdb := redis.NewClient(&redis.Options{Addr: s.Redis[0].Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	in, led, out := newIngestOn(t, s)
	in.cfg.AuditEvery = 50 * time.Millisecond
	at := time.Now()
	in.cfg.Now = func() time.Time { return at }
	runIngest(t, in)
	ctx := context.Background()
	acks := 0
	sell := func(terminal string, when time.Time) {
		t.Helper()
		in.Handle(wire.UpTopic(testStore, terminal), testSale(terminal, 1, when, !when.Equal(at)))
		if a := acksOf(t, out, acks)[0]; a.Status != wire.AckAccepted {
			t.Fatalf("%s's sale of %s: %+v", terminal, led.BusinessDate(when), a)
		}
		acks++
	}
	// A sale today (T1) and one of each of the three days before (T2, T3, T4).
	var dates []string
	for i, term := range []string{"T1", "T2", "T3", "T4"} {
		when := at.AddDate(0, 0, -i)
		sell(term, when)
		dates = append(dates, led.BusinessDate(when))
	}
	// The third day before left Redis, as the day sweep lets a day HQ holds go; then a till
	// offline since sends a sale of it.
	gone := dates[3]
	n, err := led.ExpireFromRedis(ctx, gone)
	if err != nil {
		t.Fatal(err)
	}
	if err := in.cfg.Gate.ExpireDay(ctx, gone, []string{"T4"}); err != nil {
		t.Fatal(err)
	}
	if err := led.KeysGone(ctx, gone, n); err != nil {
		t.Fatal(err)
	}
	sell("T5", at.AddDate(0, 0, -3))
	if rc, lc := countersOn(t, in, gone); countersDiff(lc, rc) == "" {
		t.Fatalf("%s: redis %+v and the ledger %+v agree: the test shows nothing", gone, rc, lc)
	}
	time.Sleep(time.Second) // twenty audits
	if st := in.Stats(); st.Drift != 0 {
		t.Fatalf("a day out of redis counted as a drift: %+v", st)
	}

	for i, date := range dates[1:3] {
		before := in.Stats()
		term := fmt.Sprintf("T%d", i+2)
		if err := rdb.HIncrBy(ctx, "pg:{"+testStore+"}:cnt:"+date+":"+term, "amount", 100).Err(); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(5 * time.Second)
		for st := in.Stats(); st.DriftReasons[DriftAuditCounters] == before.DriftReasons[DriftAuditCounters] ||
			st.Rebuilds == before.Rebuilds || in.Mode() != client.ModeRedis; st = in.Stats() {
			if time.Now().After(deadline) {
				t.Fatalf("%s's counters of %s changed in place: no drift found and rebuilt in 5s: %+v", term, date, st)
			}
			time.Sleep(20 * time.Millisecond)
		}
		if rc, lc := countersOn(t, in, date); countersDiff(lc, rc) != "" || rc[term].Sales != 1 {
			t.Errorf("%s after the rebuild: redis %+v, ledger %+v", date, rc, lc)
		}
	}
	if st := in.Stats(); st.Drift != 2 || fmt.Sprint(st.DriftReasons) != "map[audit_counters:2]" {
		t.Errorf("stats %+v: want two drifts, both audit_counters", st)
	}
}
