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
	"bytes"
	"context"
	crand "crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	sclient "github.com/posgate/posgate/store-server/client"

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
	case len(c.Secret) == 0:
		return errors.New("upload: the store's secret is required")
	}
	u, err := url.Parse(c.HQURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("upload: HQ URL %q is not an http(s) URL", c.HQURL)
	}
	return nil
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
	met       *metrics // nil: none

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
		maxParts: hqwire.MaxDayParts}
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

// ledgerHoldsBatch reports whether the ledger's outbox rows from the batch's first id to its
// last are the batch's rows, every one in order. The last alone matched when terminals sent
// again, after a restore, events the batch held, and a new row at one of its ids was skipped.
func (u *Uploader) ledgerHoldsBatch(ctx context.Context, b *batch) (bool, error) {
	// Only the rows' keys are compared: decoding the rows' content, and reading it back from
	// the ledger, cost more than building the batch did.
	var sent struct {
		Rows []struct {
			Terminal string `json:"terminal"`
			Seq      int64  `json:"seq"`
			Hash     string `json:"hash"`
		} `json:"rows"`
	}
	if err := json.Unmarshal(b.body, &sent); err != nil {
		return false, fmt.Errorf("batch %s body: %w", b.id, err)
	}
	var keys []ledger.OutboxKey
	if err := u.ledger.ViewHQ(ctx, func(r *ledger.HQReader) error {
		var err error
		keys, err = r.OutboxKeysAfter(ctx, b.firstID-1, len(sent.Rows))
		return err
	}); err != nil {
		return false, err
	}
	if len(keys) != len(sent.Rows) || len(keys) == 0 || keys[0].ID != b.firstID || keys[len(keys)-1].ID != b.lastID {
		return false, nil
	}
	for i, k := range keys {
		if r := &sent.Rows[i]; k.Terminal != r.Terminal || k.Seq != r.Seq || k.Hash != r.Hash {
			return false, nil
		}
	}
	return true, nil
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
// pending, and a ledger that no longer holds the last row HQ acknowledged with one of kind
// perr.Conflict (code "ledger_behind_hq").
func (u *Uploader) Once(ctx context.Context) error {
	for {
		did, err := u.step(ctx, true)
		if err != nil {
			return err
		}
		if !did {
			u.prog.final(u)
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

// batch is a recorded batch as the state holds it.
type batch struct {
	id          string
	firstID     int64
	lastID      int64
	rows        int
	dates       map[string]int    // business date → rows of that date in the batch
	days        map[string]int64  // business date → revision declared whole
	parts       map[string]partOf // business date → the part of a declaration in parts
	lastKey     string
	xThrough    int64 // the exception change its receipt acknowledges through (0: none carried)
	body        []byte
	contentHash string
	attempts    int
}

// pending returns the recorded batch HQ has not acknowledged, if any.
func (u *Uploader) pending(ctx context.Context) (*batch, error) {
	var b batch
	var dates, days, parts string
	err := u.state.R.QueryRowContext(ctx, `SELECT batch_id, first_id, last_id, rows, dates, days, parts, last_key,
		exceptions_through, content_hash, body, attempts FROM batches WHERE state = 'pending'`).Scan(&b.id, &b.firstID,
		&b.lastID, &b.rows, &dates, &days, &parts, &b.lastKey, &b.xThrough, &b.contentHash, &b.body, &b.attempts)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read pending batch: %w", err)
	}
	if err := json.Unmarshal([]byte(dates), &b.dates); err != nil {
		return nil, fmt.Errorf("pending batch %s: %w", b.id, err)
	}
	if err := json.Unmarshal([]byte(days), &b.days); err != nil {
		return nil, fmt.Errorf("pending batch %s: %w", b.id, err)
	}
	if err := json.Unmarshal([]byte(parts), &b.parts); err != nil {
		return nil, fmt.Errorf("pending batch %s: %w", b.id, err)
	}
	if hqwire.ContentHash(b.body) != b.contentHash {
		return nil, fmt.Errorf("pending batch %s: the stored body does not match its hash", b.id)
	}
	return &b, nil
}

// build makes the next batch from the ledger rows after the watermark and the declarations
// that are due, or returns nil when there is nothing to send yet.
func (u *Uploader) build(ctx context.Context, force bool) (*batch, error) {
	kv, err := u.kv(ctx)
	if err != nil {
		return nil, err
	}
	through := atoi(kv["sent_through"])
	xThrough := atoi(kv["exceptions_through"])
	now := u.cfg.Now()
	today := now.In(u.cfg.Location).Format(wire.BusinessDate)
	candidates, err := u.undeclared(ctx, today)
	if err != nil {
		return nil, err
	}
	waiting, err := u.waitingParts(ctx)
	if err != nil {
		return nil, err
	}
	out := hqwire.Batch{V: hqwire.Version, Store: u.cfg.Store, ID: batchID(u.cfg.Store, kv["batch_series"], atoi(kv["next_batch"])+1),
		SentAt: now.UTC()}
	parts := map[string]partOf{} // the parts this batch carries
	used := 0                    // body bytes taken by the days and rows so far
	// add puts declaration d (n bytes of JSON; covered: see partOf) in the batch if it fits.
	add := func(d hqwire.StoreDay, covered int64, n int) bool {
		if len(out.Days) > 0 && used+n > u.budget {
			return false // the next batch declares the rest
		}
		used += n
		out.Days = append(out.Days, d)
		if d.InParts() {
			parts[d.BusinessDate] = partOf{Revision: d.Revision, Part: d.Part, Parts: d.Parts, Covered: covered}
		}
		return true
	}
	// The next part of each day being declared in parts goes first: HQ keeps the parts
	// aside until the last one, so the day stands at HQ only when they have all gone.
	for _, w := range waiting {
		if !add(w.day, w.covered, w.size) {
			break
		}
	}
	var rows []ledger.OutboxRow
	var xs []hqwire.Exception // the exceptions this batch carries
	var xCursor int64         // the change the batch's receipt acknowledges exceptions through
	var xFull bool            // more changes than one batch takes wait: the batch is due
	var tooLarge []string     // due days whose declaration HQ could not take even in parts
	var split []splitDay      // due days too large for one batch, split into parts here
	err = u.ledger.ViewHQ(ctx, func(r *ledger.HQReader) error {
		// The ledger may have been restored from a backup under the running uploader, as it
		// may before a start (claim): rows sold since took ids up to the watermark again, and
		// nothing is read from a ledger that no longer holds the last row HQ acknowledged.
		if through > 0 {
			held, err := uploadstate.RowHeld(ctx, r, through, kv["sent_key"])
			if err != nil {
				return err
			}
			if !held {
				return u.behind(through, kv["sent_key"])
			}
		}
		for _, c := range candidates {
			if waiting.has(c.date) {
				continue // its parts are on their way
			}
			// Due once no row of the date is left after the watermark; the manifest comes
			// from the same snapshot, so it lists exactly the rows HQ acknowledged.
			more, err := r.HasOutboxAfter(ctx, c.date, through)
			if err != nil {
				return err
			}
			if more {
				continue
			}
			txns, err := r.DayManifest(ctx, c.date)
			if err != nil {
				return err
			}
			d := hqwire.StoreDay{BusinessDate: c.date, Revision: c.revision + 1, ClosedAt: now.UTC(), Txns: txns}
			n, err := jsonSize(&d)
			if err != nil {
				return err
			}
			if n <= u.dayLimit {
				if !add(d, 0, n) {
					break
				}
				continue
			}
			// Too large for one batch: in parts, taken from this snapshot once.
			ps, err := splitParts(d, u.dayLimit)
			if err != nil {
				return err
			}
			if len(ps) > u.maxParts {
				u.log.Error("a day declaration would take more parts than HQ takes: the day is left undeclared "+
					"(HQ's reconcile shows it as no_store_day); its rows are sent", "business_date", d.BusinessDate,
					"bytes", n, "parts", len(ps), "limit", u.maxParts, "txns", len(d.Txns))
				tooLarge = append(tooLarge, d.BusinessDate)
				continue
			}
			u.log.Info("declaring a day in parts: it is larger than one batch", "business_date", d.BusinessDate,
				"revision", d.Revision, "txns", len(d.Txns), "bytes", n, "parts", len(ps))
			split = append(split, splitDay{parts: ps, covered: c.sentRows})
			size, err := jsonSize(&ps[0])
			if err != nil {
				return err
			}
			if !add(ps[0], c.sentRows, size) {
				break
			}
		}
		maxID, err := r.OutboxMaxID(ctx)
		if err != nil {
			return err
		}
		changed, last, full, err := r.ExceptionsAfter(ctx, xThrough, hqwire.MaxBatchExceptions)
		if err != nil {
			return err
		}
		// While rows wait, the exceptions take at most half of the room the days leave:
		// a backlog of changes with long details (a manager resolving a day of oversells
		// at once, a day of parked events) filled every batch, and the sales behind it
		// waited for all of it to drain. Rows go in every batch, changes too.
		xLimit := u.budget
		if maxID > through {
			xLimit = used + (u.budget-used)/2
		}
		xFull = full
		for i := range changed {
			x := &changed[i]
			x.SKU = hqwire.EscapeSKU(x.SKU)
			x.Detail, x.Resolution = fitText(x.Detail), fitText(x.Resolution)
			js, err := json.Marshal(x)
			if err != nil {
				return err
			}
			if used+len(js)+1 > xLimit && (len(xs) > 0 || len(out.Days) > 0) {
				// The next batch takes the rest: every exception whose last change is up
				// to the cursor is in this one (they come in change order).
				if len(xs) > 0 {
					last = xs[len(xs)-1].Change
				}
				xFull = true
				break
			}
			used += len(js) + 1
			xs = append(xs, *x)
		}
		if len(xs) > 0 {
			xCursor = last
		}
		if maxID <= through && len(xs) == 0 {
			u.firstSeen = time.Time{}
			return nil
		}
		if u.firstSeen.IsZero() {
			u.firstSeen = time.Now()
		}
		if !force && len(out.Days) == 0 && !xFull && maxID-through < int64(u.cfg.BatchRows) &&
			time.Since(u.firstSeen) < u.cfg.BatchAge {
			// Exception changes wait with the rows (in a store whose sales oversell, no
			// stock counted, each sale is one), unless they fill a batch.
			xs, xCursor = nil, 0
			return nil
		}
		if maxID > through {
			rows, err = r.OutboxAfter(ctx, through, u.cfg.BatchRows)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("build batch: %w", err)
	}
	if err := u.keepParts(ctx, split); err != nil {
		return nil, fmt.Errorf("build batch: %w", err)
	}
	for _, date := range tooLarge {
		if _, err := u.state.W.ExecContext(ctx, `UPDATE days SET skipped_rows = sent_rows WHERE business_date = ?`,
			date); err != nil {
			return nil, fmt.Errorf("build batch: %w", err)
		}
	}
	if len(out.Days) == 0 && len(rows) == 0 && len(xs) == 0 {
		return nil, nil
	}

	b := &batch{id: out.ID, lastID: through, dates: map[string]int{}, days: map[string]int64{}, parts: parts,
		xThrough: xCursor}
	out.Exceptions = xs
	for _, d := range out.Days {
		if !d.InParts() {
			b.days[d.BusinessDate] = d.Revision
		}
	}
	// Each row is encoded once: its size decides whether it fits, and the body is put
	// together from the encodings.
	rowsJSON := bytes.NewBuffer(make([]byte, 0, 64<<10))
	rowsJSON.WriteByte('[')
	for i := range rows {
		js, err := json.Marshal(&rows[i].Row)
		if err != nil {
			return nil, fmt.Errorf("hq_outbox row %d: %w", rows[i].ID, err)
		}
		n := len(js) + 1
		if used+n > u.budget && (len(out.Rows) > 0 || len(out.Days) > 0 || len(xs) > 0) {
			break // the rest go in the next batch
		}
		if n > u.budget {
			u.log.Error("a row is larger than an HQ batch may be; sending it alone",
				"terminal", rows[i].Row.Terminal, "seq", rows[i].Row.Seq, "bytes", n)
		}
		used += n
		if len(out.Rows) > 0 {
			rowsJSON.WriteByte(',')
		}
		rowsJSON.Write(js)
		out.Rows = append(out.Rows, rows[i].Row)
		if b.firstID == 0 {
			b.firstID = rows[i].ID
		}
		b.lastID = rows[i].ID
		b.lastKey = uploadstate.RowKey(&rows[i])
		b.dates[rows[i].Row.BusinessDate]++
	}
	b.rows = len(out.Rows)
	if b.rows > 0 || len(xs) > 0 {
		u.firstSeen = time.Time{} // rows and changes left behind start waiting now
	}
	rowsJSON.WriteByte(']')
	if b.body, err = encodeBatch(&out, rowsJSON.Bytes()); err != nil {
		return nil, fmt.Errorf("encode batch %s: %w", out.ID, err)
	}
	b.contentHash = hqwire.ContentHash(b.body)
	return b, nil
}

// fitText makes an exception's text one HQ takes: without NUL characters (HQ refuses them:
// PostgreSQL text cannot hold one) and at most hqwire.MaxExceptionText bytes, cut at a
// character. A refused batch would hold back every row after it for one note.
func fitText(s string) string {
	s = strings.ReplaceAll(s, "\x00", "")
	if len(s) <= hqwire.MaxExceptionText {
		return s
	}
	const more = "…"
	cut := hqwire.MaxExceptionText - len(more)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + more
}

// encodeBatch returns the JSON of b whose rows are already encoded as rowsJSON (a JSON
// array): b is encoded without its rows, and the array takes the place of "rows":null.
// The rows field comes first among the fields that can hold text, so the first
// occurrence is the field itself.
func encodeBatch(b *hqwire.Batch, rowsJSON []byte) ([]byte, error) {
	head := *b
	head.Rows = nil
	js, err := json.Marshal(&head)
	if err != nil {
		return nil, err
	}
	const null = `"rows":null`
	i := bytes.Index(js, []byte(null))
	if i < 0 {
		return nil, errors.New(`no "rows":null in the encoded batch`)
	}
	body := make([]byte, 0, len(js)+len(rowsJSON))
	body = append(body, js[:i+len(`"rows":`)]...)
	body = append(body, rowsJSON...)
	return append(body, js[i+len(null):]...), nil
}

func jsonSize(v any) (int, error) {
	b, err := json.Marshal(v)
	return len(b) + 1, err // and a comma
}

// batchID returns the id of the n-th batch of a store in a series: "S1-9f86d081-000000042"
// in series 9f86d081. HQ keys batches by store and id, so the store's name is there only
// for people reading logs: with a store id too long for it to fit in an id
// (wire.MaxIDLen), the id is "9f86d081-000000042".
func batchID(store, series string, n int64) string {
	if id := fmt.Sprintf("%s-%s-%09d", store, series, n); len(id) <= wire.MaxIDLen {
		return id
	}
	return fmt.Sprintf("%s-%09d", series, n)
}

type undeclaredDay struct {
	date     string
	revision int64 // the last revision HQ acknowledged
	sentRows int64 // rows of the date HQ acknowledged
}

// undeclared returns the business dates before today with rows HQ acknowledged since the
// date's last declaration (or that were never declared), then the days the store did not
// trade (see emptyDays).
func (u *Uploader) undeclared(ctx context.Context, today string) ([]undeclaredDay, error) {
	rows, err := u.state.R.QueryContext(ctx, `SELECT business_date, revision, sent_rows FROM days
		WHERE business_date < ? AND sent_rows > declared_rows AND sent_rows <> skipped_rows
		ORDER BY business_date`, today)
	if err != nil {
		return nil, fmt.Errorf("read days: %w", err)
	}
	defer rows.Close()
	var out []undeclaredDay
	for rows.Next() {
		var d undeclaredDay
		if err := rows.Scan(&d.date, &d.revision, &d.sentRows); err != nil {
			return nil, fmt.Errorf("read days: %w", err)
		}
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	empty, err := u.emptyDays(ctx, today)
	return append(out, empty...), err
}

// maxEmptyDays bounds the days without trade the uploader declares: those of the last
// maxEmptyDays days before today. One sale dated years back (a till whose clock had reset)
// had it declare every day since as empty, thousands of them, and walk them all at every
// poll.
const maxEmptyDays = 31

// retiredAfter is how long a terminal unheard of stops counting as one of the store's: as
// long as the days declared empty go back, so that a till cut off for weeks still holds
// back every day it may have sold on.
const retiredAfter = maxEmptyDays * 24 * time.Hour

// emptyDays returns the days, of the last maxEmptyDays before today and after the first day
// the store had rows of, of which HQ acknowledged no row and that were never declared: the
// store did not trade (a holiday, a refit). Without their declarations HQ's reconcile could
// not tell a store closed for the day from one whose upload is stuck, and reported the day
// NOT OK every night. A day is taken for one without trade only once a terminal has been
// heard from since it ended and every terminal heard from in the maxEmptyDays before it has
// too: tills cut off from the store all day hold its sales, and the day declared empty read
// as OK at HQ. (build also checks that no row of the day waits in the ledger.)
func (u *Uploader) emptyDays(ctx context.Context, today string) ([]undeclaredDay, error) {
	var first sql.NullString
	if err := u.state.R.QueryRowContext(ctx, `SELECT min(business_date) FROM days`).Scan(&first); err != nil {
		return nil, fmt.Errorf("read days: %w", err)
	}
	if !first.Valid {
		return nil, nil
	}
	end, err := time.ParseInLocation(wire.BusinessDate, today, u.cfg.Location)
	if err != nil {
		return nil, err
	}
	from := end.AddDate(0, 0, -maxEmptyDays).Format(wire.BusinessDate)
	if first.String >= from {
		from = first.String // and after it
	}
	known := map[string]bool{first.String: true}
	rows, err := u.state.R.QueryContext(ctx, `SELECT business_date FROM days WHERE business_date >= ? AND business_date < ?`,
		from, today)
	if err != nil {
		return nil, fmt.Errorf("read days: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var d string
		if err := rows.Scan(&d); err != nil {
			return nil, fmt.Errorf("read days: %w", err)
		}
		known[d] = true
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	var missing []time.Time
	start, err := time.ParseInLocation(wire.BusinessDate, from, u.cfg.Location)
	if err != nil {
		return nil, err
	}
	for d := start; d.Before(end); d = d.AddDate(0, 0, 1) {
		if !known[d.Format(wire.BusinessDate)] {
			missing = append(missing, d)
		}
	}
	if len(missing) == 0 {
		return nil, nil
	}
	seen, err := u.ledger.Terminals(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the ledger's terminals: %w", err)
	}
	var out []undeclaredDay
	for _, d := range missing {
		dayEnd := d.AddDate(0, 0, 1)
		heard, silent := false, false
		for _, ts := range seen {
			// By the time of the terminal's last event (a heartbeat, while it is online).
			switch {
			case ts.LastAt.After(u.cfg.Now().Add(time.Hour)):
				silent = true // a till clock ahead says nothing of when it was last heard
			case !ts.LastAt.Before(dayEnd):
				heard = true
			case ts.LastAt.After(d.Add(-retiredAfter)):
				silent = true // a till of the store not heard from since the day ended
			}
		}
		if heard && !silent { // some till heard since, and none of the store's silent
			out = append(out, undeclaredDay{date: d.Format(wire.BusinessDate)})
		}
	}
	return out, nil
}

// partOf is the part of a declaration in parts that a batch carries. A batch records its
// parts apart from its whole declarations (days): its receipt declares a day of its days,
// and a day of its parts only with the last part.
type partOf struct {
	Revision int64 `json:"revision"`
	Part     int   `json:"part"`
	Parts    int   `json:"parts"`
	// Covered is the day's sent_rows when its list was taken: the last part's receipt
	// makes it declared_rows, so rows sent since are declared by the next revision.
	Covered int64 `json:"covered"`
}

// splitParts cuts a declaration into parts whose JSON takes at most limit bytes each, in
// the list's order, all with a new split id. A transaction larger than limit on its own
// still makes a part.
func splitParts(d hqwire.StoreDay, limit int) ([]hqwire.StoreDay, error) {
	d.Split = crand.Text()[:16] // 80 random bits
	head := d
	head.Txns = nil
	head.Part, head.Parts = hqwire.MaxDayParts, hqwire.MaxDayParts // the widest numbers a part can have
	base, err := jsonSize(&head)
	if err != nil {
		return nil, err
	}
	var out []hqwire.StoreDay
	from, size := 0, base
	for i := range d.Txns {
		n, err := jsonSize(&d.Txns[i])
		if err != nil {
			return nil, err
		}
		if size+n > limit && i > from {
			out = append(out, d)
			out[len(out)-1].Txns = d.Txns[from:i:i]
			from, size = i, base
		}
		size += n
	}
	out = append(out, d)
	out[len(out)-1].Txns = d.Txns[from:]
	for i := range out {
		out[i].Part, out[i].Parts = i+1, len(out)
	}
	return out, nil
}

// splitDay is a day split into parts by build, to be kept in the state.
type splitDay struct {
	parts   []hqwire.StoreDay
	covered int64
}

// keepParts records the parts of days split for a declaration in parts, in one transaction.
func (u *Uploader) keepParts(ctx context.Context, days []splitDay) error {
	if len(days) == 0 {
		return nil
	}
	tx, err := u.state.W.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("keep day parts: %w", err)
	}
	defer tx.Rollback()
	for _, sd := range days {
		for _, d := range sd.parts {
			txns, err := json.Marshal(d.Txns)
			if err != nil {
				return fmt.Errorf("keep day parts: %w", err)
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO day_parts (business_date, part, parts, revision, covered_rows,
				closed_at, split, txns) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, d.BusinessDate, d.Part, d.Parts, d.Revision,
				sd.covered, d.ClosedAt.UTC().Format(time.RFC3339Nano), d.Split, txns); err != nil {
				return fmt.Errorf("keep day parts of %s: %w", d.BusinessDate, err)
			}
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("keep day parts: %w", err)
	}
	return nil
}

// waitingPart is the next part of a day being declared in parts.
type waitingPart struct {
	day     hqwire.StoreDay
	covered int64 // see partOf
	size    int   // its JSON in a batch body
}

// waitingList is the next part of each day being declared in parts, in date order.
type waitingList []waitingPart

func (l waitingList) has(date string) bool {
	return slices.ContainsFunc(l, func(w waitingPart) bool { return w.day.BusinessDate == date })
}

// waitingParts returns the next part to send of each day being declared in parts.
func (u *Uploader) waitingParts(ctx context.Context) (waitingList, error) {
	rows, err := u.state.R.QueryContext(ctx, `SELECT business_date, min(part), parts, revision, covered_rows,
		closed_at, split, txns FROM day_parts GROUP BY business_date ORDER BY business_date`)
	if err != nil {
		return nil, fmt.Errorf("read day parts: %w", err)
	}
	defer rows.Close()
	var out waitingList
	for rows.Next() {
		var w waitingPart
		var closed string
		var txns []byte
		if err := rows.Scan(&w.day.BusinessDate, &w.day.Part, &w.day.Parts, &w.day.Revision, &w.covered, &closed,
			&w.day.Split, &txns); err != nil {
			return nil, fmt.Errorf("read day parts: %w", err)
		}
		if w.day.ClosedAt, err = time.Parse(time.RFC3339Nano, closed); err != nil {
			return nil, fmt.Errorf("read day parts of %s: %w", w.day.BusinessDate, err)
		}
		if err := json.Unmarshal(txns, &w.day.Txns); err != nil {
			return nil, fmt.Errorf("read day parts of %s: %w", w.day.BusinessDate, err)
		}
		if w.size, err = jsonSize(&w.day); err != nil {
			return nil, err
		}
		out = append(out, w)
	}
	return out, rows.Err()
}

// record stores a batch before it is first sent, and advances the batch counter.
func (u *Uploader) record(ctx context.Context, b *batch) error {
	dates, _ := json.Marshal(b.dates)
	days, _ := json.Marshal(b.days)
	parts, _ := json.Marshal(b.parts)
	tx, err := u.state.W.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("record batch %s: %w", b.id, err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `INSERT INTO batches (batch_id, first_id, last_id, rows, dates, days, parts,
		last_key, exceptions_through, content_hash, body, state, created)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'pending', ?)`, b.id, b.firstID, b.lastID, b.rows, string(dates),
		string(days), string(parts), b.lastKey, b.xThrough, b.contentHash, b.body, u.stamp()); err != nil {
		return fmt.Errorf("record batch %s: %w", b.id, err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO kv (k, v) VALUES ('next_batch', '1')
		ON CONFLICT (k) DO UPDATE SET v = CAST(v AS INTEGER) + 1`); err != nil {
		return fmt.Errorf("record batch %s: %w", b.id, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("record batch %s: %w", b.id, err)
	}
	return nil
}

func (u *Uploader) stamp() string { return u.cfg.Now().UTC().Format(time.RFC3339Nano) }

// markSent records HQ's receipt: the batch is sent, the watermark moves to its last row,
// its rows count for their dates, its declarations are acknowledged, and so are its
// exceptions' changes.
func (u *Uploader) markSent(ctx context.Context, b *batch, rc *hqwire.Receipt, receipt []byte) error {
	// The watermark moves to the batch's last row only while the ledger still holds that row:
	// a ledger restored from a backup under a waiting batch has other rows at its ids (sold
	// after the restore), and a watermark past them skipped them for good. The batch's rows
	// happened all the same, and HQ has them now.
	advance := b.rows > 0
	if advance {
		if err := u.followLedger(ctx); err != nil { // HQ may have been away for days
			return fmt.Errorf("mark batch %s sent: %w", b.id, err)
		}
		held, err := u.ledgerHoldsBatch(ctx, b)
		if err != nil {
			return fmt.Errorf("mark batch %s sent: %w", b.id, err)
		}
		if !held {
			u.log.Warn("HQ took a batch whose rows the ledger no longer holds (restored from a backup?); "+
				"the rows now at its ids go next", "batch", b.id, "last_id", b.lastID, "last_key", b.lastKey)
			advance = false
		}
	}
	tx, err := u.state.W.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("mark batch %s sent: %w", b.id, err)
	}
	defer tx.Rollback()
	now := u.stamp()
	exec := func(query string, args ...any) {
		if err == nil {
			_, err = tx.ExecContext(ctx, query, args...)
		}
	}
	exec(`UPDATE batches SET state = 'sent', sent_at = ?, receipt = ?, body = NULL WHERE batch_id = ? AND state = 'pending'`,
		now, string(receipt), b.id)
	exec(`INSERT INTO kv (k, v) VALUES ('batches_sent', '1') ON CONFLICT (k) DO UPDATE SET v = CAST(v AS INTEGER) + 1`)
	// Nothing reads a sent batch but for the time of the last one (Status): the state keeps
	// a week of them, for an operator to look back, and no more.
	exec(`DELETE FROM batches WHERE state = 'sent' AND sent_at < ?`,
		u.cfg.Now().Add(-KeepSentBatches).UTC().Format(time.RFC3339Nano))
	if advance {
		exec(`INSERT INTO kv (k, v) VALUES ('sent_through', ?) ON CONFLICT (k) DO UPDATE SET v = excluded.v`,
			strconv.FormatInt(b.lastID, 10))
		exec(`INSERT INTO kv (k, v) VALUES ('sent_key', ?) ON CONFLICT (k) DO UPDATE SET v = excluded.v`, b.lastKey)
	}
	if b.xThrough > 0 {
		exec(`INSERT INTO kv (k, v) VALUES ('exceptions_through', ?)
			ON CONFLICT (k) DO UPDATE SET v = excluded.v WHERE CAST(excluded.v AS INTEGER) > CAST(v AS INTEGER)`,
			strconv.FormatInt(b.xThrough, 10))
	}
	for date, n := range b.dates {
		if !advance { // rows of another ledger: the day's count is of this one's
			break
		}
		exec(`INSERT INTO days (business_date, sent_rows) VALUES (?, ?)
			ON CONFLICT (business_date) DO UPDATE SET sent_rows = sent_rows + excluded.sent_rows`, date, n)
	}
	for date := range b.days { // a day without trade has no row yet
		exec(`INSERT INTO days (business_date, sent_rows) VALUES (?, 0) ON CONFLICT (business_date) DO NOTHING`, date)
	}
	for date, rev := range b.days {
		if held, ok := rc.DaysHeld[date]; ok && held >= rev {
			// HQ holds the day at this revision or a later one, declared by a state this one
			// replaced: the day stays due, and its next declaration goes above HQ's.
			u.log.Warn("HQ holds a later declaration of the day than this upload state knows; declaring it again",
				"batch", b.id, "business_date", date, "revision", rev, "hq_revision", held)
			exec(`UPDATE days SET revision = ? WHERE business_date = ?`, held, date)
			continue
		}
		exec(`UPDATE days SET revision = ?, declared_rows = sent_rows, declared_at = ? WHERE business_date = ?`,
			rev, now, date)
	}
	for date, p := range b.parts {
		switch held, heldOK := rc.DaysHeld[date]; {
		case heldOK && held >= p.Revision: // as for a whole declaration, and its parts go
			u.log.Warn("HQ holds a later declaration of the day than this upload state knows; declaring it again",
				"batch", b.id, "business_date", date, "revision", p.Revision, "hq_revision", held)
			exec(`UPDATE days SET revision = ? WHERE business_date = ?`, held, date)
			exec(`DELETE FROM day_parts WHERE business_date = ?`, date)
		case rc.PartsDropped[date] != 0:
			// HQ did not keep the part: it does not hold the parts before it (a state that
			// started over, or HQ's database restored). The day stays due and is declared
			// again from part 1, from the ledger as it is then.
			u.log.Warn("HQ did not keep a part of the day's declaration; declaring the day again from its first part",
				"batch", b.id, "business_date", date, "revision", p.Revision, "part", p.Part, "parts", p.Parts)
			exec(`DELETE FROM day_parts WHERE business_date = ?`, date)
		default:
			exec(`DELETE FROM day_parts WHERE business_date = ? AND part = ?`, date, p.Part)
			if p.Part == p.Parts { // the last part: the revision stands at HQ
				exec(`UPDATE days SET revision = ?, declared_rows = ?, declared_at = ? WHERE business_date = ?`,
					p.Revision, p.Covered, now, date)
			}
		}
	}
	if err == nil {
		err = tx.Commit()
	}
	if err != nil {
		return fmt.Errorf("mark batch %s sent: %w", b.id, err)
	}
	return nil
}

// deliver sends a recorded batch until HQ acknowledges it. In once mode a refusal ends it
// with an error; otherwise a refusal is retried every RefusedRetry.
func (u *Uploader) deliver(ctx context.Context, b *batch, once bool) error {
	log := u.log.With("batch", b.id)
	for attempt := 0; ; attempt++ {
		receipt, raw, err := u.post(ctx, b)
		if err == nil {
			if u.afterSend != nil {
				if err := u.afterSend(b.id); err != nil {
					return err
				}
			}
			if err := u.markSent(ctx, b, &receipt, raw); err != nil {
				return err
			}
			u.met.sent(b)
			if attempt > 0 || b.attempts > 0 {
				log.Info("HQ acknowledged the batch after retries", "attempts", b.attempts+attempt+1)
			}
			log.Debug("batch sent", "rows", b.rows, "new", receipt.New, "duplicate", receipt.Duplicate,
				"days", len(b.days), "exceptions", receipt.Exceptions)
			u.prog.sent(u, ctx, b)
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var wait time.Duration
		var se *sendError
		errors.As(err, &se)
		if _, uerr := u.state.W.ExecContext(ctx, `UPDATE batches SET attempts = attempts + 1, last_error = ?
			WHERE batch_id = ?`, err.Error(), b.id); uerr != nil && ctx.Err() == nil {
			log.Warn("cannot count the failed attempt", "err", uerr)
		}
		// HQ may stay away for days, and the ledger be restored meanwhile by moving a file
		// into its place: Status and the metrics read the file the path names (ledger_behind_hq
		// says so while the batch waits), not the one open before.
		if ferr := u.followLedger(ctx); ferr != nil && ctx.Err() == nil {
			log.Warn("cannot open the ledger's new file", "err", ferr)
		}
		if se != nil && se.refused && se.status == http.StatusUnprocessableEntity && se.code == hqwire.CodeBatchIDReused {
			log.Warn("HQ holds this batch id with other content: this upload state is not the only one of its "+
				"batch series (restored from a backup?); starting a new series, the batch's rows go again", "answer", se.body)
			u.met.resent()
			return u.newSeries(ctx, b)
		}
		u.met.failed(err)
		if se != nil && se.refused {
			// Never skip the batch: its rows would be missing at HQ and the day could not be
			// declared. It stays pending and the rows after it wait for an operator.
			log.Error("HQ REFUSED THE BATCH; it stays pending and every later row waits until the cause is fixed",
				"status", se.status, "answer", se.body, "attempts", b.attempts+attempt+1)
			if once {
				return perr.Wrap(err, perr.Refused, CodeRefused, "HQ refused batch %s (status %d)", b.id, se.status)
			}
			wait = u.cfg.RefusedRetry/2 + jitter(u.cfg.RefusedRetry/2)
		} else {
			wait = u.backoff(attempt)
			if se != nil && se.retryAfter > wait {
				wait = min(se.retryAfter, max(u.cfg.RetryCap, wait))
			}
			lvl := slog.LevelWarn
			if se != nil && se.badReceipt {
				lvl = slog.LevelError
			}
			log.Log(ctx, lvl, "send failed; will retry", "err", err, "attempt", attempt+1, "wait", wait)
		}
		if !sleep(ctx, wait) {
			return ctx.Err()
		}
	}
}

// newSeries forgets pending batch b, whose id HQ holds with other content, and starts a
// new batch series: a state restored from a backup (or copied from another store's) goes
// on numbering batches HQ already took from the state it was copied from, and every one of
// them would be refused, the rows behind it held back for ever. The batch's rows are after
// the watermark still and go again under new ids; HQ keeps one of each row, and answers a
// declaration older than the one it holds with the revision it holds.
func (u *Uploader) newSeries(ctx context.Context, b *batch) error {
	return u.dropBatch(ctx, b, `UPDATE kv SET v = CASE k WHEN 'batch_series' THEN ? ELSE '0' END
		WHERE k IN ('batch_series', 'next_batch')`, strings.ToLower(crand.Text()[:8]))
}

// dropBatch deletes pending batch b and runs stmt with args in the same transaction.
func (u *Uploader) dropBatch(ctx context.Context, b *batch, stmt string, args ...any) error {
	tx, err := u.state.W.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("drop batch %s: %w", b.id, err)
	}
	defer tx.Rollback()
	_, err = tx.ExecContext(ctx, `DELETE FROM batches WHERE batch_id = ? AND state = 'pending'`, b.id)
	if err == nil {
		_, err = tx.ExecContext(ctx, stmt, args...)
	}
	if err == nil {
		err = tx.Commit()
	}
	if err != nil {
		return fmt.Errorf("drop batch %s: %w", b.id, err)
	}
	return nil
}

// backoff returns the wait after the n-th failure in a row (from 0): full jitter over an
// exponentially growing window, capped.
func (u *Uploader) backoff(n int) time.Duration {
	window := u.cfg.RetryCap
	if n < 40 {
		if w := u.cfg.RetryBase << n; w > 0 && w < window {
			window = w
		}
	}
	return jitter(window)
}

// jitter returns a uniformly random duration in [0, d].
func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return time.Duration(rand.Int64N(int64(d) + 1))
}

// sleep waits d or until ctx is done; it reports whether the wait ran to its end.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// sendError is a failed send that reached HQ and got an answer that is not a receipt.
type sendError struct {
	status     int
	body       string
	refused    bool // a 4xx other than 408 and 429: sending it again as it is fails again
	badReceipt bool // 200 without a receipt for this batch
	retryAfter time.Duration
	// The code of HQ's problem document, if the answer is one.
	code string
}

func (e *sendError) Error() string {
	switch {
	case e.badReceipt:
		return fmt.Sprintf("HQ answered 200 without a receipt for the batch: %s", e.body)
	case e.refused:
		return fmt.Sprintf("HQ refused the batch: %d %s", e.status, e.body)
	}
	return fmt.Sprintf("HQ answered %d %s", e.status, e.body)
}

// post sends a batch once, signed, and returns HQ's receipt for it.
func (u *Uploader) post(ctx context.Context, b *batch) (hqwire.Receipt, []byte, error) {
	var rec hqwire.Receipt
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.cfg.HQURL, bytes.NewReader(b.body))
	if err != nil {
		return rec, nil, err
	}
	ts := strconv.FormatInt(u.cfg.Now().Unix(), 10)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(hqwire.HeaderStore, u.cfg.Store)
	req.Header.Set(hqwire.HeaderTimestamp, ts)
	req.Header.Set(hqwire.HeaderIdemKey, b.id)
	req.Header.Set(hqwire.HeaderSignature, hqwire.Sign(u.cfg.Secret, http.MethodPost, u.path, u.cfg.Store, ts, b.id, b.body))
	resp, err := u.cfg.Client.Do(req)
	if err != nil {
		return rec, nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return rec, nil, fmt.Errorf("read HQ's answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		// 5xx, 408 and 429 are worth retrying as they are. Any other 4xx will be answered
		// the same way again, and so will a 2xx or 3xx that is not 200 with a receipt (an
		// endpoint that is not hq-sync serve's).
		se := &sendError{status: resp.StatusCode, body: short(raw), refused: resp.StatusCode < 500 &&
			resp.StatusCode != http.StatusRequestTimeout && resp.StatusCode != http.StatusTooManyRequests}
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
			se.retryAfter = time.Duration(s) * time.Second
		}
		var p struct {
			Code string `json:"code"`
		}
		if json.Unmarshal(raw, &p) == nil {
			se.code = p.Code
		}
		return rec, nil, se
	}
	if err := json.Unmarshal(raw, &rec); err != nil || rec.BatchID != b.id || (rec.Store != "" && rec.Store != u.cfg.Store) {
		return rec, nil, &sendError{status: resp.StatusCode, body: short(raw), badReceipt: true}
	}
	return rec, raw, nil
}

func short(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

// Status reads the uploader's progress; it may be called while Run runs.
func (u *Uploader) Status(ctx context.Context) (sclient.UploadStatus, error) {
	u.ledgerMu.RLock()
	defer u.ledgerMu.RUnlock()
	s, _, err := u.status(ctx)
	return s, err
}

// status is Status with ledgerMu held; it also returns the hq_outbox id the backlog counts
// after.
func (u *Uploader) status(ctx context.Context) (sclient.UploadStatus, int64, error) {
	kv, err := u.kv(ctx)
	if err != nil {
		return sclient.UploadStatus{}, 0, err
	}
	return uploadstate.Read(ctx, u.state.R, kv, u.ledger)
}

// progress prints catch-up lines: "sent 12000 rows, 88000 left, 9500 rows/s".
type progress struct {
	total     int64     // rows sent since the uploader started
	lastAt    time.Time // when the last line was printed (or counting started)
	lastTotal int64
	printed   bool
}

func (p *progress) sent(u *Uploader, ctx context.Context, b *batch) {
	if u.cfg.Progress == nil || b.rows == 0 {
		return
	}
	now := u.cfg.Now()
	if p.lastAt.IsZero() {
		p.lastAt = now
	}
	p.total += int64(b.rows)
	if now.Sub(p.lastAt) < time.Second {
		return
	}
	p.print(u, ctx, now)
}

// final prints the last line of a catch-up that printed any.
func (p *progress) final(u *Uploader) {
	if u.cfg.Progress == nil || !p.printed || p.total == p.lastTotal {
		return
	}
	now := u.cfg.Now()
	if now.Sub(p.lastAt) < time.Second {
		return
	}
	p.print(u, context.Background(), now)
}

func (p *progress) print(u *Uploader, ctx context.Context, now time.Time) {
	var left int64
	if kv, err := u.kv(ctx); err == nil {
		_ = u.ledger.ViewHQ(ctx, func(r *ledger.HQReader) error {
			left, _ = r.OutboxCountAfter(ctx, atoi(kv["sent_through"]))
			return nil
		})
	}
	rate := float64(p.total-p.lastTotal) / now.Sub(p.lastAt).Seconds()
	fmt.Fprintf(u.cfg.Progress, "sent %d rows, %d left, %.0f rows/s\n", p.total, left, rate)
	p.lastAt, p.lastTotal, p.printed = now, p.total, true
}
