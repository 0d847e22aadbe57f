package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/posgate/posgate/hq-sync/hqstore"
	"github.com/posgate/posgate/hq-sync/hqview"
	"github.com/posgate/posgate/hq-sync/serve"
	"github.com/posgate/posgate/internal/certfile"
	"github.com/posgate/posgate/internal/cli"
	"github.com/posgate/posgate/internal/httpserve"
	"github.com/posgate/posgate/internal/wire"
)

// Serve is the serve command: at HQ, the stores' batches received into HQ's database.
type Serve struct {
	Listen         string
	DropPartsAfter time.Duration
	MetricsListen  string
	DB             string
	Stores         string
	LogLevel       string
	TLSCert        string
	TLSKey         string
	ViewerToken    string
	// DBConns bounds the connections to a PostgreSQL database, and so the batches this
	// process stores at once (0: the driver's default).
	DBConns int
	// PartitionsAhead is how many days ahead of today (UTC) a PostgreSQL database has its
	// days' partitions made.
	PartitionsAhead int
	// Retain is how long a PostgreSQL database keeps a business day, as "400d" (days) or a
	// Go duration; "" or "0" keeps every day. A day older than that is dropped once a
	// reconciliation of every store has covered it.
	Retain string

	stderr  io.Writer
	retain  time.Duration     // Retain, read by Validate
	secrets map[string][]byte // the stores' secrets from Stores, read by Validate
}

func newServe(stderr io.Writer) *Serve { return &Serve{stderr: stderr} }

// ParseFlags reads the flags, falling back to POSGATE_* environment variables, then
// defaults, and validates them.
func (c *Serve) ParseFlags(args []string) error {
	fs := newFlags("serve", "receive store batches at HQ", c.stderr)
	fs.String(&c.Listen, "listen", "POSGATE_HQ_LISTEN", "127.0.0.1:8383", "listen address")
	fs.Duration(&c.DropPartsAfter, "drop-parts-after", "POSGATE_HQ_DROP_PARTS_AFTER", 7*24*time.Hour, "delete a declaration's parts kept aside this long after its part 1 came without its last part (0: keep them)")
	fs.String(&c.MetricsListen, "metrics-listen", "POSGATE_HQ_METRICS_LISTEN", "", "serve Prometheus metrics (GET /metrics) on this address, apart from the stores' (empty: off)")
	fs.String(&c.DB, "db", "POSGATE_HQ_DB", "./hq.db", "a SQLite path, or a postgres:// URL for a chain")
	fs.String(&c.Stores, "stores", "POSGATE_HQ_STORES", "", `JSON file of the stores and their secrets: [{"store":"S001","secret":"…"}] (required)`)
	fs.String(&c.LogLevel, "log-level", "POSGATE_LOG_LEVEL", "info", "debug, info, warn or error")
	fs.String(&c.TLSCert, "tls-cert", "POSGATE_HQ_TLS_CERT", "", "serve HTTPS with this certificate (PEM; with --tls-key), taken again when the file is renewed")
	fs.String(&c.TLSKey, "tls-key", "POSGATE_HQ_TLS_KEY", "", "the private key of --tls-cert (PEM)")
	fs.Secret(&c.ViewerToken, "viewer-token", "POSGATE_HQ_VIEWER_TOKEN", hqview.MinTokenBytes, "the token HQ finance's page (GET /) is served to (none: no page)")
	fs.Int(&c.DBConns, "db-conns", "POSGATE_HQ_DB_CONNS", 0, "PostgreSQL: connections to the database, and so batches stored at once by this process (0: the larger of 4 and the number of CPUs)")
	fs.Int(&c.PartitionsAhead, "partitions-ahead", "POSGATE_HQ_PARTITIONS_AHEAD", 7, "PostgreSQL: make each business day's partitions this many days ahead (checked at start and hourly)")
	fs.String(&c.Retain, "retain", "POSGATE_HQ_RETAIN", "0", `PostgreSQL: drop a business day older than this ("400d", or a duration such as "9600h") once reconcile has covered every store of it; 0 keeps every day`)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := dbPasswordGiven(fs, c.DB); err != nil {
		return err
	}
	return c.Validate()
}

