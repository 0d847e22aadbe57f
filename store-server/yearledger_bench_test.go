package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/stack"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/gate"
	"github.com/posgate/posgate/store-server/ledger"
)

// The busy store of the year-ledger benchmark: yearSales sales a day (2 lines, cash) from
// yearTerminals tills, over yearSKUs SKUs, for yearDays days.
const (
	yearSales     = 8300
	yearTerminals = 8
	yearSKUs      = 2000
	yearDays      = 365
	yearSeqStride = 100_000 // a day's seqs of a till are below it
)

// yearDay commits one day of the busy store to l, through Commit, on business date at.
func yearDay(b *testing.B, l *ledger.Ledger, at time.Time) {
	b.Helper()
	ctx := context.Background()
	var recs []ledger.Record
	flush := func() {
		out, err := l.Commit(ctx, recs)
		if err != nil {
			b.Fatal(err)
		}
		for _, o := range out {
			if o.Err != nil || o.Status != wire.AckAccepted {
				b.Fatalf("template sale: %+v", o)
			}
		}
		recs = recs[:0]
	}
	for i := range yearSales {
		term := fmt.Sprintf("T%02d", i%yearTerminals+1)
		seq := int64(i/yearTerminals + 1)
		p := &wire.SalePayload{SaleID: fmt.Sprintf("%s-%d", term, seq), OpenedAt: at}
		for n := range 2 {
			sku := fmt.Sprintf("SKU%04d", (i*7+n*13)%yearSKUs)
			price := money.Fen(100 + (i+n)%900)
			p.Lines = append(p.Lines, wire.Line{Line: n + 1, SKU: sku, Name: "item " + sku, Qty: 1, UnitPrice: price, Amount: price})
			p.Total += price
		}
		p.Payments = []wire.Payment{{Method: wire.MethodCash, Amount: p.Total}}
		body, _ := json.Marshal(p)
		t := at.Add(time.Duration(i) * 5 * time.Second)
		recs = append(recs, ledger.Record{Terminal: term, Seq: seq, Kind: wire.KindSale, At: t, Payload: body,
			Status: wire.AckAccepted, Final: true, Sale: p, FlowNo: int64(i + 1),
			Hash: wire.Hash(wire.KindSale, biStoreID, term, seq, t, body)})
		if len(recs) == 1000 {
			flush()
		}
	}
	flush()
}

// openStocked opens a ledger at path with opening stock of every SKU, its clock at now.
func openStocked(b *testing.B, path string, now time.Time) *ledger.Ledger {
	b.Helper()
	l, err := ledger.Open(context.Background(), path, biStoreID, now.Location())
	if err != nil {
		b.Fatal(err)
	}
	l.Now = func() time.Time { return now }
	for i := range yearSKUs {
		sku := fmt.Sprintf("SKU%04d", i)
		if _, _, err := l.Adjust(context.Background(), "opening-"+sku, sku, 10_000_000, ledger.ReasonOpening); err != nil {
			b.Fatal(err)
		}
	}
	return l
}

