package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/posgate/posgate/internal/certfile"
	"github.com/posgate/posgate/internal/cli"
	"github.com/posgate/posgate/internal/hqwire"
	"github.com/posgate/posgate/internal/perr"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/ledger"
)

// restore is `store-server restore --from-hq URL`: it refills a store's EMPTY ledger (its
// data directory lost with no backup) from what HQ holds of the store, asked page by page
// on HQ's signed export route (hqwire.ExportPath) with the store's HQ secret, each page
// checked against HQ's signature. The ledger is built beside the data directory's
// ledger.db and put in its place only once whole; a ledger that holds anything is refused
// (ledger_not_empty). The store-server started afterwards asks its tills for what HQ did
// not hold (catch-up), and the uploader goes on by itself.
func restore(args []string, stderr io.Writer) error {
	fs := cli.NewFlags("store-server restore", stderr)
	var from, store, dataDir, tz, secret, level, hqCA string
	fs.String(&from, "from-hq", "POSGATE_RESTORE_FROM_HQ", "", "HQ's address (hq-sync serve): its base URL or its batches URL (required)")
	fs.String(&hqCA, "hq-ca", "POSGATE_HQ_CA", "", "also trust this authority (PEM) for HQ's HTTPS certificate, e.g. the chain's own CA (as the uploader's --hq-ca)")
	fs.String(&store, "store", "POSGATE_STORE", "", "the store id (required)")
	fs.String(&dataDir, "data-dir", "POSGATE_DATA_DIR", "", "the store's data directory, whose ledger is refilled (required)")
	fs.String(&tz, "tz", "POSGATE_TZ", "Asia/Shanghai", "the store's time zone")
	fs.String(&level, "log-level", "POSGATE_LOG_LEVEL", "info", "log level")
	fs.Secret(&secret, "hq-secret", "POSGATE_HQ_SECRET", 16, "the store's signing secret shared with HQ (required)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "store-server restore: refill an empty ledger from HQ (a data directory lost with no backup)")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if from == "" || store == "" || dataDir == "" || secret == "" {
		return errors.New("--from-hq, --store, --data-dir and the HQ secret (--hq-secret-file or POSGATE_HQ_SECRET) are required")
	}
	if !wire.ValidID(store) {
		return fmt.Errorf("--store %q is not a valid id", store)
	}
	loc, err := wire.LoadLocation(tz)
	if err != nil {
		return fmt.Errorf("--tz: %w", err)
	}
	base, err := url.Parse(strings.TrimSuffix(strings.TrimSuffix(from, "/"), "/v1/batches"))
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return fmt.Errorf("--from-hq %q is not an http(s) URL", from)
	}
	client, err := hqClient(hqCA)
	if err != nil {
		return fmt.Errorf("--hq-ca: %w", err)
	}
	r := &refill{store: store, secret: []byte(secret), base: base, client: client, log: cli.LoggerTo(stderr, level)}
	sum, err := r.run(context.Background(), dataDir, loc)
	if err != nil {
		return err
	}
	js, _ := json.MarshalIndent(sum, "", "  ")
	fmt.Fprintf(stderr, "store-server restore: the ledger of %s is refilled from HQ:\n%s\n", store, js)
	for _, w := range sum.Warnings {
		fmt.Fprintf(stderr, "store-server restore: warning: %s\n", w)
	}
	return nil
}