// Validate checks the settings, and reads the stores' secrets for Run.
func (c *Serve) Validate() error {
	if (c.TLSCert == "") != (c.TLSKey == "") {
		return usageError{errors.New("--tls-cert and --tls-key go together")}
	}
	if c.Stores == "" {
		return usageError{errors.New("--stores is required")}
	}
	if c.ViewerToken != "" && len(c.ViewerToken) < hqview.MinTokenBytes {
		return usageError{fmt.Errorf("--viewer-token: %d bytes, want at least %d", len(c.ViewerToken), hqview.MinTokenBytes)}
	}
	retain, err := parseDays(c.Retain)
	if err != nil {
		return usageError{fmt.Errorf("--retain %q: %w", c.Retain, err)}
	}
	c.retain = retain
	pg := isPostgres(c.DB)
	switch {
	case c.retain > 0 && c.retain < 2*24*time.Hour:
		return usageError{fmt.Errorf("--retain %v: keep at least 2 days", c.retain)}
	case c.retain > 0 && !pg:
		return usageError{errors.New("--retain needs PostgreSQL (--db postgres://…): the SQLite engine keeps every day")}
	case c.DBConns < 0 || c.DBConns > 1000:
		return usageError{fmt.Errorf("--db-conns %d: want 0 to 1000", c.DBConns)}
	case c.PartitionsAhead < 0 || c.PartitionsAhead > 366:
		return usageError{fmt.Errorf("--partitions-ahead %d: want 0 to 366", c.PartitionsAhead)}
	}
	secrets, err := loadSecrets(c.Stores)
	if err != nil {
		return usageError{err}
	}
	c.secrets = secrets
	return nil
}

// parseDays reads a retention: whole days as "400d", or a Go duration; "" and "0" are 0.
func parseDays(s string) (time.Duration, error) {
	switch {
	case s == "" || s == "0":
		return 0, nil
	case strings.HasSuffix(s, "d"):
		n, err := strconv.Atoi(strings.TrimSuffix(s, "d"))
		if err != nil || n < 0 || n > 100*366 {
			return 0, errors.New(`want whole days such as "400d", or a duration`)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, errors.New(`want whole days such as "400d", or a duration`)
	}
	return d, nil
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

// hqLimits bound what one store's connection may hold of serve: a batch of up to
// hqwire.MaxBatchBytes may take a slow store link two minutes, and a chain's evening burst
// brings many stores at once.
var hqLimits = httpserve.Limits{ReadHeader: 10 * time.Second, Read: 2 * time.Minute, Write: 2 * time.Minute,
	Idle: 90 * time.Second, MaxHeaderBytes: 16 << 10, MaxConns: 2048}

// Run serves the stores' batches until ctx ends, then shuts the server down.
func (c *Serve) Run(ctx context.Context) error {
	st, err := openStorageWith(ctx, c.DB, int32(c.DBConns))
	if err != nil {
		return err
	}
	defer st.Close()
	log := cli.Logger(c.LogLevel)
	ln, pair, err := c.listen(log)
	if err != nil {
		return err
	}
	opts := serve.Options{Logger: log}
	errc := make(chan error, 2)
	if c.MetricsListen != "" {
		reg := newRegistry()
		opts.Metrics = reg
		msrv, addr, err := serveMetrics(c.MetricsListen, reg, errc)
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
	handler, err := c.handler(st, serve.New(st, c.secrets, opts), log)
	if err != nil {
		ln.Close()
		return err
	}
	log.Info("hq-sync serve", "addr", ln.Addr().String(), "tls", pair != nil, "stores", len(c.secrets))
	srv := httpserve.Serve(ln, handler, hqLimits, errc)
	if c.DropPartsAfter > 0 {
		sweep, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); dropAbandonedParts(sweep, st, c.DropPartsAfter, time.Hour, log) }()
		defer func() { stop(); <-done }() // before st.Close
	}
	if p, ok := st.(hqstore.Partitioner); ok {
		keep, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); keepDays(keep, p, c.PartitionsAhead, c.retain, time.Hour, log) }()
		defer func() { stop(); <-done }()
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

// handler is what serve answers: the stores' batches (batches, as serve.New has them
// answer every request), and with a viewer token HQ finance's page beside them.
func (c *Serve) handler(st hqstore.Storage, batches http.Handler, log *slog.Logger) (http.Handler, error) {
	if c.ViewerToken == "" {
		return batches, nil
	}
	view, err := hqview.New(st, hqview.Options{Token: c.ViewerToken, Stores: slices.Sorted(maps.Keys(c.secrets)), Logger: log})
	if err != nil {
		return nil, err
	}
	// Dispatched by path as sent, not through a ServeMux, which would redirect a path it
	// cleans before serve's handler saw it.
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hqview.Serves(r.URL.Path) {
			view.ServeHTTP(w, r)
			return
		}
		batches.ServeHTTP(w, r)
	}), nil
}