// spreadYear copies the first day of the ledger at path to the yearDays-1 days after it
// (each till's seqs yearSeqStride apart a day), books the stock they take, and records
// the days before keepInRedis as out of Redis, as the store's day sweep leaves a year.
func spreadYear(b *testing.B, path string, first time.Time, keepInRedis string) {
	b.Helper()
	// A fixture: written without a journal, then back to the ledger's WAL.
	db, err := sql.Open("sqlite3", "file:"+path+"?_busy_timeout=10000&_journal_mode=OFF&_synchronous=OFF")
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	d0 := first.Format(wire.BusinessDate)
	days := fmt.Sprintf(`WITH RECURSIVE k(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM k WHERE i < %d) `, yearDays-1)
	shift := `date(business_date, '+' || k.i || ' days')`
	for _, q := range []string{
		days + `INSERT INTO events (terminal, seq, kind, hash, at, business_date, offline, status, final, code, message,
			flow_no, oversold, received_ms, payload)
			SELECT terminal, seq + k.i * ` + fmt.Sprint(yearSeqStride) + `, kind, hash, at, ` + shift + `, offline, status, final,
				code, message, flow_no, oversold, received_ms + k.i * 86400000, payload
			FROM events, k WHERE business_date = '` + d0 + `' ORDER BY terminal, k.i, seq`,
		days + `INSERT INTO sales SELECT terminal, seq + k.i * ` + fmt.Sprint(yearSeqStride) + `, sale_id, at, ` + shift + `,
			flow_no, total, change, offline, oversold FROM sales, k WHERE business_date = '` + d0 + `' ORDER BY k.i, flow_no`,
		days + `INSERT INTO sale_lines SELECT terminal, seq + k.i * ` + fmt.Sprint(yearSeqStride) + `, n, line, sku, name, qty,
			unit_price, amount FROM sale_lines, k ORDER BY k.i, rowid`,
		days + `INSERT INTO payments SELECT ` + shift + `, flow_no, n, terminal, seq + k.i * ` + fmt.Sprint(yearSeqStride) + `,
			method, amount, reference FROM payments, k WHERE business_date = '` + d0 + `' ORDER BY k.i, flow_no, n`,
		days + `INSERT INTO hq_outbox (kind, terminal, seq, business_date, flow_no)
			SELECT kind, terminal, seq + k.i * ` + fmt.Sprint(yearSeqStride) + `, ` + shift + `, flow_no
			FROM hq_outbox, k WHERE business_date = '` + d0 + `' ORDER BY k.i, id`,
		`CREATE TEMP TABLE moved AS SELECT sku, sum(delta) AS qty FROM stock_flow GROUP BY sku`,
		`UPDATE stock SET qty = (SELECT qty FROM moved WHERE moved.sku = stock.sku)`,
		`INSERT INTO redis_days (business_date, expired_ms, touched)
			SELECT DISTINCT business_date, 0, 0 FROM sales WHERE business_date < '` + keepInRedis + `'`,
		`PRAGMA journal_mode = WAL`,
	} {
		if _, err := db.Exec(q); err != nil {
			b.Fatalf("%v\n%s", err, q)
		}
	}
}

// fileMiB is the size of the files at paths, in MiB.
func fileMiB(paths ...string) float64 {
	var n int64
	for _, p := range paths {
		if fi, err := os.Stat(p); err == nil {
			n += fi.Size()
		}
	}
	return float64(n) / (1 << 20)
}

