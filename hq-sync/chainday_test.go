package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/posgate/posgate/e2e"
	"github.com/posgate/posgate/hq-sync/hqstore/postgres"
	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/stack"
	"github.com/posgate/posgate/internal/wire"
)

// chainDay is a business day of a chain as HQ holds it once every store has uploaded:
// Stores stores of Terminals terminals selling PerTerminal sales each (a third each by
// cash, card and qr), every terminal's day close and every store's declaration listing
// its sales. It is written straight into HQ's PostgreSQL tables with COPY, the fast way to
// fill a day of millions of rows for what reads them (reconcile); PutBatch is what writes
// them in production and has tests and benchmarks of its own.
type chainDay struct {
	Date                           string
	Stores, Terminals, PerTerminal int
}

func (d chainDay) store(i int) string     { return fmt.Sprintf("S%05d", i) }
func (d chainDay) terminal(t int) string  { return fmt.Sprintf("T%02d", t) }
func (d chainDay) amount(seq int64) int64 { return 100 + seq*37%9900 }
func (d chainDay) method(seq int64) int   { return int(seq % 3) }
func (d chainDay) txns() int              { return d.Stores * d.Terminals * d.PerTerminal }
func (d chainDay) storeRange(part, of int) (int, int) {
	return d.Stores * part / of, d.Stores * (part + 1) / of
}

