package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/posgate/posgate/hq-sync/hqstore"
	"github.com/posgate/posgate/hq-sync/hqview"
	"github.com/posgate/posgate/hq-sync/reconcile"
	"github.com/posgate/posgate/internal/wire"
)

// errDiffers is reconcile's verdict that the day does not reconcile (or, with --open, that
// open exceptions remain): exit status 1, the report having said how.
var errDiffers = errors.New("the day does not reconcile")

// errOpenFlags refuses the flags --open does not take.
var errOpenFlags = usageError{errors.New("--open lists every date's open exceptions: no --date, no --stores, --format table or json")}

// Reconcile is the reconcile command: at HQ, a business date reconciled transaction by
// transaction, or the open exceptions listed.
type Reconcile struct {
	DB     string
	Stores string
	Date   string
	Store  string
	Format string
	Open   bool
	HTML   string
	Lang   string
	// Workers is how many stores are read and compared at once.
	Workers int
	// Progress prints the stores done, the transactions compared and the time left on
	// stderr as it goes.
	Progress bool

	stdout, stderr io.Writer
	expect         []string // the stores of Stores, read by Validate
}

func newReconcile(stdout, stderr io.Writer) *Reconcile {
	return &Reconcile{stdout: stdout, stderr: stderr}
}

// ParseFlags reads the flags, falling back to POSGATE_* environment variables, then
// defaults, and validates them.
func (c *Reconcile) ParseFlags(args []string) error {
	fs := newFlags("reconcile", "reconcile a business date: terminal totals vs store ledger vs HQ rows, by transaction; exit 0 if it reconciles, 1 if not", c.stderr)
	fs.String(&c.DB, "db", "POSGATE_HQ_DB", "./hq.db", "a SQLite path, or a postgres:// URL")
	fs.String(&c.Stores, "stores", "POSGATE_HQ_STORES", "", "serve's stores file: each store in it HQ holds nothing of for the date is no_store_day (default: only stores with rows or a declaration)")
	fs.StringVar(&c.Date, "date", "", "the business date, YYYY-MM-DD (default: yesterday, local time)")
	fs.StringVar(&c.Store, "store", "", "one store (default: every store)")
	fs.StringVar(&c.Format, "format", "table", "table, json or csv")
	fs.StringVar(&c.HTML, "html", "", "also write the report, with the stores' days, upload lag and open exceptions, as one self-contained HTML file (for the morning email)")
	fs.String(&c.Lang, "lang", "POSGATE_LANG", "en", "the HTML report's language: en or zh-CN")
	fs.IntVar(&c.Workers, "workers", 2, "stores read and compared at once (the report is the same whatever their number)")
	fs.BoolVar(&c.Progress, "progress", false, "print progress on stderr: stores done, transactions compared, time left")
	fs.BoolVar(&c.Open, "open", false, "instead, list the exceptions no store manager has resolved, of every business date (table or json); exit 0 if there are none, 1 if there are")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := dbPasswordGiven(fs, c.DB); err != nil {
		return err
	}
	if c.Open {
		// --stores may come from POSGATE_HQ_STORES, which serve and reconcile share: only a
		// flag given here conflicts.
		if fs.Given("date") || fs.Given("stores") {
			return errOpenFlags
		}
		c.Stores = ""
	}
	if c.Date == "" {
		c.Date = time.Now().AddDate(0, 0, -1).Format(wire.BusinessDate)
	}
	return c.Validate()
}

