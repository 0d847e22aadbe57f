// Package upload is hq-sync's store side: it reads the store ledger's hq_outbox in id order
// and sends it to headquarters in signed batches with stable ids, retrying with backoff for
// as long as HQ is away, and declares each business day closed (hqwire.StoreDay) once the day is
// over and all its rows are sent.
//
// It must never write the store's ledger (the store-server is its only writer; the ledger
// is opened with ledger.OpenReader), never send the same batch id with other content, and
// never skip a row: a batch HQ refuses stays pending and blocks the rows after it until an
// operator fixes the cause. Its own progress lives in its state database, whose schema
// and reading store-server/uploadstate owns (the store-server shows it to its managers).
package upload

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/posgate/posgate/internal/hqwire"
	"github.com/posgate/posgate/internal/perr"
	"github.com/posgate/posgate/internal/sqlitedb"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/ledger"
	"github.com/posgate/posgate/store-server/uploadstate"
)

// KeepSentBatches is how long the state keeps a batch HQ acknowledged (markSent).
const KeepSentBatches = 7 * 24 * time.Hour

// Defaults of Config.
const (
	DefaultBatchRows      = 1000
	DefaultBatchAge       = 2 * time.Second
	DefaultPollInterval   = 250 * time.Millisecond
	DefaultRetryBase      = 500 * time.Millisecond
	DefaultRetryCap       = 30 * time.Second
	DefaultRefusedRetry   = 5 * time.Minute
	DefaultRequestTimeout = 2 * time.Minute
)

// batchBudget is how many body bytes the rows and days of one batch may take: the protocol
// limit less room for the envelope fields.
const batchBudget = hqwire.MaxBatchBytes - 64<<10

// Codes of the errors Once returns when HQ refuses a batch.
const (
	// CodeRefused (perr.Refused): HQ answered a 4xx other than 408 and 429 for a batch; the
	// batch stays pending and the rows after it wait.
	CodeRefused = "hq_refused_batch"
	// CodeLedgerBehind (perr.Conflict): the ledger does not hold the last row HQ acknowledged
	// (restored from an older backup, or another ledger of the store); nothing more is sent
	// from it with this state.
	CodeLedgerBehind = "ledger_behind_hq"
)

// Config configures an Uploader.
type Config struct {
	LedgerPath string         // the store ledger (read only)
	StatePath  string         // the uploader's own SQLite database (created if missing)
	Store      string         // the store id
	Location   *time.Location // the store's time zone: when a business date is over
	Secret     []byte         // the store's HMAC secret shared with HQ
	// HQURL is the full URL of HQ's batch endpoint (hq-sync serve), e.g.
	// "https://hq.example/v1/batches". Requests are POSTed there and signed over its path.
	HQURL string
	// BatchRows is the most rows in one batch (default 1000, at most hqwire.MaxBatchRows).
	// A batch is also cut so that its body stays under hqwire.MaxBatchBytes.
	BatchRows int
	// BatchAge is how long Run lets fewer than BatchRows rows wait before it sends them
	// (default 2 s, measured on the machine's clock, not Now).
	BatchAge time.Duration
	// PollInterval is how often Run looks for new ledger rows when idle (default 250 ms).
	PollInterval time.Duration
	// RetryBase and RetryCap shape the backoff after a failed send: attempt n waits a
	// uniformly random time in [0, min(RetryCap, RetryBase·2ⁿ)] ("full jitter"; defaults
	// 500 ms and 30 s). A Retry-After from HQ lengthens the wait.
	RetryBase, RetryCap time.Duration
	// RefusedRetry is how long Run waits before it sends a batch HQ refused (a 4xx other
	// than 408 and 429) again (default 5 min).
	RefusedRetry time.Duration
	// Client sends the requests (default: a client with a 2 min timeout that does not
	// follow redirects).
	Client   *http.Client
	Now      func() time.Time // default time.Now
	Logger   *slog.Logger     // default slog.Default()
	Progress io.Writer        // if set, catch-up progress lines, at most one a second
	// Metrics, if not nil, gets the uploader's metrics (see metrics.go); New fails if they
	// are there already.
	Metrics prometheus.Registerer
}