// hqClient is the HTTP client of a refill: the system's authorities, and the one in the
// PEM file caPath too when given.
func hqClient(caPath string) (*http.Client, error) {
	c := &http.Client{Timeout: 2 * time.Minute}
	if caPath == "" {
		return c, nil
	}
	roots, err := certfile.RootsWith(caPath)
	if err != nil {
		return nil, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	c.Transport = tr
	return c, nil
}

// refill is one refill of a store's ledger from HQ.
type refill struct {
	store  string
	secret []byte
	base   *url.URL
	client *http.Client
	log    *slog.Logger
}

// RefillSummary is what a refill booked.
type RefillSummary struct {
	Rows       int              `json:"rows"`         // sales, refunds and day closes booked
	Moves      int              `json:"moves"`        // stock adjustments booked
	NoPayload  int              `json:"no_payload"`   // rows HQ holds without payload (stored before it kept them): not booked
	Dropped    []string         `json:"dropped"`      // business days HQ no longer holds
	Days       int              `json:"days"`         // day declarations HQ holds
	Terminals  map[string]int64 `json:"terminals"`    // each terminal's highest seq booked
	Unknown    int              `json:"unknown_skus"` // SKUs marked of unknown stock
	UnknownWhy string           `json:"unknown_why,omitempty"`
	Incomplete bool             `json:"incomplete"` // HQ lacked part of the history: every SKU is unknown
	// Exceptions counts the exceptions and flow exceptions HQ held that the refill booked as
	// HQ holds them (the manager lists the open ones), and those it did not.
	Exceptions ledger.RestoredExceptions `json:"exceptions"`
	// NotExported lists the export parts HQ refused (a serve from before them): their
	// exceptions are not at the store. Warnings says so in words.
	NotExported []string `json:"exceptions_not_exported,omitempty"`
	Warnings    []string `json:"warnings,omitempty"`
	LedgerPath  string   `json:"ledger"`
	TookSeconds float64  `json:"took_seconds"`
}

func (r *refill) run(ctx context.Context, dataDir string, loc *time.Location) (*RefillSummary, error) {
	start := time.Now()
	final := filepath.Join(dataDir, "ledger.db")
	if err := r.checkEmpty(ctx, final, loc); err != nil {
		return nil, err
	}
	tmp := final + ".refill"
	for _, suffix := range []string{"", "-wal", "-shm", ".lock"} {
		_ = os.Remove(tmp + suffix)
	}
	l, err := ledger.Open(ctx, tmp, r.store, loc)
	if err != nil {
		return nil, err
	}
	sum, err := r.book(ctx, l)
	if cerr := l.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	for _, suffix := range []string{"-wal", "-shm"} {
		if _, err := os.Stat(tmp + suffix); err == nil {
			return nil, fmt.Errorf("the refilled ledger %s was not closed cleanly (%s left)", tmp, suffix)
		}
	}
	for _, suffix := range []string{"", "-wal", "-shm"} { // an empty ledger a store-server made
		_ = os.Remove(final + suffix)
	}
	if err := os.Rename(tmp, final); err != nil {
		return nil, err
	}
	_ = os.Remove(tmp + ".lock")
	sum.LedgerPath, sum.TookSeconds = final, time.Since(start).Round(time.Millisecond).Seconds()
	return sum, nil
}

// checkEmpty refuses a data directory whose ledger holds anything (or is open).
func (r *refill) checkEmpty(ctx context.Context, path string, loc *time.Location) error {
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	l, err := ledger.Open(ctx, path, r.store, loc)
	if err != nil {
		return err
	}
	defer l.Close()
	empty, err := l.Empty(ctx)
	if err != nil {
		return err
	}
	if !empty {
		return ledger.ErrNotEmpty(path)
	}
	return nil
}

// book fetches and books, in order: the day declarations (what HQ dropped), the stock
// adjustments, the rows; then drops the exceptions the bookings flagged and books those HQ
// holds of the store instead, marks the terminals refilled (their tills fill what HQ does
// not hold) and the stock it cannot prove.
func (r *refill) book(ctx context.Context, l *ledger.Ledger) (*RefillSummary, error) {
	sum := &RefillSummary{Terminals: map[string]int64{}, Exceptions: ledger.RestoredExceptions{Booked: map[string]int{}}}
	days, err := r.page(ctx, url.Values{"part": {hqwire.PartDays}})
	if err != nil {
		return nil, err
	}
	sum.Days, sum.Dropped = len(days.Days), days.Dropped
	if err := r.bookMoves(ctx, l, sum); err != nil {
		return nil, err
	}
	q := url.Values{"part": {hqwire.PartRows}}
	for {
		p, err := r.page(ctx, q)
		if err != nil {
			return nil, err
		}
		if err := r.bookRows(ctx, l, p.Rows, sum); err != nil {
			return nil, err
		}
		if !p.More || len(p.Rows) == 0 {
			break
		}
		last := p.Rows[len(p.Rows)-1]
		q.Set("after_terminal", last.Terminal)
		q.Set("after_seq", strconv.FormatInt(last.Seq, 10))
		r.log.Info("refilling from HQ", "rows", sum.Rows, "through", last.Key(r.store))
	}
	if err := l.ForgetRefillExceptions(ctx); err != nil {
		return nil, err
	}
	if err := r.bookExceptions(ctx, l, sum); err != nil {
		return nil, err
	}
	terminals := make([]string, 0, len(sum.Terminals))
	for t := range sum.Terminals {
		terminals = append(terminals, t)
	}
	sort.Strings(terminals)
	if err := l.MarkRefilled(ctx, terminals); err != nil {
		return nil, err
	}
	return sum, r.markUnknown(ctx, l, sum)
}

// bookMoves books the store's stock adjustments HQ holds, in their order.
func (r *refill) bookMoves(ctx context.Context, l *ledger.Ledger, sum *RefillSummary) error {
	for after := int64(0); ; {
		p, err := r.page(ctx, url.Values{"part": {hqwire.PartMoves}, "after": {strconv.FormatInt(after, 10)}})
		if err != nil {
			return err
		}
		for _, m := range p.Moves {
			if m.N != after+1 {
				sum.Incomplete = true // an adjustment HQ never got
			}
			after = m.N
		}
		if err := l.RestoreAdjustments(ctx, p.Moves); err != nil {
			return err
		}
		sum.Moves += len(p.Moves)
		if !p.More {
			return nil
		}
	}
}

// bookRows books one page of rows: those with a payload, as the store recorded them.
func (r *refill) bookRows(ctx context.Context, l *ledger.Ledger, rows []hqwire.Row, sum *RefillSummary) error {
	keep := rows[:0:0]
	for _, row := range rows {
		if row.Payload == nil {
			sum.NoPayload++
			continue
		}
		keep = append(keep, row)
	}
	out, err := l.RestoreRows(ctx, keep)
	if err != nil {
		return err
	}
	for i, o := range out {
		row := &keep[i]
		if o.Err != nil || o.Status != wire.AckAccepted || (row.FlowNo != 0 && o.FlowNo != row.FlowNo) {
			return perr.New(perr.Conflict, "refill_row_refused", "%s from HQ could not be booked as recorded: %s %s flow %d (HQ's %d) %v",
				row.Key(r.store), o.Status, o.Code, o.FlowNo, row.FlowNo, o.Err)
		}
		sum.Terminals[row.Terminal] = max(sum.Terminals[row.Terminal], row.Seq)
	}
	sum.Rows += len(keep)
	return nil
}

// markUnknown marks the SKUs whose stock the refill cannot prove: every one when HQ lacked
// part of the history (a row without payload, a dropped day, an adjustment missing),
// else those of no opening stock or count.
func (r *refill) markUnknown(ctx context.Context, l *ledger.Ledger, sum *RefillSummary) error {
	sum.Incomplete = sum.Incomplete || sum.NoPayload > 0 || len(sum.Dropped) > 0
	var skus []string
	var err error
	why := ledger.UnknownNoOpening
	if sum.Incomplete {
		why = ledger.UnknownIncomplete
		skus, err = l.AllSKUs(ctx)
	} else {
		skus, err = l.UnprovenSKUs(ctx)
	}
	if err != nil {
		return err
	}
	sum.Unknown = len(skus)
	if len(skus) > 0 {
		sum.UnknownWhy = why
	}
	return l.MarkUnknown(ctx, skus, why)
}

// page asks HQ for one page of the export, signed with the store's secret, and checks
// HQ's signature of the answer for this very request.
func (r *refill) page(ctx context.Context, q url.Values) (*hqwire.ExportPage, error) {
	u := *r.base
	u.Path = strings.TrimSuffix(u.Path, "/") + hqwire.ExportPath
	u.RawQuery = q.Encode()
	target := u.RequestURI()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	hqwire.SignRequest(req, r.secret, target, r.store, "", time.Now(), nil)
	resp, err := r.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("ask HQ: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("read HQ's answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		var cause error
		if exportInvalid(resp.StatusCode, body) {
			cause = errExportInvalid
		}
		return nil, perr.Wrap(cause, perr.Unavailable, "hq_refused_refill", "HQ answered %s %d: %.300s", target,
			resp.StatusCode, body)
	}
	if !hqwire.VerifyExport(r.secret, resp.Header.Get(hqwire.HeaderSignature), r.store, target, body) {
		return nil, perr.New(perr.Unauthorized, "hq_answer_unsigned", "HQ's answer to %s is not signed with the store's secret", target)
	}
	var p hqwire.ExportPage
	if err := json.Unmarshal(body, &p); err != nil || p.Store != r.store || p.Part != q.Get("part") {
		return nil, fmt.Errorf("HQ's answer to %s is not a page of the store's %s: %.300s", target, q.Get("part"), body)
	}
	return &p, nil
}
