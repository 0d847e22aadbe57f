package main

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/posgate/posgate/hq-sync/hqstore/postgres"
)

// waitSampler looks, every 10 ms while serve takes a run's uploads, at what serve's
// PostgreSQL connections (application_name postgres.AppName) are doing, and at how busy
// the machine's CPUs are: where a batch's time goes when neither serve nor PostgreSQL
// keeps the cores busy. Set POSGATE_BENCH_WAITS=1 to run it in BenchmarkServeIngest (its
// queries cost PostgreSQL a little CPU, which pg-cpu-µs/row then includes).
type waitSampler struct {
	stop, done chan struct{}
	states     map[string]int // backend samples by state (see state)
	samples    int            // backend samples in all
	cpu0, cpu1 [2]float64     // /proc/stat busy and total jiffies at start and end
}

// waitsWanted reports whether POSGATE_BENCH_WAITS asks for the sampler.
func waitsWanted() bool { v, _ := strconv.ParseBool(os.Getenv("POSGATE_BENCH_WAITS")); return v }

func startWaitSampler(tb testing.TB, url string) *waitSampler {
	tb.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		tb.Fatal(err)
	}
	w := &waitSampler{stop: make(chan struct{}), done: make(chan struct{}), states: map[string]int{}, cpu0: machineCPU()}
	go func() {
		defer close(w.done)
		defer c.Close(ctx)
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-w.stop:
				return
			case <-t.C:
			}
			rows, err := c.Query(ctx, `SELECT state, coalesce(wait_event_type, ''), coalesce(wait_event, '')
				FROM pg_stat_activity WHERE application_name = $1`, postgres.AppName)
			if err != nil {
				continue
			}
			var st, typ, ev string
			_, err = pgx.ForEachRow(rows, []any{&st, &typ, &ev}, func() error {
				w.states[state(st, typ, ev)]++
				w.samples++
				return nil
			})
			if err != nil {
				continue
			}
		}
	}()
	return w
}

// state names what a backend was doing: "working" (running, no wait: on a CPU, or waiting
// for one), "serve" (waiting for serve: inside a transaction between statements, or for
// the next COPY data), "idle" (no transaction: no batch to store), or the wait's type and
// event (a lock, the WAL's flush, I/O).
func state(st, typ, ev string) string {
	switch {
	case st == "idle":
		return "idle"
	case st == "idle in transaction" || (typ == "Client" && ev == "ClientRead"):
		return "serve"
	case typ == "":
		return "working"
	default:
		return typ + ":" + ev
	}
}

// end stops the sampler and reports its shares as metrics of b: pg-working%, pg-serve%,
// pg-idle% and pg-other% of the backends' samples, machine-busy% of the CPUs' time, and
// the other waits in the log.
func (w *waitSampler) end(b *testing.B) {
	close(w.stop)
	<-w.done
	w.cpu1 = machineCPU()
	if w.samples == 0 {
		b.Log("waits: no sample of serve's connections")
		return
	}
	pct := func(n int) float64 { return 100 * float64(n) / float64(w.samples) }
	other := w.samples - w.states["working"] - w.states["serve"] - w.states["idle"]
	b.ReportMetric(pct(w.states["working"]), "pg-working%")
	b.ReportMetric(pct(w.states["serve"]), "pg-serve%")
	b.ReportMetric(pct(w.states["idle"]), "pg-idle%")
	b.ReportMetric(pct(other), "pg-other%")
	if total := w.cpu1[1] - w.cpu0[1]; total > 0 {
		b.ReportMetric(100*(w.cpu1[0]-w.cpu0[0])/total, "machine-busy%")
	}
	var lines []string
	for s, n := range w.states {
		lines = append(lines, fmt.Sprintf("%s %.1f%%", s, pct(n)))
	}
	sort.Strings(lines)
	b.Logf("waits of serve's connections (%d samples): %s", w.samples, strings.Join(lines, ", "))
}

// machineCPU returns the jiffies the machine's CPUs were busy (all but idle and iowait)
// and in all, from /proc/stat.
func machineCPU() [2]float64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return [2]float64{}
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	var busy, total float64
	for i, s := range f[1:] {
		v, _ := strconv.ParseFloat(s, 64)
		if i >= 8 { // guest time is counted in user already
			break
		}
		total += v
		if i != 3 && i != 4 { // idle, iowait
			busy += v
		}
	}
	return [2]float64{busy, total}
}