func (c *Config) setDefaults() {
	if c.BatchRows <= 0 {
		c.BatchRows = DefaultBatchRows
	}
	c.BatchRows = min(c.BatchRows, hqwire.MaxBatchRows)
	if c.BatchAge <= 0 {
		c.BatchAge = DefaultBatchAge
	}
	if c.PollInterval <= 0 {
		c.PollInterval = DefaultPollInterval
	}
	if c.RetryBase <= 0 {
		c.RetryBase = DefaultRetryBase
	}
	if c.RetryCap <= 0 {
		c.RetryCap = DefaultRetryCap
	}
	if c.RefusedRetry <= 0 {
		c.RefusedRetry = DefaultRefusedRetry
	}
	if c.Client == nil {
		c.Client = NewClient(nil)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// NewClient returns the client the uploader sends with by default: a DefaultRequestTimeout
// timeout, and redirects not followed (a redirected POST would turn into a GET: the 3xx
// shows instead). It trusts roots for HQ's certificate, or the system's when roots is nil.
func NewClient(roots *x509.CertPool) *http.Client {
	c := &http.Client{
		Timeout:       DefaultRequestTimeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	if roots != nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
		c.Transport = tr
	}
	return c
}

// Validate checks the configuration.
func (c *Config) Validate() error {
	switch {
	case c.LedgerPath == "" || c.StatePath == "":
		return errors.New("upload: the ledger and state paths are required")
	case !wire.ValidID(c.Store):
		return fmt.Errorf("upload: store id %q is not valid", c.Store)
	case c.Location == nil:
		return errors.New("upload: the store's time zone is required")
	case len(c.Secret) < MinSecretBytes:
		return fmt.Errorf("upload: the store's secret is %d bytes; at least %d are required", len(c.Secret), MinSecretBytes)
	}
	u, err := url.Parse(c.HQURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("upload: HQ URL %q is not an http(s) URL", c.HQURL)
	}
	if u.Scheme == "http" && !loopback(u.Hostname()) {
		return fmt.Errorf("upload: HQ URL %q is plain HTTP beyond this machine: every sale would cross the network "+
			"in clear; use https://", c.HQURL)
	}
	return nil
}

// MinSecretBytes is the shortest store secret the uploader signs with: a shorter one can
// be guessed.
const MinSecretBytes = 16

// loopback reports whether host names this machine: localhost or a loopback address.
func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Uploader sends a store's ledger to HQ. Run and Once must not be called concurrently, and
// one state database serves one uploader at a time.
type Uploader struct {
	cfg   Config
	log   *slog.Logger
	state *sqlitedb.DB
	path  string // the signed request path

	// ledger is the ledger open, ledgerFile the file it has open. Only the step (Run, Once)
	// replaces them (followLedger), under ledgerMu; Status and the metrics, which may run
	// beside it, read them under it.
	ledgerMu   sync.RWMutex
	ledger     *ledger.Ledger
	ledgerFile os.FileInfo

	firstSeen time.Time // when Run first saw rows waiting (for BatchAge; wall clock, not Now)
	budget    int       // body bytes the rows and days of a batch may take
	dayLimit  int       // body bytes a day declaration may take at most (HQ's limit); more go in parts
	maxParts  int       // parts a declaration may take at most (hqwire.MaxDayParts)
	prog      progress
	met       *metrics     // nil: none
	side      []*sideRoute // the routes beside the batches (side.go)

	// Test hooks: a non-nil error ends the step as if the process had died there.
	afterRecord func(batchID string) error // after the batch is recorded, before it is sent
	afterSend   func(batchID string) error // after HQ's receipt, before the batch is marked sent
}

// New opens the ledger (read only) and the state database, and checks that they belong
// together: the state is this store's, and the ledger still holds the last row HQ
// acknowledged (a ledger restored from an older backup, or another store's, is refused).
func New(ctx context.Context, cfg Config) (*Uploader, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	hqURL, _ := url.Parse(cfg.HQURL)
	file, err := os.Stat(cfg.LedgerPath) // before it is opened: a file moved in between is opened again
	if err != nil {
		return nil, fmt.Errorf("upload: ledger: %w", err)
	}
	l, err := ledger.OpenReader(ctx, cfg.LedgerPath, cfg.Store, cfg.Location)
	if err != nil {
		return nil, fmt.Errorf("upload: %w", err)
	}
	st, err := uploadstate.Open(ctx, cfg.StatePath)
	if err != nil {
		l.Close()
		return nil, fmt.Errorf("upload: open state: %w", err)
	}
	u := &Uploader{cfg: cfg, log: cfg.Logger.With("component", "hq-upload", "store", cfg.Store), ledger: l,
		ledgerFile: file, state: st, path: hqURL.EscapedPath(), budget: batchBudget, dayLimit: batchBudget,
		maxParts: hqwire.MaxDayParts, side: []*sideRoute{movesRoute(), flowsRoute()}}
	if u.path == "" {
		u.path = "/"
	}
	if err := u.claim(ctx); err != nil {
		u.Close()
		return nil, fmt.Errorf("upload: %w", err)
	}
	if cfg.Metrics != nil {
		if u.met, err = newMetrics(cfg.Metrics, u); err != nil {
			u.Close()
			return nil, fmt.Errorf("upload: %w", err)
		}
	}
	return u, nil
}

// Close closes the ledger and the state database.
func (u *Uploader) Close() error {
	u.ledgerMu.Lock()
	defer u.ledgerMu.Unlock()
	err := u.ledger.Close()
	if serr := u.state.Close(); err == nil {
		err = serr
	}
	return err
}

// claim records the store in a new state and checks an existing one against the ledger.
func (u *Uploader) claim(ctx context.Context) error {
	if _, err := u.state.W.ExecContext(ctx, `INSERT INTO kv (k, v) VALUES ('store_id', ?) ON CONFLICT (k) DO NOTHING`,
		u.cfg.Store); err != nil {
		return fmt.Errorf("claim state: %w", err)
	}
	kv, err := u.kv(ctx)
	if err != nil {
		return err
	}
	if err := uploadstate.CheckStore(kv, u.cfg.StatePath, u.cfg.Store); err != nil {
		return err
	}
	through := atoi(kv["sent_through"])
	if through == 0 {
		return nil
	}
	var held bool
	err = u.ledger.ViewHQ(ctx, func(r *ledger.HQReader) error {
		held, err = uploadstate.RowHeld(ctx, r, through, kv["sent_key"])
		return err
	})
	if err != nil {
		return err
	}
	if !held {
		if resumed, err := u.resumeCaughtUp(ctx); err != nil || resumed {
			return err
		}
		return u.behind(through, kv["sent_key"])
	}
	return nil
}

// behind is the error of a ledger that does not hold the last row HQ acknowledged, id
// through of key: rows after the point it goes back to took their ids again (sold after a
// restore), and sending on from the watermark would skip them for good.
func (u *Uploader) behind(through int64, key string) error {
	return perr.New(perr.Conflict, CodeLedgerBehind, "the ledger %s does not hold the last row HQ acknowledged "+
		"(id %d, %s): an older ledger (restored from a backup?) or another one; refusing to upload. To send it "+
		"as it is, start the uploader with a new, empty state: every row goes again and HQ keeps one of each",
		u.cfg.LedgerPath, through, key)
}

// followLedger opens the ledger again if its path now names another file than the one
// open: a ledger restored by moving (or copying) a file into its place, the store-server
// stopped. The connections open read the file they opened, gone from the directory, for as
// long as they live: nothing sold since reached HQ, and the backlog read 0. The new file is
// checked as any ledger is before a batch is cut from it (build).
func (u *Uploader) followLedger(ctx context.Context) error {
	file, err := os.Stat(u.cfg.LedgerPath)
	if err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	if os.SameFile(file, u.ledgerFile) {
		return nil
	}
	l, err := ledger.OpenReader(ctx, u.cfg.LedgerPath, u.cfg.Store, u.cfg.Location)
	if err != nil {
		return fmt.Errorf("open the ledger's new file: %w", err)
	}
	u.log.Warn("the ledger's file was replaced (restored from a backup?); reading the new one", "ledger", u.cfg.LedgerPath)
	u.ledgerMu.Lock()
	old := u.ledger
	u.ledger, u.ledgerFile = l, file
	u.ledgerMu.Unlock()
	if err := old.Close(); err != nil {
		u.log.Warn("close the ledger's old file", "err", err)
	}
	return nil
}

func (u *Uploader) kv(ctx context.Context) (map[string]string, error) {
	return uploadstate.ReadKV(ctx, u.state.R)
}

func atoi(s string) int64 {
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

// Once sends everything the ledger holds now (and every declaration that is due), then
// returns. It waits out HQ being unreachable for as long as ctx allows; a batch HQ refuses
// ends it with a *perr.Error of kind perr.Refused (code "hq_refused_batch"), the batch still
// pending and the side routes' items sent, and a ledger that no longer holds the last row
// HQ acknowledged with one of kind perr.Conflict (code "ledger_behind_hq").
func (u *Uploader) Once(ctx context.Context) error {
	for {
		did, err := u.step(ctx, true)
		if err != nil {
			return err
		}
		if !did {
			u.prog.final(u)
			u.sendSides(ctx, true)
			return nil
		}
	}
}

// Run uploads until ctx is cancelled, then returns nil; it never gives up. Rows are sent
// when BatchRows of them wait or the first has waited BatchAge; HQ being away, for however
// long, only delays them; a batch HQ refuses is logged as an error and tried again every
// RefusedRetry; a failure to read the ledger or to write the state is logged and retried
// with backoff, and so is a ledger restored under it from a backup older than the last row
// HQ acknowledged: nothing more is sent from it, as New refuses it.
func (u *Uploader) Run(ctx context.Context) error {
	failures := 0
	for ctx.Err() == nil {
		did, err := u.step(ctx, false)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			// The ledger or the state could not be read or written (a busy or full disk), or
			// the ledger was restored from before the last row HQ acknowledged: nothing was
			// lost; try again.
			u.log.Error("upload step failed", "err", err)
			u.met.stepFailed()
			if !sleep(ctx, u.backoff(failures)) {
				return nil
			}
			failures++
			continue
		}
		failures = 0
		if !did {
			u.sendSides(ctx, false)
			sleep(ctx, u.cfg.PollInterval)
		}
	}
	return nil
}

// step sends the pending batch, or builds, records and sends the next one. It reports
// whether there was anything to send.
func (u *Uploader) step(ctx context.Context, force bool) (bool, error) {
	if err := u.followLedger(ctx); err != nil {
		return false, err
	}
	b, err := u.pending(ctx)
	if err != nil {
		return false, err
	}
	if b == nil {
		if b, err = u.build(ctx, force); err != nil || b == nil {
			return false, err
		}
		if err := u.record(ctx, b); err != nil {
			return false, err
		}
		if u.afterRecord != nil {
			if err := u.afterRecord(b.id); err != nil {
				return false, err
			}
		}
	}
	return true, u.deliver(ctx, b, force)
}