// Validate checks the settings, and reads the stores of Stores for Run.
func (c *Reconcile) Validate() error {
	if c.Open && c.Format != "table" && c.Format != "json" {
		return errOpenFlags
	}
	if _, err := time.Parse(wire.BusinessDate, c.Date); err != nil {
		return usageError{fmt.Errorf("--date %q is not YYYY-MM-DD", c.Date)}
	}
	if !slices.Contains(hqview.Languages, c.Lang) {
		return usageError{fmt.Errorf("--lang %q: want one of %s", c.Lang, strings.Join(hqview.Languages, ", "))}
	}
	if c.Open && c.HTML != "" {
		return usageError{errors.New("--html writes a date's report: not with --open")}
	}
	if c.Workers < 1 || c.Workers > 64 {
		return usageError{fmt.Errorf("--workers %d: want 1 to 64", c.Workers)}
	}
	if c.Format != "table" && c.Format != "json" && c.Format != "csv" {
		return usageError{fmt.Errorf("--format %q: want table, json or csv", c.Format)}
	}
	if c.Stores != "" {
		secrets, err := loadSecrets(c.Stores)
		if err != nil {
			return usageError{err}
		}
		c.expect = slices.Sorted(maps.Keys(secrets))
	}
	if !strings.Contains(c.DB, "://") {
		// Opening creates a missing SQLite file: a mistyped path would reconcile an empty
		// HQ as OK.
		if _, err := os.Stat(strings.TrimPrefix(c.DB, "sqlite:")); err != nil {
			return usageError{fmt.Errorf("--db %s: %w", c.DB, err)}
		}
	}
	return nil
}

// Run writes the date's report (or, with --open, the open exceptions) and returns
// errDiffers unless the date reconciles (or no exception is open).
func (c *Reconcile) Run(ctx context.Context) error {
	st, err := openStorage(ctx, c.DB)
	if err != nil {
		return err
	}
	defer st.Close()
	var ok bool
	if c.Open {
		ok, err = c.listOpen(ctx, st)
	} else {
		ok, err = c.report(ctx, st)
	}
	if err == nil && !ok {
		return errDiffers
	}
	return err
}

// listOpen writes the open exceptions; it reports whether there are none.
func (c *Reconcile) listOpen(ctx context.Context, st hqstore.Storage) (bool, error) {
	list, err := reconcile.RunOpen(ctx, st, c.Store)
	if err != nil {
		return false, err
	}
	if c.Format == "json" {
		enc := json.NewEncoder(c.stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(list)
	} else {
		err = list.WriteTable(c.stdout)
	}
	return len(list.Exceptions) == 0, err
}

// report writes the date's report and records the run (HQ drops a day's rows only once a
// run of every store has covered it: serve --retain); it reports whether the date
// reconciles.
func (c *Reconcile) report(ctx context.Context, st hqstore.Storage) (bool, error) {
	o := reconcile.Options{Store: c.Store, Expect: c.expect, Workers: c.Workers}
	if c.Progress {
		o.Progress = c.stderr
	}
	rep, err := reconcile.RunWith(ctx, st, c.Date, o)
	if err != nil {
		return false, err
	}
	diffs := int64(len(rep.Txns) - rep.Counts[reconcile.Late] + len(rep.Totals) + len(rep.Missing))
	if err := st.RecordReconcile(ctx, hqstore.ReconcileRun{Date: c.Date, Store: c.Store, Finished: time.Now(),
		OK: rep.OK(), Stores: rep.Stores, HQTxns: int64(rep.HQTxns), Differences: diffs}); err != nil {
		return false, err
	}
	switch c.Format {
	case "json":
		enc := json.NewEncoder(c.stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(rep)
	case "csv":
		err = rep.WriteCSV(c.stdout)
	default:
		err = rep.WriteTable(c.stdout)
	}
	if err == nil && c.HTML != "" {
		err = c.writeHTML(ctx, st)
	}
	return rep.OK(), err
}

// writeHTML writes the date's report, as HQ's page shows it, to the --html file.
func (c *Reconcile) writeHTML(ctx context.Context, st hqstore.Storage) error {
	o, err := hqview.BuildOverview(ctx, st, c.expect, c.Date, time.Now())
	if err != nil {
		return err
	}
	if c.Store != "" {
		o = o.Only(c.Store)
	}
	var b bytes.Buffer
	if err := hqview.WriteHTML(&b, o, c.Lang); err != nil {
		return err
	}
	return os.WriteFile(c.HTML, b.Bytes(), 0o644)
}
