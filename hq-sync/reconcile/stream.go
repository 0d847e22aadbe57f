package reconcile

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/posgate/posgate/hq-sync/hqstore"
)

// Options tune RunWith. The zero value reconciles every store, one at a time, silently.
type Options struct {
	// Store limits the reconciliation to one store ("" for every store).
	Store string
	// Expect names the stores HQ expects a declaration of every day from (its stores file):
	// one HQ holds nothing of for the date is reported NoStoreDay instead of left out, so
	// that a store whose upload is stuck does not pass for reconciled.
	Expect []string
	// Workers is how many stores are read and compared at once (default 1). The report is
	// the same whatever their number.
	Workers int
	// Progress, if not nil, gets a line at most every ProgressEvery: the stores done, the
	// transactions compared, the time taken and the time left.
	Progress io.Writer
	// ProgressEvery spaces the progress lines (default 1 s).
	ProgressEvery time.Duration
}

// Run reconciles a business date of one store (or of every store when store is "") from
// what st holds: RunWith with Options{Store: store, Expect: expect}.
func Run(ctx context.Context, st hqstore.Storage, date, store string, expect ...string) (Report, error) {
	return RunWith(ctx, st, date, Options{Store: store, Expect: expect})
}

// RunWith reconciles a business date, store by store: the stores HQ holds rows or a
// declaration of on the date (hqstore.Storage.DateStores) and those of o.Expect, in byte
// order, each read (its declaration, its rows, its declaration again) and compared on its
// own, o.Workers at a time. Only the differences of the stores compared stay in memory, so
// a chain's day of ten million transactions takes what one store's day takes. The report
// is the one a comparison of the whole day at once would give: the stores come in order,
// and each store's entries are sorted as the report's are. It then reads the date's
// exceptions into the report.
func RunWith(ctx context.Context, st hqstore.Storage, date string, o Options) (Report, error) {
	stores, err := storesOf(ctx, st, date, o)
	if err != nil {
		return Report{}, fmt.Errorf("reconcile %s: %w", date, err)
	}
	r := Report{Date: date, Store: o.Store, Txns: []TxnDiff{}, Totals: []TotalsDiff{},
		Missing: []MissingDeclaration{}, Counts: map[string]int{}, Exceptions: []StoreException{}}
	workers := max(o.Workers, 1)
	type result struct {
		rep Report
		err error
	}
	// A window of stores in flight, merged in order: at most 2×workers results wait.
	pending := make([]chan result, 0, len(stores))
	merged := 0
	prog := newProgress(o, date, len(stores))
	sem := make(chan struct{}, workers)
	merge := func() error {
		res := <-pending[merged]
		merged++
		if res.err != nil {
			return res.err
		}
		r.add(&res.rep)
		prog.note(merged, r.HQTxns+r.LedgerTxns)
		return nil
	}
	for _, name := range stores {
		for len(pending)-merged >= 2*workers {
			if err := merge(); err != nil {
				return Report{}, err
			}
		}
		ch := make(chan result, 1)
		pending = append(pending, ch)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			rep, err := reconcileStore(ctx, st, date, name, slices.Contains(o.Expect, name))
			ch <- result{rep, err}
		}()
	}
	for merged < len(pending) {
		if err := merge(); err != nil {
			return Report{}, err
		}
	}
	prog.done(r.HQTxns + r.LedgerTxns)
	xs, err := dateExceptions(ctx, st, date, o.Store)
	if err != nil {
		return Report{}, fmt.Errorf("reconcile %s: %w", date, err)
	}
	r.Exceptions = xs
	return r, nil
}

// storesOf returns the stores to reconcile, in byte order.
func storesOf(ctx context.Context, st hqstore.Storage, date string, o Options) ([]string, error) {
	held, err := st.DateStores(ctx, date)
	if err != nil {
		return nil, err
	}
	all := slices.Concat(held, o.Expect)
	if o.Store != "" {
		all = slices.DeleteFunc(all, func(s string) bool { return s != o.Store })
	}
	slices.Sort(all)
	return slices.Compact(all), nil
}

// reconcileStore reconciles one store's day. Rows and days are two reads. A declaration stored
// between them (a late row and the revision that lists it, while the store uploads) would
// be compared with the rows from before it, and the row reported missing at HQ. A
// declaration's rows are stored before it and declarations only ever rise, so days read
// before and after the rows, and alike, make a consistent pair; while they differ, the
// reads are taken again.
func reconcileStore(ctx context.Context, st hqstore.Storage, date, store string, expected bool) (Report, error) {
	const attempts = 5
	var expect []string
	if expected {
		expect = []string{store}
	}
	for attempt := 1; ; attempt++ {
		before, err := st.Days(ctx, date, store)
		if err != nil {
			return Report{}, fmt.Errorf("reconcile %s: %w", date, err)
		}
		rows, err := st.Rows(ctx, date, store)
		if err != nil {
			return Report{}, fmt.Errorf("reconcile %s: %w", date, err)
		}
		days, err := st.Days(ctx, date, store)
		if err != nil {
			return Report{}, fmt.Errorf("reconcile %s: %w", date, err)
		}
		if err := ctx.Err(); err != nil {
			return Report{}, err
		}
		if sameDeclarations(before, days) || attempt == attempts {
			return reconcile(date, store, rows, days, expect...), nil
		}
	}
}

// add merges the report of one store, of a store after those r holds, into r.
func (r *Report) add(s *Report) {
	r.Stores += s.Stores
	r.Terminals += s.Terminals
	r.HQTxns += s.HQTxns
	r.LedgerTxns += s.LedgerTxns
	r.DayCloses += s.DayCloses
	r.Txns = append(r.Txns, s.Txns...)
	r.Totals = append(r.Totals, s.Totals...)
	r.Missing = append(r.Missing, s.Missing...)
	for k, n := range s.Counts {
		if n != 0 {
			r.Counts[k] += n
		}
	}
	if _, ok := r.Counts[KindTotals]; !ok {
		r.Counts[KindTotals] = 0
	}
}

// progress writes RunWith's progress lines.
type progress struct {
	w           io.Writer
	date        string
	stores      int
	every       time.Duration
	start, last time.Time
}

func newProgress(o Options, date string, stores int) *progress {
	every := o.ProgressEvery
	if every <= 0 {
		every = time.Second
	}
	now := time.Now()
	return &progress{w: o.Progress, date: date, stores: stores, every: every, start: now, last: now}
}

// note writes a line if one is due: done stores of the date compared, txns transactions.
func (p *progress) note(done, txns int) {
	if p.w == nil || time.Since(p.last) < p.every {
		return
	}
	p.last = time.Now()
	took := time.Since(p.start)
	left := time.Duration(float64(took) / float64(done) * float64(p.stores-done))
	fmt.Fprintf(p.w, "reconcile %s: %d/%d stores, %d transactions compared, %v, about %v left\n",
		p.date, done, p.stores, txns, took.Round(100*time.Millisecond), left.Round(time.Second))
}

func (p *progress) done(txns int) {
	if p.w == nil {
		return
	}
	fmt.Fprintf(p.w, "reconcile %s: %d stores, %d transactions compared in %v\n",
		p.date, p.stores, txns, time.Since(p.start).Round(100*time.Millisecond))
}
