package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/posgate/posgate/e2e"
	"github.com/posgate/posgate/hq-sync/hqstore"
	"github.com/posgate/posgate/hq-sync/hqstore/storetest"
	"github.com/posgate/posgate/internal/hqwire"
	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/stack"
)

// Ingest benchmark: ingestStores stores upload at once, each its own batches one after the
// other, ingestRows rows in all per run.
const (
	ingestStores = 8
	ingestRows   = 400_000
	// ingestConns is serve's --db-conns, and the reference's connections: PostgreSQL's
	// cores (POSGATE_BENCH_DB_CONNS=n: n). More COPYs at once into one day's partition
	// than the server has cores cost it CPU per row in contention (docs/benchmarks.md).
	ingestConns = 2
)

// ingestPostgresSettings are the server settings of the benchmark's PostgreSQL, as
// docs/hq-sync.md ("Sizing and settings") advises for HQ: WAL room for an evening's burst
// between checkpoints (the defaults, 1 GB and 5 min, checkpoint within a run and write
// every page touched after it to the WAL whole). POSGATE_BENCH_PG_SETTINGS adds lines of
// its own, separated by ";" ("shared_buffers = '2GB'; wal_buffers = '64MB'").
var ingestPostgresSettings = []string{"max_wal_size = '8GB'", "checkpoint_timeout = '30min'"}