// listen listens on Listen, with TLS when there is a certificate, and returns the
// certificate's pair too (nil: plain HTTP).
func (c *Serve) listen(log *slog.Logger) (net.Listener, *certfile.Pair, error) {
	var pair *certfile.Pair
	if c.TLSCert != "" {
		// Loaded before serving: a wrong file stops the start instead of every handshake.
		var err error
		if pair, err = certfile.Load(c.TLSCert, c.TLSKey, certfile.Options{Name: "hq", Logger: log}); err != nil {
			return nil, nil, fmt.Errorf("--tls-cert: %w", err)
		}
	}
	ln, err := net.Listen("tcp", c.Listen)
	if err != nil {
		return nil, nil, err
	}
	if pair != nil {
		ln = tls.NewListener(ln, pair.TLSConfig())
	} else if !loopback(ln.Addr()) {
		log.Warn("serving plain HTTP beyond this host: the stores' sales cross the network in clear unless a TLS proxy is in front (--tls-cert)",
			"addr", ln.Addr().String())
	}
	return ln, pair, nil
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

// keepDays makes the days' partitions from yesterday to ahead days on (UTC dates: a store's
// business date is within a day of them) and, with retain, drops the days older than it
// that reconcile has covered; now and then every, until ctx is done.
func keepDays(ctx context.Context, p hqstore.Partitioner, ahead int, retain, every time.Duration, log *slog.Logger) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		keepDaysOnce(ctx, p, ahead, retain, log)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// keepDaysOnce is one pass of keepDays.
func keepDaysOnce(ctx context.Context, p hqstore.Partitioner, ahead int, retain time.Duration, log *slog.Logger) {
	now := time.Now().UTC()
	err := p.PrepareDays(ctx, now.AddDate(0, 0, -1).Format(wire.BusinessDate), now.AddDate(0, 0, ahead).Format(wire.BusinessDate))
	if err != nil && ctx.Err() == nil {
		log.Warn("make the days' partitions ahead", "err", err)
	}
	if retain <= 0 {
		return
	}
	before := now.Add(-retain).Format(wire.BusinessDate)
	got, err := p.Retain(ctx, before)
	switch {
	case err != nil && ctx.Err() == nil:
		log.Warn("drop old days", "before", before, "err", err)
	case len(got.Dropped) > 0:
		log.Info("dropped old days reconcile has covered", "days", got.Dropped, "before", before)
	}
	if len(got.Unreconciled) > 0 {
		log.Warn("old days kept: no reconciliation of every store has covered them (hq-sync reconcile --date)",
			"days", got.Unreconciled, "before", before)
	}
}

// loopback reports whether addr is a loopback address (only this host reaches it).
func loopback(addr net.Addr) bool {
	a, ok := addr.(*net.TCPAddr)
	return ok && a.IP.IsLoopback()
}