// rebuildFrom times a full rebuild of Redis from l, Redis emptied first (a replica
// promoted with nothing): the ledger's snapshot of the current state and the gate's
// rebuild with it. It returns the best of runs.
func rebuildFrom(b *testing.B, l *ledger.Ledger, g *gate.Gate, rdb *redis.Client, runs int) time.Duration {
	b.Helper()
	ctx := context.Background()
	best := time.Duration(1 << 62)
	for range runs {
		if err := rdb.FlushAll(ctx).Err(); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		snap, err := l.Snapshot(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := g.Rebuild(ctx, snap); err != nil {
			b.Fatal(err)
		}
		best = min(best, time.Since(start))
	}
	return best
}

// BenchmarkYearLedger: the ledger of a year of a busy store (8,300 two-line sales a day
// from 8 tills, 365 days: 3,029,500 events), made by committing its first day through
// Ledger.Commit and copying that day to the other 364 (SQL), the days before the last 3
// out of Redis as the day sweep leaves them. It reports the ledger's size on disk
// (ledger-MiB), the time of a full rebuild of Redis from it (rebuild-ms: snapshot and
// gate rebuild into an emptied redis-server; the failover pause, goal ≤ 2 s), and, in
// the same run, the rebuild from a ledger holding that one day only (ref-rebuild-ms) and
// a plain SQLite scan of the year's events (scan-ms: what reading history would cost).
// It then archives the days older than 90 (Ledger.Archive, as --keep 90d does) and
// reports that time (archive-s), the ledger's and the archives' sizes after
// (ledger-after-MiB, archives-MiB) and the rebuild time after (rebuild-after-ms); then the
// time of the VACUUM that gives the freed pages back (Ledger.Compact of a quiet store:
// vacuum-s) and the ledger's size after (ledger-compacted-MiB).
// With POSGATE_BENCH_YEAR_V010=1 it also archives, in the same run, a copy of the year
// made before the archive, with the indexes of migration 002 dropped (the archive as a
// ledger made by v0.1.0 had it): v010-archive-s, and its time over this one's (x-v010).
// go test -run '^$' -bench YearLedger -benchtime 1x -timeout 60m ./store-server/
func BenchmarkYearLedger(b *testing.B) {
	st := stack.Run(b, stack.Options{Redis: true})
	rdb := redis.NewClient(&redis.Options{Addr: st.Redis[0].Addr()})
	defer rdb.Close()
	ctx := context.Background()
	g := gate.New(rdb, biStoreID, gate.Options{})
	loc, _ := time.LoadLocation(biTZ)
	now := time.Now().In(loc)
	today := time.Date(now.Year(), now.Month(), now.Day(), 8, 0, 0, 0, loc)
	first := today.AddDate(0, 0, -(yearDays - 1))
	dir := b.TempDir()

	refPath := filepath.Join(dir, "ref", "ledger.db")
	os.MkdirAll(filepath.Dir(refPath), 0o700)
	ref := openStocked(b, refPath, today.Add(12*time.Hour))
	defer ref.Close()
	yearDay(b, ref, today)

	path := filepath.Join(dir, "year", "ledger.db")
	os.MkdirAll(filepath.Dir(path), 0o700)
	l := openStocked(b, path, today.Add(12*time.Hour))
	yearDay(b, l, first)
	l.Close()
	start := time.Now()
	spreadYear(b, path, first, today.AddDate(0, 0, -2).Format(wire.BusinessDate))
	b.Logf("the year spread in %v", time.Since(start).Round(time.Millisecond))
	var v010Path string
	if os.Getenv("POSGATE_BENCH_YEAR_V010") != "" {
		v010Path = filepath.Join(dir, "v010", "ledger.db")
		os.MkdirAll(filepath.Dir(v010Path), 0o700)
		if out, err := exec.Command("cp", path, v010Path).CombinedOutput(); err != nil {
			b.Fatalf("copy the year: %v %s", err, out)
		}
	}

	start = time.Now()
	l, err := ledger.Open(ctx, path, biStoreID, loc)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { l.Close() }()
	l.Now = func() time.Time { return today.Add(12 * time.Hour) }
	openMs := time.Since(start).Seconds() * 1000
	if s, p := must[map[string]int64](b, "stock")(l.Stock(ctx)), must[map[string]int64](b, "proven stock")(l.ProvenStock(ctx)); fmt.Sprint(s) != fmt.Sprint(p) {
		b.Fatal("the year's stock is not its proven stock")
	}
	raw, err := sql.Open("sqlite3", "file:"+path+"?mode=ro")
	if err != nil {
		b.Fatal(err)
	}
	defer raw.Close()
	var events, bytes int64
	start = time.Now()
	if err := raw.QueryRow(`SELECT count(*), sum(length(payload)) FROM events`).Scan(&events, &bytes); err != nil {
		b.Fatal(err)
	}
	scan := time.Since(start)
	if events != yearSales*yearDays {
		b.Fatalf("the year holds %d events, want %d", events, yearSales*yearDays)
	}
	size := fileMiB(path, path+"-wal")

	var rebuild, refRebuild time.Duration
	for b.Loop() {
		rebuild = rebuildFrom(b, l, g, rdb, 5)
		refRebuild = rebuildFrom(b, ref, g, rdb, 5)
	}
	b.Logf("year ledger: %d events, %.0f MiB; rebuild %v (one-day ledger %v), a scan of the events %v, open %.0f ms",
		events, size, rebuild, refRebuild, scan, openMs)

	start = time.Now()
	var acked int64
	if err := raw.QueryRow(`SELECT max(id) FROM hq_outbox`).Scan(&acked); err != nil {
		b.Fatal(err)
	}
	moved, err := l.Archive(ctx, today.AddDate(0, 0, -90).Format(wire.BusinessDate), acked)
	if err != nil {
		b.Fatal(err)
	}
	archiveS := time.Since(start).Seconds()
	var days int
	var archives []string
	for _, a := range moved {
		days += len(a.Days)
		archives = append(archives, a.File)
	}
	if s, p := must[map[string]int64](b, "stock")(l.Stock(ctx)), must[map[string]int64](b, "proven stock")(l.ProvenStock(ctx)); fmt.Sprint(s) != fmt.Sprint(p) {
		b.Fatal("after the archive, stock is not the proven stock")
	}
	after := rebuildFrom(b, l, g, rdb, 5)
	b.Logf("archived %d days into %d files in %.1f s; ledger %.0f MiB, archives %.0f MiB; rebuild after %v",
		days, len(archives), archiveS, fileMiB(path, path+"-wal"), fileMiB(archives...), after)
	archivedMiB := fileMiB(path, path+"-wal")
	start = time.Now()
	c, err := l.Compact(ctx, true) // a quiet store, three quarters of its ledger free
	if err != nil || !c.Vacuumed {
		b.Fatalf("compact: %+v (%v)", c, err)
	}
	vacuumS := time.Since(start).Seconds()
	b.Logf("compacted (VACUUM) in %.1f s: %.0f MiB of pages, %.0f MiB after", vacuumS,
		float64(c.Before)/(1<<20), float64(c.After)/(1<<20))
	b.ReportMetric(vacuumS, "vacuum-s")
	b.ReportMetric(float64(c.After)/(1<<20), "ledger-compacted-MiB")

	b.ReportMetric(float64(events), "events")
	b.ReportMetric(size, "ledger-MiB")
	b.ReportMetric(rebuild.Seconds()*1000, "rebuild-ms")
	b.ReportMetric(refRebuild.Seconds()*1000, "ref-rebuild-ms")
	b.ReportMetric(rebuild.Seconds()/refRebuild.Seconds(), "x-ref")
	b.ReportMetric(scan.Seconds()*1000, "scan-ms")
	b.ReportMetric(openMs, "open-ms")
	b.ReportMetric(archiveS, "archive-s")
	b.ReportMetric(float64(days), "archived-days")
	b.ReportMetric(archivedMiB, "ledger-after-MiB")
	b.ReportMetric(fileMiB(archives...), "archives-MiB")
	b.ReportMetric(after.Seconds()*1000, "rebuild-after-ms")
	if v010Path != "" {
		v010S := archiveV010(b, v010Path, today, acked)
		b.Logf("the same archive on a copy of the year without migration 002's indexes: %.1f s", v010S)
		b.ReportMetric(v010S, "v010-archive-s")
		b.ReportMetric(v010S/archiveS, "x-v010")
	}
	if rebuild > 2*time.Second {
		b.Errorf("a rebuild from the year's ledger took %v, over 2 s", rebuild)
	}
}

// archiveV010 archives the days older than 90 of the ledger at path with the indexes of
// schema/store/002 dropped, as the archive ran on a ledger made by v0.1.0, and returns
// the seconds it took.
func archiveV010(b *testing.B, path string, today time.Time, acked int64) float64 {
	b.Helper()
	ctx := context.Background()
	l, err := ledger.Open(ctx, path, biStoreID, today.Location())
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	l.Now = func() time.Time { return today.Add(12 * time.Hour) }
	raw, err := sql.Open("sqlite3", "file:"+path+"?_busy_timeout=10000")
	if err != nil {
		b.Fatal(err)
	}
	for _, q := range []string{`DROP INDEX events_date`, `DROP INDEX sale_lines_event`} {
		if _, err := raw.Exec(q); err != nil {
			b.Fatal(err)
		}
	}
	raw.Close()
	start := time.Now()
	moved, err := l.Archive(ctx, today.AddDate(0, 0, -90).Format(wire.BusinessDate), acked)
	if err != nil {
		b.Fatal(err)
	}
	took := time.Since(start).Seconds()
	days := 0
	for _, a := range moved {
		days += len(a.Days)
	}
	if days != 274 {
		b.Fatalf("the copy archived %d days, want 274", days)
	}
	return took
}