// BenchmarkServeIngest measures HQ's intake on PostgreSQL: the hq-sync serve binary, with
// PostgreSQL on the same two cores, taking signed batches of sales (realistic payloads,
// 10 terminals a store) from 8 stores uploading at once, by batch size; each batch one
// request, checked and stored as in production, serve holding ingestConns connections.
// Its reference in the same run is the bare load of the same rows: a plain COPY of the
// values serve writes, payloads included (one transaction per batch, as many connections
// at once as serve's), into a table of the same key and layout that grows as the day's
// partition does, as pgbench would load it. PostgreSQL runs with ingestPostgresSettings.
// It reports rows/s through serve, the reference's ref-rows/s, their ratio, and the CPU
// time serve and PostgreSQL's processes took per row (serve-cpu-µs/row, pg-cpu-µs/row;
// PostgreSQL's for the reference: ref-pg-cpu-µs/row), which other load on the machine
// does not inflate as much as the wall clock, and the CPU the test process took per row to
// send the uploads (sender-cpu-µs/row: each request signed and sent, the receipt checked,
// and on loopback the kernel's TCP work; ref-sender-cpu-µs/row to drive the COPY): on the
// same cores, which a store's uploader would not take from HQ's machine. The bodies are
// encoded and hashed before the clock and the CPU readings start (encodeUploads), as each
// store's uploader makes its batches on its own machine; so are the reference's rows.
// page-reporting-order says whether the machine hands freed memory back to its hypervisor
// (pageReporting), which slows PostgreSQL's writes on a VM.
//
// With POSGATE_BENCH_BASE_HQSYNC naming another build of hq-sync (an earlier commit's), a
// serve process of that build takes the same uploads (under store ids of its own) on the
// same database in the same run, after each of this build's: base-rows/s,
// base-serve-cpu-µs/row and base-pg-cpu-µs/row, and this build's rows/s over it (x-base).
// go test -run '^$' -bench ServeIngest -benchtime 1x -timeout 30m ./hq-sync/
func BenchmarkServeIngest(b *testing.B) {
	bins := binaries(b)
	settings := slices.Clone(ingestPostgresSettings)
	if extra := os.Getenv("POSGATE_BENCH_PG_SETTINGS"); extra != "" { // "shared_buffers = '2GB'; …"
		for line := range strings.SplitSeq(extra, ";") {
			settings = append(settings, strings.TrimSpace(line))
		}
	}
	st := stack.Run(b, stack.Options{Postgres: true, PostgresSettings: settings})
	ctx := context.Background()
	url := st.PostgresURL()
	dir := b.TempDir()
	var secrets []StoreSecret
	for _, size := range []int{1000, 2500, 5000} {
		for i := range ingestStores {
			for _, st := range []string{ingestStore(size, i), baseStore(ingestStore(size, i))} {
				secrets = append(secrets, StoreSecret{Store: st, Secret: st + "-bench-secret"})
			}
		}
	}
	conns := ingestConns
	if n, err := strconv.Atoi(os.Getenv("POSGATE_BENCH_DB_CONNS")); err == nil && n > 0 {
		conns = n
	}
	reporting, order := pageReporting()
	b.Logf("serve --db-conns %d, PostgreSQL settings %q, free page reporting to the hypervisor %s", conns, settings, reporting)
	storesFile := filepath.Join(dir, "stores.json")
	js, _ := json.Marshal(secrets)
	if err := os.WriteFile(storesFile, js, 0o600); err != nil {
		b.Fatal(err)
	}
	hq, err := e2e.StartServe(ctx, bins.HQSync, e2e.ServeOptions{DB: url, StoresFile: storesFile, Dir: dir,
		Extra: []string{"--db-conns", strconv.Itoa(conns)}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { hq.Kill() })
	var base *e2e.Serve
	if bin := os.Getenv("POSGATE_BENCH_BASE_HQSYNC"); bin != "" {
		if base, err = e2e.StartServe(ctx, bin, e2e.ServeOptions{DB: url, StoresFile: storesFile, Dir: mustMkdir(b, filepath.Join(dir, "base")),
			Extra: []string{"--db-conns", strconv.Itoa(conns)}}); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { base.Kill() })
	}
	pcfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		b.Fatal(err)
	}
	pcfg.MaxConns = int32(conns) // as many COPYs at once as serve's
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	// The reference's table is laid out as serve makes a day of rows: split by the store's
	// hash into 8 tables.
	if _, err := pool.Exec(ctx, `CREATE TABLE ingest_ref (LIKE rows INCLUDING ALL) PARTITION BY HASH (store)`); err != nil {
		b.Fatal(err)
	}
	for k := range 8 {
		if _, err := pool.Exec(ctx, fmt.Sprintf(`CREATE TABLE ingest_ref_h%d PARTITION OF ingest_ref
			FOR VALUES WITH (MODULUS 8, REMAINDER %d)`, k, k)); err != nil {
			b.Fatal(err)
		}
	}
	for _, size := range []int{1000, 2500, 5000} {
		// run numbers the passes at this size across the sub-benchmark's runs (-count): each
		// pass's rows and batch ids are new.
		run := 0
		b.Run(fmt.Sprintf("batch=%d", size), func(b *testing.B) {
			var serveS, refS, serveCPU, pgCPU, refCPU float64
			var baseS, baseCPU, basePgCPU, genCPU, refGenCPU float64
			rows := 0
			for ; b.Loop(); run++ {
				uploads := buildUploads(b, size, run)
				r0, rg0 := postgresCPU(st.Postgres.Pid()), procCPU(os.Getpid())
				refS += loadReference(b, pool, uploads)
				refCPU += postgresCPU(st.Postgres.Pid()) - r0
				refGenCPU += procCPU(os.Getpid()) - rg0
				reqs := encodeUploads(b, uploads, run)
				s0, p0, g0 := procCPU(hq.Pid()), postgresCPU(st.Postgres.Pid()), procCPU(os.Getpid())
				var waits *waitSampler // POSGATE_BENCH_WAITS=1: where the first run's time goes
				if waitsWanted() && run == 0 {
					waits = startWaitSampler(b, url)
				}
				start := time.Now()
				sendUploads(b, hq.BatchesURL(), reqs)
				serveS += time.Since(start).Seconds()
				serveCPU += procCPU(hq.Pid()) - s0
				pgCPU += postgresCPU(st.Postgres.Pid()) - p0
				genCPU += procCPU(os.Getpid()) - g0
				rows += ingestRows
				if waits != nil {
					waits.end(b)
				}
				if base != nil {
					reqs := encodeUploads(b, rebuiltFor(b, uploads), run)
					s0, p0 := procCPU(base.Pid()), postgresCPU(st.Postgres.Pid())
					start := time.Now()
					sendUploads(b, base.BatchesURL(), reqs)
					baseS += time.Since(start).Seconds()
					baseCPU += procCPU(base.Pid()) - s0
					basePgCPU += postgresCPU(st.Postgres.Pid()) - p0
				}
			}
			if base != nil {
				b.ReportMetric(float64(rows)/baseS, "base-rows/s")
				b.ReportMetric(baseS/serveS, "x-base")
				b.ReportMetric(baseCPU/float64(rows)*1e6, "base-serve-cpu-µs/row")
				b.ReportMetric(basePgCPU/float64(rows)*1e6, "base-pg-cpu-µs/row")
			}
			b.ReportMetric(float64(rows)/serveS, "rows/s")
			b.ReportMetric(float64(order), "page-reporting-order") // pageReporting's: -1 none, above 10 off
			b.ReportMetric(float64(rows)/refS, "ref-rows/s")
			b.ReportMetric(refS/serveS, "x-ref")
			b.ReportMetric(serveCPU/float64(rows)*1e6, "serve-cpu-µs/row")
			b.ReportMetric(pgCPU/float64(rows)*1e6, "pg-cpu-µs/row")
			b.ReportMetric(refCPU/float64(rows)*1e6, "ref-pg-cpu-µs/row")
			b.ReportMetric(genCPU/float64(rows)*1e6, "sender-cpu-µs/row")
			b.ReportMetric(refGenCPU/float64(rows)*1e6, "ref-sender-cpu-µs/row")
		})
	}
}

