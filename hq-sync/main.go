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
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	_ "time/tzdata" // the zone database, for devices that have none (Windows, Android)

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/posgate/posgate/hq-sync/hqstore"
	"github.com/posgate/posgate/hq-sync/hqstore/postgres"
	"github.com/posgate/posgate/hq-sync/hqstore/sqlite"
	"github.com/posgate/posgate/internal/cli"
	"github.com/posgate/posgate/internal/httpserve"
	"github.com/posgate/posgate/internal/private"
	"github.com/posgate/posgate/internal/version"
)

const usage = `hq-sync: a store's ledger to headquarters, and the nightly proof.

commands:
  upload     at the store: send the ledger's rows to HQ (a loop, or --once)
  serve      at HQ: receive batches (SQLite by default, PostgreSQL for a chain)
  reconcile  at HQ: reconcile a business date transaction by transaction

run "hq-sync COMMAND --help" for its flags, "hq-sync --version" for the build
`

func main() {
	private.Umask() // every file hq-sync creates is its user's alone
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

// command is one of hq-sync's commands, built as the daemons' Main types are: ParseFlags
// reads its flags (falling back to POSGATE_* environment variables) and then Validate
// checks them; Run runs it until it is done or ctx ends.
type command interface {
	ParseFlags(args []string) error
	Validate() error
	Run(ctx context.Context) error
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	var cmd command
	switch args[0] {
	case "upload":
		cmd = newUpload(stdout, stderr)
	case "serve":
		cmd = newServe(stderr)
	case "reconcile":
		cmd = newReconcile(stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return exitOK
	case "-version", "--version", "version":
		fmt.Fprintln(stdout, version.String("hq-sync"))
		return exitOK
	default:
		fmt.Fprintf(stderr, "hq-sync: unknown command %q\n\n%s", args[0], usage)
		return exitUsage
	}
	err := cmd.ParseFlags(args[1:])
	switch {
	case err == nil:
		err = cmd.Run(ctx)
	case !errors.Is(err, flag.ErrHelp) && !errors.As(err, new(usageError)):
		// The flag set refused an argument or an environment variable: a usage error as
		// much as the commands' own checks, never a day that does not reconcile (exit 1).
		err = usageError{err}
	}
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.Is(err, errDiffers):
		return exitDiffers // the report says how
	case errors.As(err, new(usageError)):
		fmt.Fprintln(stderr, "hq-sync:", err)
		return exitUsage
	default:
		fmt.Fprintln(stderr, "hq-sync:", err)
		return exitDiffers
	}
}

// usageError is an error of the command line: exit status 2.
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

// openStorage opens HQ's database: a postgres:// URL, or a SQLite path (optionally
// "sqlite:" prefixed).
func openStorage(ctx context.Context, db string) (hqstore.Storage, error) {
	return openStorageWith(ctx, db, 0)
}

// openStorageWith is openStorage with at most conns connections to a PostgreSQL database
// (0: the driver's default).
func openStorageWith(ctx context.Context, db string, conns int32) (hqstore.Storage, error) {
	if isPostgres(db) {
		return postgres.OpenWith(ctx, db, postgres.Options{MaxConns: conns})
	}
	path := strings.TrimPrefix(db, "sqlite:")
	if err := private.Files(slog.Default(), path); err != nil {
		return nil, err
	}
	return sqlite.Open(ctx, path)
}

// dbPasswordGiven refuses a PostgreSQL URL with a password given as the --db flag, where
// ps and the shell's history show it to anyone on the machine: the URL with its password
// goes by POSGATE_HQ_DB, or the password by libpq's PGPASSFILE or PGPASSWORD (docs/security.md).
func dbPasswordGiven(fs *cli.Flags, db string) error {
	if !fs.Given("db") || !isPostgres(db) {
		return nil
	}
	u, err := url.Parse(db)
	if err != nil {
		return usageError{fmt.Errorf("--db is not a postgres:// URL: %w", err)}
	}
	if _, ok := u.User.Password(); ok {
		return usageError{errors.New("--db carries a password on the command line, where ps shows it: give the URL by POSGATE_HQ_DB, or the password by PGPASSFILE")}
	}
	return nil
}

// isPostgres reports whether --db names a PostgreSQL database.
func isPostgres(db string) bool {
	return strings.HasPrefix(db, "postgres://") || strings.HasPrefix(db, "postgresql://")
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
	return httpserve.Serve(ln, mux, httpserve.Default, errc), ln.Addr().String(), nil
}
