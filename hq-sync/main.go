// Command hq-sync moves a store's ledger to headquarters and proves it there:
//
//	hq-sync upload     at the store: send the ledger's rows to HQ in signed, idempotent batches
//	hq-sync serve      at HQ: receive batches into SQLite (default) or PostgreSQL
//	hq-sync reconcile  at HQ, nightly: terminal totals vs store ledger vs HQ rows, by transaction
//
// Run "hq-sync COMMAND --help" for each command's flags; each flag can also be set by the
// POSGATE_* environment variable named in its help.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/posgate/posgate/hq-sync/hqstore"
	"github.com/posgate/posgate/hq-sync/hqstore/postgres"
	"github.com/posgate/posgate/hq-sync/hqstore/sqlite"
	"github.com/posgate/posgate/hq-sync/reconcile"
	"github.com/posgate/posgate/hq-sync/serve"
	"github.com/posgate/posgate/hq-sync/upload"
	"github.com/posgate/posgate/internal/certfile"
	"github.com/posgate/posgate/internal/cli"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/uploadstate"
)

const usage = `hq-sync: a store's ledger to headquarters, and the nightly proof.

commands:
  upload     at the store: send the ledger's rows to HQ (a loop, or --once)
  serve      at HQ: receive batches (SQLite by default, PostgreSQL for a chain)
  reconcile  at HQ: reconcile a business date transaction by transaction

run "hq-sync COMMAND --help" for its flags
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// Exit statuses.
const (
	exitOK      = 0
	exitDiffers = 1 // reconcile: the day does not reconcile; other commands: they failed
	exitUsage   = 2
)

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	var err error
	switch args[0] {
	case "upload":
		err = runUpload(ctx, args[1:], stdout, stderr)
	case "serve":
		err = runServe(ctx, args[1:], stderr)
	case "reconcile":
		var ok bool
		ok, err = runReconcile(ctx, args[1:], stdout, stderr)
		if err == nil && !ok {
			return exitDiffers
		}
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return exitOK
	default:
		fmt.Fprintf(stderr, "hq-sync: unknown command %q\n\n%s", args[0], usage)
		return exitUsage
	}
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.As(err, new(usageError)):
		fmt.Fprintln(stderr, "hq-sync:", err)
		return exitUsage
	default:
		fmt.Fprintln(stderr, "hq-sync:", err)
		return exitDiffers
	}
}

type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

func newFlags(name, about string, stderr io.Writer) *cli.Flags {
	fs := cli.NewFlags("hq-sync "+name, stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "hq-sync %s: %s\n\n", name, about)
		fs.PrintDefaults()
	}
	return fs
}

func runUpload(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("upload", "send the store ledger's rows to HQ in signed, idempotent batches", stderr)
	var store, ledgerPath, statePath, hqURL, secret, tz, level, metricsListen, hqCA string
	var once, progress, status bool
	var batchRows int
	fs.String(&store, "store", "POSGATE_STORE", "", "this store's id (required)")
	fs.String(&ledgerPath, "ledger", "POSGATE_LEDGER", "./data/ledger.db", "the store-server's ledger (read only)")
	fs.String(&statePath, "state", "POSGATE_UPLOAD_STATE", "./data/upload.db", "the uploader's own state database")
	fs.String(&hqURL, "hq-url", "POSGATE_HQ_URL", "", "HQ's batch endpoint, e.g. https://hq.example/v1/batches (required)")
	fs.String(&secret, "secret", "POSGATE_HQ_SECRET", "", "the store's signing secret shared with HQ; prefer the environment variable")
	fs.String(&tz, "tz", "POSGATE_TZ", "Local", "the store's time zone (when a business day is over)")
	fs.String(&level, "log-level", "POSGATE_LOG_LEVEL", "info", "debug, info, warn or error")
	fs.String(&metricsListen, "metrics-listen", "POSGATE_UPLOAD_METRICS_LISTEN", "", "serve Prometheus metrics (GET /metrics) on this address, e.g. 127.0.0.1:9465 (empty: off)")
	fs.String(&hqCA, "hq-ca", "POSGATE_HQ_CA", "", "also trust this authority (PEM) for HQ's HTTPS certificate, e.g. the chain's own CA")
	fs.BoolVar(&once, "once", false, "send everything pending, then exit")
	fs.BoolVar(&progress, "progress", false, "print catch-up progress (rows sent, left, rate) on stderr")
	fs.BoolVar(&status, "status", false, "print the uploader's status as JSON and exit (works while an uploader runs)")
	fs.IntVar(&batchRows, "batch-rows", upload.DefaultBatchRows, "most rows in one batch")
	if err := fs.Parse(args); err != nil {
		return err
	}
	loc, err := wire.LoadLocation(tz)
	if err != nil {
		return usageError{fmt.Errorf("--tz: %w", err)}
	}
	if status {
		st, err := uploadstate.ReadStatus(ctx, ledgerPath, statePath, store, loc)
		if err != nil {
			return err
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(st)
	}
	log := cli.Logger(level)
	cfg := upload.Config{LedgerPath: ledgerPath, StatePath: statePath, Store: store, Location: loc, Secret: []byte(secret),
		HQURL: hqURL, BatchRows: batchRows, Logger: log}
	if progress {
		cfg.Progress = stderr
	}
	if hqCA != "" {
		if cfg.Client, err = clientTrusting(hqCA); err != nil {
			return usageError{fmt.Errorf("--hq-ca: %w", err)}
		}
	}
	if err := cfg.Validate(); err != nil {
		return usageError{err}
	}
	var reg *prometheus.Registry
	if metricsListen != "" {
		reg = newRegistry()
		cfg.Metrics = reg
	}
	u, err := upload.New(ctx, cfg)
	if err != nil {
		return err
	}
	defer u.Close()
	if reg != nil {
		msrv, addr, err := serveMetrics(metricsListen, reg, nil)
		if err != nil {
			return err
		}
		defer msrv.Close() // before the uploader closes: a scrape reads its ledger and state
		log.Info("hq-sync upload metrics", "addr", addr)
	}
	if once {
		return u.Once(ctx)
	}
	if err := u.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// openStorage opens HQ's database: a postgres:// URL, or a SQLite path (optionally
// "sqlite:" prefixed).
func openStorage(ctx context.Context, db string) (hqstore.Storage, error) {
	if strings.HasPrefix(db, "postgres://") || strings.HasPrefix(db, "postgresql://") {
		return postgres.Open(ctx, db)
	}
	return sqlite.Open(ctx, strings.TrimPrefix(db, "sqlite:"))
}

// StoreSecret is one line of the serve command's --stores file.
type StoreSecret struct {
	Store  string `json:"store"`
	Secret string `json:"secret"`
}

func loadSecrets(path string) (map[string][]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var list []StoreSecret
	if err := json.Unmarshal(b, &list); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	out := make(map[string][]byte, len(list))
	for _, s := range list {
		if !wire.ValidID(s.Store) || len(s.Secret) < 16 {
			return nil, fmt.Errorf("%s: store %q needs a valid id and a secret of at least 16 characters", path, s.Store)
		}
		out[s.Store] = []byte(s.Secret)
	}
	return out, nil
}

func runServe(ctx context.Context, args []string, stderr io.Writer) error {
	fs := newFlags("serve", "receive store batches at HQ", stderr)
	var listen, metricsListen, db, stores, level, tlsCert, tlsKey string
	var dropParts time.Duration
	fs.String(&listen, "listen", "POSGATE_HQ_LISTEN", "127.0.0.1:8383", "listen address")
	fs.Duration(&dropParts, "drop-parts-after", "POSGATE_HQ_DROP_PARTS_AFTER", 7*24*time.Hour, "delete a declaration's parts kept aside this long after its part 1 came without its last part (0: keep them)")
	fs.String(&metricsListen, "metrics-listen", "POSGATE_HQ_METRICS_LISTEN", "", "serve Prometheus metrics (GET /metrics) on this address, apart from the stores' (empty: off)")
	fs.String(&db, "db", "POSGATE_HQ_DB", "./hq.db", "a SQLite path, or a postgres:// URL for a chain")
	fs.String(&stores, "stores", "POSGATE_HQ_STORES", "", `JSON file of the stores and their secrets: [{"store":"S001","secret":"…"}] (required)`)
	fs.String(&level, "log-level", "POSGATE_LOG_LEVEL", "info", "debug, info, warn or error")
	fs.String(&tlsCert, "tls-cert", "POSGATE_HQ_TLS_CERT", "", "serve HTTPS with this certificate (PEM; with --tls-key), taken again when the file is renewed")
	fs.String(&tlsKey, "tls-key", "POSGATE_HQ_TLS_KEY", "", "the private key of --tls-cert (PEM)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if (tlsCert == "") != (tlsKey == "") {
		return usageError{errors.New("--tls-cert and --tls-key go together")}
	}
	if stores == "" {
		return usageError{errors.New("--stores is required")}
	}
	secrets, err := loadSecrets(stores)
	if err != nil {
		return usageError{err}
	}
	st, err := openStorage(ctx, db)
	if err != nil {
		return err
	}
	defer st.Close()
	log := cli.Logger(level)
	var pair *certfile.Pair
	if tlsCert != "" {
		// Loaded before serving: a wrong file stops the start instead of every handshake.
		if pair, err = certfile.Load(tlsCert, tlsKey, certfile.Options{Name: "hq", Logger: log}); err != nil {
			return fmt.Errorf("--tls-cert: %w", err)
		}
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	if pair != nil {
		ln = tls.NewListener(ln, pair.TLSConfig())
	} else if !loopback(ln.Addr()) {
		log.Warn("serving plain HTTP beyond this host: the stores' sales cross the network in clear unless a TLS proxy is in front (--tls-cert)",
			"addr", ln.Addr().String())
	}
	opts := serve.Options{Logger: log}
	errc := make(chan error, 2)
	if metricsListen != "" {
		reg := newRegistry()
		opts.Metrics = reg
		msrv, addr, err := serveMetrics(metricsListen, reg, errc)
		if err != nil {
			ln.Close()
			return err
		}
		defer msrv.Close()
		log.Info("hq-sync serve metrics", "addr", addr)
	}
	if pair != nil && opts.Metrics != nil {
		opts.Metrics.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "posgate", Subsystem: "hq",
			Name: "tls_cert_expiry_timestamp_seconds", Help: "When the TLS certificate serve serves (its leaf) expires."},
			func() float64 { return float64(pair.NotAfter().Unix()) }))
	}
	srv := &http.Server{Handler: serve.New(st, secrets, opts), ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout: 2 * time.Minute, WriteTimeout: 2 * time.Minute}
	log.Info("hq-sync serve", "addr", ln.Addr().String(), "tls", pair != nil, "stores", len(secrets))
	go func() { errc <- srv.Serve(ln) }()
	if dropParts > 0 {
		sweep, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); dropAbandonedParts(sweep, st, dropParts, time.Hour, log) }()
		defer func() { stop(); <-done }() // before st.Close
	}
	select {
	case <-ctx.Done():
	case err := <-errc:
		return err
	}
	shut, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return srv.Shutdown(shut)
}

// dropAbandonedParts deletes, now and then every, the parts of declarations kept aside
// longer than keep without their last part (hqstore.Storage.DropDrafts), until ctx is done.
func dropAbandonedParts(ctx context.Context, st hqstore.Storage, keep, every time.Duration, log *slog.Logger) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		n, err := st.DropDrafts(ctx, time.Now().Add(-keep))
		switch {
		case err != nil && ctx.Err() == nil:
			log.Warn("drop parts kept aside", "err", err)
		case n > 0:
			log.Info("dropped parts kept aside without their last part", "store_days", n, "kept_for", keep)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// clientTrusting is the uploader's HTTP client (upload.NewClient), trusting the
// authorities in the PEM file caPath for HQ's certificate besides the system's.
func clientTrusting(caPath string) (*http.Client, error) {
	pemBytes, err := os.ReadFile(caPath)
	if err != nil {
		return nil, err
	}
	roots, err := x509.SystemCertPool()
	if err != nil {
		roots = x509.NewCertPool()
	}
	if !roots.AppendCertsFromPEM(pemBytes) {
		return nil, fmt.Errorf("%s holds no PEM certificate", caPath)
	}
	return upload.NewClient(roots), nil
}

// loopback reports whether addr is a loopback address (only this host reaches it).
func loopback(addr net.Addr) bool {
	a, ok := addr.(*net.TCPAddr)
	return ok && a.IP.IsLoopback()
}

// newRegistry returns a registry with the Go and process collectors.
func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// serveMetrics serves reg's metrics (GET /metrics) on addr until the returned server is
// closed, and returns the address it listens on. Serve's error goes to errc, if not nil.
func serveMetrics(addr string, reg *prometheus.Registry, errc chan<- error) (*http.Server, string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		err := srv.Serve(ln)
		if errc != nil {
			errc <- err
		}
	}()
	return srv, ln.Addr().String(), nil
}

func runReconcile(ctx context.Context, args []string, stdout, stderr io.Writer) (bool, error) {
	fs := newFlags("reconcile", "reconcile a business date: terminal totals vs store ledger vs HQ rows, by transaction; exit 0 if it reconciles, 1 if not", stderr)
	var db, date, store, format, stores string
	var open bool
	fs.String(&db, "db", "POSGATE_HQ_DB", "./hq.db", "a SQLite path, or a postgres:// URL")
	fs.String(&stores, "stores", "POSGATE_HQ_STORES", "", "serve's stores file: each store in it HQ holds nothing of for the date is no_store_day (default: only stores with rows or a declaration)")
	fs.StringVar(&date, "date", "", "the business date, YYYY-MM-DD (default: yesterday, local time)")
	fs.StringVar(&store, "store", "", "one store (default: every store)")
	fs.StringVar(&format, "format", "table", "table, json or csv")
	fs.BoolVar(&open, "open", false, "instead, list the exceptions no store manager has resolved, of every business date (table or json); exit 0 if there are none, 1 if there are")
	if err := fs.Parse(args); err != nil {
		return false, err
	}
	if open {
		// --stores may come from POSGATE_HQ_STORES, which serve and reconcile share: only a
		// flag given here conflicts.
		if fs.Given("date") || fs.Given("stores") || (format != "table" && format != "json") {
			return false, usageError{errors.New("--open lists every date's open exceptions: no --date, no --stores, --format table or json")}
		}
		stores = ""
	}
	if date == "" {
		date = time.Now().AddDate(0, 0, -1).Format(wire.BusinessDate)
	}
	if _, err := time.Parse(wire.BusinessDate, date); err != nil {
		return false, usageError{fmt.Errorf("--date %q is not YYYY-MM-DD", date)}
	}
	if format != "table" && format != "json" && format != "csv" {
		return false, usageError{fmt.Errorf("--format %q: want table, json or csv", format)}
	}
	var expect []string
	if stores != "" {
		secrets, err := loadSecrets(stores)
		if err != nil {
			return false, usageError{err}
		}
		expect = slices.Sorted(maps.Keys(secrets))
	}
	if !strings.Contains(db, "://") {
		// Opening creates a missing SQLite file: a mistyped path would reconcile an empty
		// HQ as OK.
		if _, err := os.Stat(strings.TrimPrefix(db, "sqlite:")); err != nil {
			return false, usageError{fmt.Errorf("--db %s: %w", db, err)}
		}
	}
	st, err := openStorage(ctx, db)
	if err != nil {
		return false, err
	}
	defer st.Close()
	if open {
		list, err := reconcile.RunOpen(ctx, st, store)
		if err != nil {
			return false, err
		}
		if format == "json" {
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			err = enc.Encode(list)
		} else {
			err = list.WriteTable(stdout)
		}
		return len(list.Exceptions) == 0, err
	}
	rep, err := reconcile.Run(ctx, st, date, store, expect...)
	if err != nil {
		return false, err
	}
	switch format {
	case "json":
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(rep)
	case "csv":
		err = rep.WriteCSV(stdout)
	default:
		err = rep.WriteTable(stdout)
	}
	return rep.OK(), err
}