// pageReporting says whether this machine's kernel hands the memory it frees back to its
// hypervisor (virtio-balloon free page reporting, in blocks of 2^order pages), and its
// order (-1: not in this kernel): where it does, every page the page cache takes afresh
// faults in the host, and PostgreSQL's writes cost it 1.6-3.9 µs of CPU a row more
// (docs/benchmarks.md). An order above the kernel's largest (10 on x86-64) reports no block.
func pageReporting() (string, int) {
	b, err := os.ReadFile("/sys/module/page_reporting/parameters/page_reporting_order")
	if err != nil {
		return "not in this kernel", -1
	}
	order, err := strconv.Atoi(strings.TrimSpace(string(b)))
	switch {
	case err != nil:
		return fmt.Sprintf("unknown (page_reporting_order %q)", strings.TrimSpace(string(b))), -1
	case order > 10:
		return fmt.Sprintf("off (page_reporting_order %d)", order), order
	}
	return fmt.Sprintf("on (page_reporting_order %d)", order), order
}

func ingestStore(size, i int) string { return fmt.Sprintf("B%d-S%02d", size, i) }

// baseStore is the id under which the base build's serve takes store's uploads.
func baseStore(store string) string { return "O" + store }

// rebuiltFor returns the uploads again as the base build's stores' (baseStore): the same
// rows made again under those ids, with their own hashes.
func rebuiltFor(tb testing.TB, uploads []*storeUpload) []*storeUpload {
	out := make([]*storeUpload, len(uploads))
	var wg sync.WaitGroup
	for i, u := range uploads {
		wg.Go(func() {
			o := &storeUpload{store: baseStore(u.store), secret: []byte(baseStore(u.store) + "-bench-secret")}
			for _, bt := range u.batches {
				rows := make([]hqwire.Row, len(bt.Rows))
				for k, r := range bt.Rows {
					rows[k] = storetest.Sale(o.store, r.Terminal, r.Seq, r.BusinessDate, r.At, r.Amount, onlyMethod(r.ByMethod))
				}
				o.batches = append(o.batches, &hqwire.Batch{V: hqwire.Version, Store: o.store, SentAt: bt.SentAt, Rows: rows})
			}
			out[i] = o
		})
	}
	wg.Wait()
	return out
}

// onlyMethod is the one method of a sale paid one way.
func onlyMethod(by map[string]money.Fen) string {
	for m := range by {
		return m
	}
	return ""
}

// storeUpload is one store's batches of a run, and the same rows as the reference loads them.
type storeUpload struct {
	store   string
	secret  []byte
	batches []*hqwire.Batch
}

// buildUploads builds each store's batches of size rows for run: 10 terminals' sales of
// one day, each run's after the last run's.
func buildUploads(tb testing.TB, size, run int) []*storeUpload {
	per := ingestRows / ingestStores
	out := make([]*storeUpload, ingestStores)
	var wg sync.WaitGroup
	for i := range out {
		wg.Go(func() {
			u := &storeUpload{store: ingestStore(size, i), secret: []byte(ingestStore(size, i) + "-bench-secret")}
			var rows []hqwire.Row
			for t := range 10 {
				rows = append(rows, storetest.Sales(u.store, fmt.Sprintf("T%d", t), int64(1+run*per/10), per/10,
					storetest.D1, storetest.T0)...)
			}
			for k := 0; k < len(rows); k += size {
				u.batches = append(u.batches, &hqwire.Batch{V: hqwire.Version, Store: u.store, SentAt: storetest.T0,
					Rows: rows[k:min(k+size, len(rows))]})
			}
			out[i] = u
		})
	}
	wg.Wait()
	return out
}

// uploadReq is one batch of a store as its uploader sends it: the body encoded, its hash
// taken.
type uploadReq struct {
	s    *simStore
	b    simBatch
	rows int
}

