package ledger

import (
	"context"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"
)

// TestDaysOutOfRedis: once the keys of a day left Redis, a rebuild's snapshot leaves the day
// out (its counters and its flow counter), and a late event of it takes its flow number from
// the ledger, whatever the gate gave (its counter there is gone: it starts again at 1), and
// touches the day so that the keys the gate made again go too. The days stay out across a
// reopen.
func TestDaysOutOfRedis(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	l := mustOpenAt(t, path, day.Add(2*time.Hour))
	MustAdjust(t, l, "open-A", "A", 100)
	yesterday := day.AddDate(0, 0, -1)
	MustCommit(t, l,
		withFlow(accepted("T1", 1, yesterday, salePayload("s1", []item{{"A", 1, 100}})), 1),
		withFlow(accepted("T1", 2, yesterday, salePayload("s2", []item{{"A", 1, 100}})), 2),
		withFlow(accepted("T1", 3, day, salePayload("s3", []item{{"A", 1, 100}})), 1),
	)
	if got, err := l.DaysInRedis(ctx, dayDate); err != nil || !slices.Equal(got, []string{"2025-02-28"}) {
		t.Fatalf("days in redis before today: %v (%v)", got, err)
	}
	seen, err := l.ExpireFromRedis(ctx, "2025-02-28")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.KeysGone(ctx, "2025-02-28", seen); err != nil {
		t.Fatal(err)
	}
	if got, err := l.DaysInRedis(ctx, "2025-03-02"); err != nil || !slices.Equal(got, []string{dayDate}) {
		t.Fatalf("days in redis after the expiry: %v (%v)", got, err)
	}
	s, err := l.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Counters["2025-02-28"]; ok || !reflect.DeepEqual(s.MaxFlow, map[string]int64{dayDate: 1}) {
		t.Fatalf("snapshot: counters of %v, max flow %v; want the day out of Redis left out", keys(s.Counters), s.MaxFlow)
	}
	// A till offline since yesterday: the gate, its counter gone, gives flow 1 again.
	out := MustCommit(t, l, withFlow(accepted("T2", 1, yesterday, salePayload("s4", []item{{"A", 1, 100}})), 1))
	if out[0].Err != nil || out[0].FlowNo != 3 {
		t.Fatalf("late sale of the day out of Redis: flow %d, err %v; want 3 from the ledger", out[0].FlowNo, out[0].Err)
	}
	// A sale of a day still in Redis keeps the gate's number.
	out = MustCommit(t, l, withFlow(accepted("T2", 2, day, salePayload("s5", []item{{"A", 1, 100}})), 2))
	if out[0].Err != nil || out[0].FlowNo != 2 {
		t.Fatalf("sale of today: flow %d, err %v; want the gate's 2", out[0].FlowNo, out[0].Err)
	}
	touched, err := l.TouchedDays(ctx)
	if err != nil || !reflect.DeepEqual(touched, map[string]int64{"2025-02-28": 1}) {
		t.Fatalf("touched days %v (%v), want yesterday once", touched, err)
	}
	l.Close()
	l = mustOpenAt(t, path, day.Add(3*time.Hour))
	if !l.redisExpired("2025-02-28") || l.redisExpired(dayDate) {
		t.Fatal("the days out of Redis were not read back at open")
	}
	// A deletion confirmed with a stale count leaves the day touched.
	if err := l.KeysGone(ctx, "2025-02-28", 0); err != nil {
		t.Fatal(err)
	}
	if touched, _ := l.TouchedDays(ctx); touched["2025-02-28"] != 1 {
		t.Fatalf("touched days %v after a stale confirmation", touched)
	}
	if err := l.KeysGone(ctx, "2025-02-28", 1); err != nil {
		t.Fatal(err)
	}
	if touched, _ := l.TouchedDays(ctx); len(touched) != 0 {
		t.Fatalf("touched days %v after the keys went", touched)
	}
}