// load writes the day into the database at url through conns connections at once.
func (d chainDay) load(tb testing.TB, url string, conns int) {
	tb.Helper()
	ctx := context.Background()
	st, err := postgres.Open(ctx, url)
	if err != nil {
		tb.Fatal(err)
	}
	err = st.PrepareDays(ctx, d.Date, d.Date)
	st.Close()
	if err != nil {
		tb.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		tb.Fatal(err)
	}
	defer pool.Close()
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	for part := range conns {
		wg.Go(func() {
			lo, hi := d.storeRange(part, conns)
			errs <- d.copy(ctx, pool, lo, hi)
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			tb.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, `ANALYZE rows; ANALYZE day_txns; ANALYZE days`); err != nil {
		tb.Fatal(err)
	}
	tb.Logf("chain day %s: %d stores, %d transactions loaded in %v", d.Date, d.Stores, d.txns(),
		time.Since(start).Round(time.Millisecond))
}

// copy writes the stores lo..hi-1: their rows, declared transactions and declarations.
func (d chainDay) copy(ctx context.Context, pool *pgxpool.Pool, lo, hi int) error {
	received := time.Date(2025, 3, 2, 1, 0, 0, 0, time.UTC).UnixMilli()
	at := "2025-03-01T10:00:00Z"
	methods := [3]int64{1, 2, 4}
	// rows: each store's terminals' sales, then their day closes
	s, t, k := lo, 0, int64(0)
	rows := pgx.CopyFromFunc(func() ([]any, error) {
		if s >= hi {
			return nil, nil
		}
		store, term := d.store(s), d.terminal(t)
		var vals []any
		if k < int64(d.PerTerminal) {
			seq := k + 1
			var by [3]int64
			by[d.method(seq)] = d.amount(seq)
			vals = []any{store, term, seq, "sale", d.Date, seq, at, "h", d.amount(seq), by[0], by[1], by[2],
				methods[d.method(seq)], nil, "load", received}
			k++
		} else {
			vals = []any{store, term, int64(d.PerTerminal + 1), "day_close", d.Date, int64(0), at, "h", int64(0),
				int64(0), int64(0), int64(0), int64(0), d.closePayload(), "load", received}
			k = 0
			if t++; t == d.Terminals {
				t, s = 0, s+1
			}
		}
		return vals, nil
	})
	if _, err := pool.CopyFrom(ctx, pgx.Identifier{"rows"}, []string{"store", "terminal", "seq", "kind",
		"business_date", "flow_no", "at", "hash", "amount", "cash", "card", "qr", "methods", "payload", "batch_id",
		"received_ms"}, rows); err != nil {
		return fmt.Errorf("copy rows: %w", err)
	}
	s, t, k = lo, 0, 0
	i := 0
	txns := pgx.CopyFromFunc(func() ([]any, error) {
		if s >= hi {
			return nil, nil
		}
		seq := k + 1
		var by [3]int64
		by[d.method(seq)] = d.amount(seq)
		vals := []any{d.Date, d.store(s), int32(i), d.terminal(t), seq, "sale", seq, d.amount(seq), by[0], by[1], by[2],
			methods[d.method(seq)]}
		i++
		if k++; k == int64(d.PerTerminal) {
			k = 0
			if t++; t == d.Terminals {
				t, s, i = 0, s+1, 0
			}
		}
		return vals, nil
	})
	if _, err := pool.CopyFrom(ctx, pgx.Identifier{"day_txns"}, []string{"business_date", "store", "i", "terminal",
		"seq", "kind", "flow_no", "amount", "cash", "card", "qr", "methods"}, txns); err != nil {
		return fmt.Errorf("copy declared transactions: %w", err)
	}
	s = lo
	days := pgx.CopyFromFunc(func() ([]any, error) {
		if s >= hi {
			return nil, nil
		}
		s++
		return []any{d.store(s - 1), d.Date, int64(1), "2025-03-01T23:00:00Z", "load", received + 1000, received + 1000}, nil
	})
	if _, err := pool.CopyFrom(ctx, pgx.Identifier{"days"}, []string{"store", "business_date", "revision",
		"closed_at", "batch_id", "received_ms", "first_ms"}, days); err != nil {
		return fmt.Errorf("copy declarations: %w", err)
	}
	return nil
}

// closePayload is a terminal's day close of its PerTerminal sales.
func (d chainDay) closePayload() []byte {
	p := wire.DayClosePayload{BusinessDate: d.Date, Methods: []wire.MethodTotal{}}
	per := [3]wire.MethodTotal{{Method: wire.MethodCash}, {Method: wire.MethodCard}, {Method: wire.MethodQR}}
	for seq := int64(1); seq <= int64(d.PerTerminal); seq++ {
		a := money.Fen(d.amount(seq))
		p.SaleCount++
		p.SaleAmount += a
		per[d.method(seq)].SaleCount++
		per[d.method(seq)].SaleAmount += a
	}
	for _, m := range per {
		if m.SaleCount > 0 {
			p.Methods = append(p.Methods, m)
		}
	}
	js, err := json.Marshal(p)
	if err != nil {
		panic(err)
	}
	return js
}

// openPool opens a pool on the database at url, closed when tb ends.
func openPool(tb testing.TB, url string) *pgxpool.Pool {
	tb.Helper()
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(pool.Close)
	return pool
}

var (
	buildOnce sync.Once
	built     e2e.Binaries
	buildErr  error
)

// binaries builds posgate's binaries once per test process (without the race detector:
// what they measure is their own).
func binaries(tb testing.TB) e2e.Binaries {
	tb.Helper()
	stack.SkipShort(tb)
	buildOnce.Do(func() {
		root, err := e2e.ModuleRoot()
		if err != nil {
			buildErr = err
			return
		}
		dir, err := os.MkdirTemp("", "posgate-bin-")
		if err != nil {
			buildErr = err
			return
		}
		built, buildErr = e2e.Build(context.Background(), root, dir, false)
	})
	if buildErr != nil {
		tb.Fatal(buildErr)
	}
	return built
}

// reconciled is one run of the hq-sync binary's reconcile.
type reconciled struct {
	exit    int
	took    time.Duration
	maxRSS  int64 // bytes
	stdout  string
	stderr  string
	summary string // the last line on stderr (with --progress)
}

// runReconcile runs "hq-sync reconcile" of date on the database at url, as a process of its
// own, and measures its time and its peak resident memory.
func runReconcile(tb testing.TB, bin, url, date string, extra ...string) reconciled {
	tb.Helper()
	dir := tb.TempDir()
	stdout, stderr := filepath.Join(dir, "out"), filepath.Join(dir, "err")
	fo, _ := os.Create(stdout)
	fe, _ := os.Create(stderr)
	cmd := exec.Command(bin, append([]string{"reconcile", "--db", url, "--date", date, "--format", "json"}, extra...)...)
	cmd.Stdout, cmd.Stderr = fo, fe
	start := time.Now()
	err := cmd.Run()
	took := time.Since(start)
	fo.Close()
	fe.Close()
	r := reconciled{took: took}
	if ee, ok := err.(*exec.ExitError); ok {
		r.exit = ee.ExitCode()
	} else if err != nil {
		tb.Fatal(err)
	}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		r.maxRSS = ru.Maxrss * 1024 // kilobytes on Linux
	}
	out, _ := os.ReadFile(stdout)
	errb, _ := os.ReadFile(stderr)
	r.stdout, r.stderr = string(out), string(errb)
	lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
	r.summary = lines[len(lines)-1]
	return r
}
