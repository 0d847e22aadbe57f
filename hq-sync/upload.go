package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/posgate/posgate/hq-sync/upload"
	"github.com/posgate/posgate/internal/certfile"
	"github.com/posgate/posgate/internal/cli"
	"github.com/posgate/posgate/internal/private"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/uploadstate"
)

// Upload is the upload command: at the store, the ledger's rows to HQ.
type Upload struct {
	Store         string
	Ledger        string
	State         string
	HQURL         string
	Secret        string
	TZ            string
	LogLevel      string
	MetricsListen string
	HQCA          string
	Once          bool
	Progress      bool
	Status        bool
	BatchRows     int

	stdout, stderr io.Writer
	loc            *time.Location // TZ, loaded by Validate
	client         *http.Client   // trusting HQCA, made by Validate (nil: the uploader's default)
}

func newUpload(stdout, stderr io.Writer) *Upload { return &Upload{stdout: stdout, stderr: stderr} }

// ParseFlags reads the flags, falling back to POSGATE_* environment variables, then
// defaults, and validates them.
func (c *Upload) ParseFlags(args []string) error {
	fs := newFlags("upload", "send the store ledger's rows to HQ in signed, idempotent batches", c.stderr)
	fs.String(&c.Store, "store", "POSGATE_STORE", "", "this store's id (required)")
	fs.String(&c.Ledger, "ledger", "POSGATE_LEDGER", "./data/ledger.db", "the store-server's ledger (read only)")
	fs.String(&c.State, "state", "POSGATE_UPLOAD_STATE", "./data/upload.db", "the uploader's own state database")
	fs.String(&c.HQURL, "hq-url", "POSGATE_HQ_URL", "", "HQ's batch endpoint, e.g. https://hq.example/v1/batches (required)")
	fs.Secret(&c.Secret, "secret", "POSGATE_HQ_SECRET", upload.MinSecretBytes, "the store's signing secret shared with HQ (required)")
	fs.String(&c.TZ, "tz", "POSGATE_TZ", "Local", "the store's time zone (when a business day is over)")
	fs.String(&c.LogLevel, "log-level", "POSGATE_LOG_LEVEL", "info", "debug, info, warn or error")
	fs.String(&c.MetricsListen, "metrics-listen", "POSGATE_UPLOAD_METRICS_LISTEN", "", "serve Prometheus metrics (GET /metrics) on this address, e.g. 127.0.0.1:9465 (empty: off)")
	fs.String(&c.HQCA, "hq-ca", "POSGATE_HQ_CA", "", "also trust this authority (PEM) for HQ's HTTPS certificate, e.g. the chain's own CA")
	fs.BoolVar(&c.Once, "once", false, "send everything pending, then exit")
	fs.BoolVar(&c.Progress, "progress", false, "print catch-up progress (rows sent, left, rate) on stderr")
	fs.BoolVar(&c.Status, "status", false, "print the uploader's status as JSON and exit (works while an uploader runs)")
	fs.IntVar(&c.BatchRows, "batch-rows", upload.DefaultBatchRows, "most rows in one batch")
	if err := fs.Parse(args); err != nil {
		return err
	}
	return c.Validate()
}

// Validate checks the settings, and loads the time zone and the --hq-ca authority for
// Run. --status needs only the time zone: it reads the state and the ledger, and sends
// nothing.
func (c *Upload) Validate() error {
	loc, err := wire.LoadLocation(c.TZ)
	if err != nil {
		return usageError{fmt.Errorf("--tz: %w", err)}
	}
	c.loc = loc
	if c.Status {
		return nil
	}
	if c.HQCA != "" {
		if c.client, err = clientTrusting(c.HQCA); err != nil {
			return usageError{fmt.Errorf("--hq-ca: %w", err)}
		}
	}
	cfg := c.config(nil)
	if err := cfg.Validate(); err != nil {
		return usageError{err}
	}
	return nil
}

// config is the uploader's configuration, logging to log, without its metrics.
func (c *Upload) config(log *slog.Logger) upload.Config {
	cfg := upload.Config{LedgerPath: c.Ledger, StatePath: c.State, Store: c.Store, Location: c.loc, Secret: []byte(c.Secret),
		HQURL: c.HQURL, BatchRows: c.BatchRows, Client: c.client, Logger: log}
	if c.Progress {
		cfg.Progress = c.stderr
	}
	return cfg
}

// Run prints the status (--status), or uploads until everything pending is sent (--once)
// or until ctx ends.
func (c *Upload) Run(ctx context.Context) error {
	if c.Status {
		st, err := uploadstate.ReadStatus(ctx, c.Ledger, c.State, c.Store, c.loc)
		if err != nil {
			return err
		}
		enc := json.NewEncoder(c.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(st)
	}
	log := cli.Logger(c.LogLevel)
	if err := private.Files(log, c.State); err != nil {
		return err
	}
	cfg := c.config(log)
	var reg *prometheus.Registry
	if c.MetricsListen != "" {
		reg = newRegistry()
		cfg.Metrics = reg
	}
	u, err := upload.New(ctx, cfg)
	if err != nil {
		return err
	}
	defer u.Close()
	if reg != nil {
		msrv, addr, err := serveMetrics(c.MetricsListen, reg, nil)
		if err != nil {
			return err
		}
		defer msrv.Close() // before the uploader closes: a scrape reads its ledger and state
		log.Info("hq-sync upload metrics", "addr", addr)
	}
	if c.Once {
		return u.Once(ctx)
	}
	if err := u.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// clientTrusting is the uploader's HTTP client (upload.NewClient), trusting the
// authorities in the PEM file caPath for HQ's certificate besides the system's.
func clientTrusting(caPath string) (*http.Client, error) {
	roots, err := certfile.RootsWith(caPath)
	if err != nil {
		return nil, err
	}
	return upload.NewClient(roots), nil
}
