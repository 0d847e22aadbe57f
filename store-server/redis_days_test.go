package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/posgate/posgate/e2e"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/client"
)

// dayKeys counts the store's keys of business days in Redis: counters, counter indexes and
// flow counters.
func dayKeys(t *testing.T, rdb *redis.Client) []string {
	t.Helper()
	var out []string
	for _, pat := range []string{"cnt:*", "cntidx:*", "flow:*"} {
		keys, err := rdb.Keys(context.Background(), "pg:{"+biStoreID+"}:"+pat).Result()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, keys...)
	}
	return out
}

// usedMemory is Redis's used_memory.
func usedMemory(t *testing.T, rdb *redis.Client) int64 {
	t.Helper()
	info, err := rdb.Info(context.Background(), "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	t.Fatal("INFO memory names no used_memory")
	return 0
}

// TestRedisFlatOverThirtyDays: a store trades 30 days (its sales stamped with each day's
// time, two terminals) and its uploader, hq-sync upload, sends each day to HQ (hq-sync
// serve) when the day is over. Once HQ holds a day, the store lets its keys go from Redis:
// after every day no closed day's key is left, and Redis's memory on the 30th day is
// where it was on the 3rd (idempotency records expire by themselves, here after 1 s). A
// sale of a day long gone, arriving late, is accepted with a flow number of its own that
// no other sale of that day has, and the keys the gate made again for it go too.
func TestRedisFlatOverThirtyDays(t *testing.T) {
	t.Parallel() // mostly waiting for each day's idempotency records to expire
	b := binaries(t)
	srv := biRunServer(t, "--redis-idem-ttl", "1s", "--redis-sweep-every", "100ms")
	srv.openStore(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Stack.Redis[0].Addr()})
	defer rdb.Close()
	ctx := context.Background()
	dir := t.TempDir()
	secret := "s1-secret-for-the-days-test"
	storesFile := filepath.Join(dir, "stores.json")
	js, _ := json.Marshal([]map[string]string{{"store": biStoreID, "secret": secret}})
	if err := os.WriteFile(storesFile, js, 0o600); err != nil {
		t.Fatal(err)
	}
	hq, err := e2e.StartServe(ctx, b.HQSync, e2e.ServeOptions{DB: filepath.Join(dir, "hq.db"), StoresFile: storesFile, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hq.Kill() })
	upload := func() {
		t.Helper()
		cmd := exec.Command(b.HQSync, "upload", "--once", "--store", biStoreID,
			"--ledger", filepath.Join(srv.Main.DataDir, "ledger.db"), "--state", filepath.Join(srv.Main.DataDir, "upload.db"),
			"--hq-url", hq.BatchesURL(), "--tz", biTZ)
		cmd.Env = append(os.Environ(), "POSGATE_HQ_SECRET="+secret)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("hq-sync upload --once: %v\n%s", err, out)
		}
	}
	bus := biConnect(t, srv.Broker)
	loc, _ := time.LoadLocation(biTZ)
	first := time.Now().In(loc).AddDate(0, 0, -31)
	seqs := map[string]int64{}
	const perDay = 40 // sales per terminal and day
	sell := func(at time.Time, terminal string, n int) {
		t.Helper()
		var events [][]byte
		for range n {
			seqs[terminal]++
			seq := seqs[terminal]
			p := biGoodSale(fmt.Sprintf("%s-%d", terminal, seq), int(seq))
			env := wire.NewEnvelope(wire.KindSale, biStoreID, terminal, seq, at.Add(time.Duration(seq)*time.Second), biMarshal(t, p))
			env.Offline = true
			events = append(events, biMarshal(t, env))
		}
		bus.publish(t, terminal, biBatch(terminal, events...))
		d, ok := bus.next(terminal, 10*time.Second)
		if !ok || d.err != nil || len(d.acks.Acks) != n {
			t.Fatalf("%s: acks %+v (%v)", terminal, d.acks, d.err)
		}
		for _, a := range d.acks.Acks {
			if a.Status != wire.AckAccepted {
				t.Fatalf("%s seq %d: %s %s", terminal, a.Seq, a.Status, a.Message)
			}
		}
	}
	waitFor(t, 20*time.Second, "the store's first sweep", func() bool { return len(dayKeys(t, rdb)) == 0 })
	var mem []int64
	var footprint int64
	for d := range 30 {
		day := time.Date(first.Year(), first.Month(), first.Day()+d, 9, 0, 0, 0, loc)
		before := usedMemory(t, rdb)
		for _, term := range []string{"T1", "T2"} {
			sell(day, term, perDay)
		}
		footprint = max(footprint, usedMemory(t, rdb)-before)
		upload()
		waitFor(t, 20*time.Second, fmt.Sprintf("day %d's keys to go", d+1), func() bool {
			keys := dayKeys(t, rdb)
			n, _ := rdb.Keys(ctx, "pg:{"+biStoreID+"}:idem:*").Result()
			return len(keys) == 0 && len(n) == 0
		})
		mem = append(mem, usedMemory(t, rdb))
	}
	t.Logf("used_memory after each day (bytes): %v; a day's sales took up to %d bytes before they went", mem, footprint)
	if grew := mem[29] - mem[2]; grew > 64<<10 || grew > 5*footprint {
		t.Errorf("used_memory grew %d bytes from day 3 to day 30 (a day's sales take %d)", grew, footprint)
	}

	// The last day is within the rebuild's window (ledger.SnapshotDays): its totals do not
	// compare Redis's counters, which went with its keys. Before, every till of a day HQ held
	// showed as differing from Redis, with an alert, for a week.
	lastDate := time.Date(first.Year(), first.Month(), first.Day()+29, 9, 0, 0, 0, loc).Format(wire.BusinessDate)
	want := fmt.Sprintf("T1 sales=%d redis=false redis_differs=false; T2 sales=%d redis=false redis_differs=false; ", perDay, perDay)
	if got := totalsRedis(t, srv, lastDate); got != want {
		t.Errorf("totals of %s, whose keys left redis: %s\nwant %s", lastDate, got, want)
	}
	if tot, err := srv.manager().Totals(ctx, lastDate); err != nil || tot.RedisNotCompared != client.NotComparedLeftRedis {
		t.Errorf("totals of %s: redis_not_compared %q (%v), want %q", lastDate, tot.RedisNotCompared, err, client.NotComparedLeftRedis)
	}

	// A till offline since day 3 sends a sale of it now.
	late := time.Date(first.Year(), first.Month(), first.Day()+2, 20, 0, 0, 0, loc)
	lateDate := late.Format(wire.BusinessDate)
	seqs["T3"] = 0
	sell(late, "T3", 1)
	d, err := srv.manager().Totals(ctx, lateDate)
	if err != nil {
		t.Fatal(err)
	}
	var sales int64
	for _, tt := range d.Terminals {
		sales += tt.Ledger.Sales
	}
	if sales != 2*perDay+1 {
		t.Fatalf("the late day holds %d sales in the ledger, want %d", sales, 2*perDay+1)
	}
	waitFor(t, 20*time.Second, "the late sale's keys to go", func() bool { return len(dayKeys(t, rdb)) == 0 })
	if m, err := srv.manager().Mode(ctx); err != nil || m.Mode != client.ModeRedis {
		t.Fatalf("mode %v (%v)", m.Mode, err)
	}
	srv.checkFlowsDistinct(t, lateDate, 2*perDay+1)
}

// checkFlowsDistinct checks that the date's sales have n flow numbers, all different.
func (s *biServer) checkFlowsDistinct(t *testing.T, date string, n int) {
	t.Helper()
	db := openLedgerRO(t, filepath.Join(s.Main.DataDir, "ledger.db"))
	var count, distinct int
	if err := db.QueryRow(`SELECT count(*), count(DISTINCT flow_no) FROM sales WHERE business_date = ?`, date).
		Scan(&count, &distinct); err != nil {
		t.Fatal(err)
	}
	if count != n || distinct != n {
		t.Fatalf("sales of %s: %d with %d flow numbers, want %d distinct", date, count, distinct, n)
	}
}

// openLedgerRO opens a ledger file read-only, closed when t ends.
func openLedgerRO(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite3", "file:"+path+"?mode=ro&_busy_timeout=5000")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}