// encodeUploads encodes and hashes every store's batches under batch ids of run, as a
// store's uploader does on its own machine: the benchmark calls it before its clock and
// its CPU readings start, and each store's bodies are encoded at once (as the stores would
// each on their own machine), so that neither serve's time nor the sender's CPU counts it.
func encodeUploads(tb testing.TB, uploads []*storeUpload, run int) [][]uploadReq {
	reqs := make([][]uploadReq, len(uploads))
	var wg sync.WaitGroup
	for i, u := range uploads {
		wg.Go(func() {
			s := &simStore{id: u.store, secret: u.secret}
			for k, bt := range u.batches {
				bt.ID = fmt.Sprintf("%s-r%d-%06d", u.store, run, k)
				body, err := json.Marshal(bt)
				if err != nil {
					tb.Error(err)
					return
				}
				reqs[i] = append(reqs[i], uploadReq{s, newSimBatch(bt.ID, body), len(bt.Rows)})
			}
		})
	}
	wg.Wait()
	if tb.Failed() {
		tb.FailNow()
	}
	return reqs
}

// sendUploads sends every store's batches (encodeUploads), each store's one after the
// other, the stores at once, each request signed with its time, and checks that every row
// was new.
func sendUploads(tb testing.TB, url string, reqs [][]uploadReq) {
	ctx := context.Background()
	var wg sync.WaitGroup
	for i := range reqs {
		wg.Go(func() {
			for _, r := range reqs[i] {
				a := r.s.send(ctx, url, r.b)
				if a.err != nil || a.rc.New != r.rows {
					tb.Errorf("%s: %v %+v", r.b.id, a.err, a.rc)
					return
				}
			}
		})
	}
	wg.Wait()
	if tb.Failed() {
		tb.FailNow()
	}
}

// loadReference COPYs the uploads' rows into ingest_ref as serve writes them (the same
// columns and values), a batch per transaction, a connection per store, and returns the
// seconds it took.
func loadReference(tb testing.TB, pool *pgxpool.Pool, uploads []*storeUpload) float64 {
	cols := []string{"store", "terminal", "seq", "kind", "business_date", "flow_no", "at", "hash", "amount", "cash",
		"card", "qr", "methods", "payload", "batch_id", "received_ms"}
	vals := make([][][][]any, len(uploads))
	for i, u := range uploads {
		for _, bt := range u.batches {
			var vs [][]any
			for _, r := range bt.Rows {
				m, _ := hqstore.Split(r.ByMethod)
				vs = append(vs, []any{u.store, r.Terminal, r.Seq, r.Kind, r.BusinessDate, r.FlowNo,
					r.At.UTC().Format(time.RFC3339Nano), r.Hash, int64(r.Amount), m.Cash, m.Card, m.QR, m.Mask, []byte(r.Payload),
					"ref", time.Now().UnixMilli()})
			}
			vals[i] = append(vals[i], vs)
		}
	}
	ctx := context.Background()
	start := time.Now()
	var wg sync.WaitGroup
	for i := range vals {
		wg.Go(func() {
			for _, vs := range vals[i] {
				if _, err := pool.CopyFrom(ctx, pgx.Identifier{"ingest_ref"}, cols, pgx.CopyFromRows(vs)); err != nil {
					tb.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if tb.Failed() {
		tb.FailNow()
	}
	return time.Since(start).Seconds()
}

// procCPU returns the CPU seconds (user and system) process pid has used, 0 if unknown.
func procCPU(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The fields after the command's closing parenthesis: utime and stime are 14th and 15th
	// of the line, the 12th and 13th after it.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	k, _ := strconv.ParseFloat(f[12], 64)
	return (u + k) / 100 // clock ticks: USER_HZ is 100 on Linux
}

// postgresCPU returns the CPU seconds the postmaster pid and its children have used: those
// that ended (the postmaster's cutime and cstime) and those alive.
func postgresCPU(pid int) float64 {
	total := procCPU(pid)
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		s := string(b)
		if f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:]); len(f) > 14 {
			cu, _ := strconv.ParseFloat(f[13], 64)
			cs, _ := strconv.ParseFloat(f[14], 64)
			total += (cu + cs) / 100
		}
	}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", child))
		if err != nil {
			continue
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			total += procCPU(child)
		}
	}
	return total
}

func mustMkdir(tb testing.TB, dir string) string {
	tb.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		tb.Fatal(err)
	}
	return dir
}
