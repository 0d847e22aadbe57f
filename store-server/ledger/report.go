package ledger

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/perr"
	"github.com/posgate/posgate/internal/sqlitedb"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/client"
	"github.com/posgate/posgate/store-server/store"
)

// Totals returns each terminal's counters for a business date, with the terminal's own
// definitions (terminal-agent outbox.DayTotals): Sales counts accepted sales and Amount sums
// their totals; ByMethod sums tenders per method with the change taken off cash, so that
// Σ ByMethod = Amount; refunds count and sum per refund method. Terminals without a sale or
// refund that date are absent.
// An archived date's totals are those of its archive and of the ledger (an event of the
// day that arrived after it was archived) added up.
func (l *Ledger) Totals(ctx context.Context, date string) (map[string]client.Counters, error) {
	out := map[string]client.Counters{}
	err := l.readDay(ctx, date, func(q sqlitedb.Querier) error {
		all, err := counters(ctx, q, "= ?", date, math.MaxInt64)
		if all[date] != nil {
			out = all[date]
		}
		return err
	}, func(a *sql.DB, maxFlow int64) error {
		arch, err := counters(ctx, a, "= ?", date, maxFlow)
		for t, c := range arch[date] {
			out[t] = addCounters(out[t], c)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("totals %s: %w", date, err)
	}
	return out, nil
}

// readDay reads date from the ledger (fromLedger) and, if the date is archived, from its
// archive (fromArchive's fn), the archived-day mark read in the same read transaction as
// the ledger: an archive pass pruning the day between the two reads cannot make its events
// read in both.
func (l *Ledger) readDay(ctx context.Context, date string, fromLedger func(sqlitedb.Querier) error,
	fromArchive func(a *sql.DB, maxFlow int64) error) error {
	tx, err := l.db.R.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := fromLedger(tx); err != nil {
		return err
	}
	if l.betweenReads != nil {
		l.betweenReads()
	}
	return l.fromArchive(ctx, tx, date, fromArchive)
}

// addCounters returns a + b.
func addCounters(a, b client.Counters) client.Counters {
	out := client.Counters{Sales: a.Sales + b.Sales, Amount: a.Amount + b.Amount, Refunds: a.Refunds + b.Refunds,
		RefundAmount: a.RefundAmount + b.RefundAmount, ByMethod: map[string]money.Fen{}, RefundByMethod: map[string]money.Fen{}}
	for _, m := range []map[string]money.Fen{a.ByMethod, b.ByMethod} {
		for k, v := range m {
			out.ByMethod[k] += v
		}
	}
	for _, m := range []map[string]money.Fen{a.RefundByMethod, b.RefundByMethod} {
		for k, v := range m {
			out.RefundByMethod[k] += v
		}
	}
	return out
}

// counters computes counters per business date and terminal for the dates matching
// "business_date <cond>" with arg, of the sales and refunds up to flow number maxFlow.
func counters(ctx context.Context, q sqlitedb.Querier, cond, arg string, maxFlow int64) (map[string]map[string]client.Counters, error) {
	out := map[string]map[string]*client.Counters{}
	get := func(date, terminal string) *client.Counters {
		if out[date] == nil {
			out[date] = map[string]*client.Counters{}
		}
		c := out[date][terminal]
		if c == nil {
			c = &client.Counters{ByMethod: map[string]money.Fen{}, RefundByMethod: map[string]money.Fen{}}
			out[date][terminal] = c
		}
		return c
	}
	err := sqlitedb.Each(ctx, q, `SELECT business_date, terminal, count(*), sum(total), sum(change) FROM sales
		WHERE business_date `+cond+` AND flow_no <= ? GROUP BY business_date, terminal`, []any{arg, maxFlow}, func(rows *sql.Rows) error {
		var date, terminal string
		var n int64
		var total, change money.Fen
		if err := rows.Scan(&date, &terminal, &n, &total, &change); err != nil {
			return err
		}
		c := get(date, terminal)
		c.Sales, c.Amount = n, total
		if change != 0 { // change is given in cash: take it off the cash figure
			c.ByMethod[wire.MethodCash] -= change
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	err = sqlitedb.Each(ctx, q, `SELECT s.business_date, s.terminal, p.method, sum(p.amount)
		FROM sales s JOIN payments p ON p.business_date = s.business_date AND p.flow_no = s.flow_no
		WHERE s.business_date `+cond+` AND s.flow_no <= ? GROUP BY s.business_date, s.terminal, p.method`, []any{arg, maxFlow}, func(rows *sql.Rows) error {
		var date, terminal, method string
		var amt money.Fen
		if err := rows.Scan(&date, &terminal, &method, &amt); err != nil {
			return err
		}
		get(date, terminal).ByMethod[method] += amt
		return nil
	})
	if err != nil {
		return nil, err
	}
	err = sqlitedb.Each(ctx, q, `SELECT business_date, terminal, method, count(*), sum(amount) FROM refunds
		WHERE business_date `+cond+` AND flow_no <= ? GROUP BY business_date, terminal, method`, []any{arg, maxFlow}, func(rows *sql.Rows) error {
		var date, terminal, method string
		var n int64
		var amt money.Fen
		if err := rows.Scan(&date, &terminal, &method, &n, &amt); err != nil {
			return err
		}
		c := get(date, terminal)
		c.Refunds += n
		c.RefundAmount += amt
		c.RefundByMethod[method] += amt
		return nil
	})
	if err != nil {
		return nil, err
	}
	res := make(map[string]map[string]client.Counters, len(out))
	for date, ts := range out {
		res[date] = make(map[string]client.Counters, len(ts))
		for t, c := range ts {
			res[date][t] = *c
		}
	}
	return res, nil
}

// Snapshot returns, from one consistent read, what rebuilding the Redis projection needs:
// the stock of every SKU; counters per business date and terminal for the dates from
// SnapshotDays before today (store time, by the Now clock) onwards, every date up to
// tomorrow included, with or without counters; and the highest flow number of every
// business date in the ledger, however old, so that a late offline sale of an old date
// can never be given a flow number again (invariant 8). The dates whose keys left Redis
// (redis_days) are left out of both: a rebuild reads the current state, not the store's
// history, and an event of such a date takes its flow number from the ledger.
func (l *Ledger) Snapshot(ctx context.Context) (store.Snapshot, error) {
	var s store.Snapshot
	tx, err := l.db.R.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return s, fmt.Errorf("snapshot: %w", err)
	}
	defer tx.Rollback()
	if s.Stock, err = skuQuantities(ctx, tx, `SELECT sku, qty FROM stock`); err != nil {
		return s, fmt.Errorf("snapshot: %w", err)
	}
	now := l.now().In(l.loc)
	from := l.BusinessDate(now.AddDate(0, 0, -SnapshotDays))
	if s.Counters, err = counters(ctx, tx, ">= ?", from, math.MaxInt64); err != nil {
		return s, fmt.Errorf("snapshot: %w", err)
	}
	expired := l.expiredDays()
	for d := range expired {
		delete(s.Counters, d)
	}
	// Every date of the window is in the snapshot, those without a sale or refund in the
	// ledger with no counters: Redis may hold counters of such a date that the ledger never
	// took (the store killed between a gate call and its commit, on a day's first sale),
	// and the rebuild must clear them, or the event's redelivery counts twice there.
	for d := -SnapshotDays; d <= 1; d++ {
		if date := l.BusinessDate(now.AddDate(0, 0, d)); s.Counters[date] == nil && !expired[date] {
			s.Counters[date] = map[string]client.Counters{}
		}
	}
	s.MaxFlow = map[string]int64{}
	days, err := flowDays(ctx, tx)
	if err != nil {
		return s, fmt.Errorf("snapshot: %w", err)
	}
	for _, d := range days {
		if !expired[d.date] {
			s.MaxFlow[d.date] = d.max
		}
	}
	return s, nil
}

const selOversells = `SELECT terminal, seq, sku, qty_short, at, business_date, resolved, resolved_at, resolution
	FROM oversells`

func (l *Ledger) scanOversell(sc interface{ Scan(...any) error }) (client.Oversell, error) {
	var o client.Oversell
	var at, resolvedAt string
	err := sc.Scan(&o.Terminal, &o.Seq, &o.SKU, &o.Short, &at, &o.BusinessDate, &o.Resolved, &resolvedAt, &o.Resolution)
	o.At, o.ResolvedAt = l.parseTime(at), l.parseTime(resolvedAt)
	return o, err
}

// Oversells returns the oversell exceptions of a business date ("" for every date), by
// date, terminal, seq and SKU: the open ones, or with resolved also those a manager
// resolved.
func (l *Ledger) Oversells(ctx context.Context, date string, resolved bool) ([]client.Oversell, error) {
	out, err := exceptions(ctx, l, selOversells, "terminal, seq, sku", date, resolved, l.scanOversell)
	if err != nil {
		return nil, fmt.Errorf("oversells: %w", err)
	}
	return out, nil
}

// exceptions lists the rows of an exception table (sel reads them, scan scans one) of a
// business date ("" for every date), by date and then order: the open ones, or with
// resolved also those a manager resolved.
func exceptions[T any](ctx context.Context, l *Ledger, sel, order, date string, resolved bool,
	scan func(interface{ Scan(...any) error }) (T, error)) ([]T, error) {
	query := sel + ` WHERE 1`
	var args []any
	if !resolved {
		query += ` AND resolved = 0`
	}
	if date != "" {
		query += ` AND business_date = ?`
		args = append(args, date)
	}
	query += ` ORDER BY business_date, ` + order
	out := []T{}
	err := sqlitedb.Each(ctx, l.db.R, query, args, func(rows *sql.Rows) error {
		x, err := scan(rows)
		if err != nil {
			return err
		}
		out = append(out, x)
		return nil
	})
	return out, err
}

// Codes of ResolveOversell's errors.
const (
	CodeOversellNotFound   = "oversell_not_found"
	CodeResolutionRequired = "oversell_resolution_required"
)

// ResolveOversell marks the oversell exception of (terminal, seq, sku) resolved with the
// manager's note of what explained it. Resolving a resolved exception changes nothing and
// returns it with its first resolution (applied false): a retried request is harmless. The
// stock itself is corrected by an adjustment (Adjust), never here.
func (l *Ledger) ResolveOversell(ctx context.Context, terminal string, seq int64, sku, note string) (client.Oversell, bool, error) {
	o, applied, err := resolve(ctx, l, "oversells", selOversells, "terminal = ? AND seq = ? AND sku = ?",
		[]any{terminal, seq, sku}, note, l.scanOversell)
	switch {
	case errors.Is(err, errNoNote):
		return client.Oversell{}, false, perr.New(perr.Invalid, CodeResolutionRequired,
			"say what explained the shortfall (1 to %d bytes of UTF-8)", wire.MaxTextLen)
	case errors.Is(err, sql.ErrNoRows):
		return client.Oversell{}, false, perr.New(perr.NotFound, CodeOversellNotFound,
			"no oversell of %s by event %s", sku, wire.Key(terminal, seq))
	case err != nil:
		return client.Oversell{}, false, fmt.Errorf("resolve oversell %s %s: %w", wire.Key(terminal, seq), sku, err)
	}
	return o, applied, nil
}

// errNoNote is a resolution without a note (or one longer than wire.MaxTextLen).
var errNoNote = errors.New("no note")

// resolve marks the exception of table where key (args) holds resolved with the manager's
// note, unless it is resolved already, and returns it as sel and scan read it and whether
// this call resolved it. It fails with errNoNote for an empty or oversized note, and with
// sql.ErrNoRows when there is no such exception.
func resolve[T any](ctx context.Context, l *Ledger, table, sel, key string, args []any, note string,
	scan func(interface{ Scan(...any) error }) (T, error)) (x T, applied bool, err error) {
	note = strings.TrimSpace(note)
	if note == "" || len(note) > wire.MaxTextLen {
		return x, false, errNoNote
	}
	res, err := l.db.W.ExecContext(ctx, `UPDATE `+table+` SET resolved = 1, resolved_at = ?, resolution = ?
		WHERE `+key+` AND resolved = 0`, append([]any{l.now().UTC().Format(timeFormat), note}, args...)...)
	if err != nil {
		return x, false, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return x, false, err
	}
	x, err = scan(l.db.W.QueryRowContext(ctx, sel+` WHERE `+key, args...))
	return x, n == 1, err
}

const selRefundExceptions = `SELECT terminal, seq, code, detail || earlier, at, business_date, resolved, resolved_at, resolution
	FROM refund_exceptions`

func (l *Ledger) scanRefundException(sc interface{ Scan(...any) error }) (client.RefundException, error) {
	var x client.RefundException
	var at, resolvedAt string
	err := sc.Scan(&x.Terminal, &x.Seq, &x.Code, &x.Detail, &at, &x.BusinessDate, &x.Resolved, &resolvedAt, &x.Resolution)
	x.At, x.ResolvedAt = l.parseTime(at), l.parseTime(resolvedAt)
	return x, err
}

// OpenExceptions counts the exceptions waiting for a manager: oversells, refund exceptions
// and parked events nobody has resolved yet.
func (l *Ledger) OpenExceptions(ctx context.Context) (oversells, refunds, parked int64, err error) {
	err = l.db.R.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM oversells WHERE resolved = 0),
		(SELECT count(*) FROM refund_exceptions WHERE resolved = 0),
		(SELECT count(*) FROM parked WHERE resolved = 0)`).Scan(&oversells, &refunds, &parked)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("open exceptions: %w", err)
	}
	return oversells, refunds, parked, nil
}

// RefundExceptions returns the refund exceptions of a business date ("" for every date),
// by date, terminal and seq: the open ones, or with resolved also those a manager resolved.
func (l *Ledger) RefundExceptions(ctx context.Context, date string, resolved bool) ([]client.RefundException, error) {
	out, err := exceptions(ctx, l, selRefundExceptions, "terminal, seq", date, resolved, l.scanRefundException)
	if err != nil {
		return nil, fmt.Errorf("refund exceptions: %w", err)
	}
	return out, nil
}

// Codes of ResolveRefundException's errors.
const (
	CodeRefundExceptionNotFound           = "refund_exception_not_found"
	CodeRefundExceptionResolutionRequired = "refund_exception_resolution_required"
)

// ResolveRefundException marks the refund exception of the refund (terminal, seq) resolved
// with the manager's note of what explained it. Resolving a resolved exception changes
// nothing and returns it with its first resolution (applied false): a retried request is
// harmless. The refund itself stands in the ledger either way.
func (l *Ledger) ResolveRefundException(ctx context.Context, terminal string, seq int64, note string) (client.RefundException, bool, error) {
	x, applied, err := resolve(ctx, l, "refund_exceptions", selRefundExceptions, "terminal = ? AND seq = ?",
		[]any{terminal, seq}, note, l.scanRefundException)
	switch {
	case errors.Is(err, errNoNote):
		return client.RefundException{}, false, perr.New(perr.Invalid, CodeRefundExceptionResolutionRequired,
			"say what explained the refund (1 to %d bytes of UTF-8)", wire.MaxTextLen)
	case errors.Is(err, sql.ErrNoRows):
		return client.RefundException{}, false, perr.New(perr.NotFound, CodeRefundExceptionNotFound,
			"no refund exception for event %s", wire.Key(terminal, seq))
	case err != nil:
		return client.RefundException{}, false, fmt.Errorf("resolve refund exception %s: %w", wire.Key(terminal, seq), err)
	}
	return x, applied, nil
}

// DefaultParkedLimit is how many parked events Parked returns for a limit ≤ 0.
const DefaultParkedLimit = 100

const selParkedEvents = `SELECT id, terminal, seq, hash, kind, code, message, at, business_date, resolved,
	resolved_at, resolution FROM parked`

func (l *Ledger) scanParked(sc interface{ Scan(...any) error }) (client.Parked, error) {
	var p client.Parked
	var at, resolvedAt string
	err := sc.Scan(&p.ID, &p.Terminal, &p.Seq, &p.Hash, &p.Kind, &p.Code, &p.Message, &at, &p.BusinessDate,
		&p.Resolved, &resolvedAt, &p.Resolution)
	p.At, p.ResolvedAt = l.parseTime(at), l.parseTime(resolvedAt)
	return p, err
}

// Parked returns up to limit parked events, the most recently parked first; open ones
// only unless all.
func (l *Ledger) Parked(ctx context.Context, limit int, all bool) ([]client.Parked, error) {
	if limit <= 0 {
		limit = DefaultParkedLimit
	}
	out := []client.Parked{}
	err := sqlitedb.Each(ctx, l.db.R, selParkedEvents+` WHERE resolved = 0 OR ?
		ORDER BY parked_ms DESC, terminal, seq DESC, id DESC LIMIT ?`, []any{all, limit}, func(rows *sql.Rows) error {
		p, err := l.scanParked(rows)
		out = append(out, p)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("parked: %w", err)
	}
	return out, nil
}

// parkedDate is the business date a parked event is filed under: the date of its business
// time at, or the store's at nowMs when its time could not be read or is one the wire
// refuses (outside the years 1970-9998: a till's clock far off). Such a time can have a
// date of five digits in the store's zone (9999-12-31T23:00-10:00 is 10000-01-01), which
// HQ refuses, and a batch HQ refuses holds back every row after it.
func (l *Ledger) parkedDate(at time.Time, nowMs int64) string {
	if y := at.UTC().Year(); !at.IsZero() && 1970 <= y && y <= 9998 {
		return l.BusinessDate(at)
	}
	return l.BusinessDate(time.UnixMilli(nowMs))
}

// validDate reports whether s is a calendar date written YYYY-MM-DD, as HQ takes one.
func validDate(s string) bool {
	d, err := time.Parse(wire.BusinessDate, s)
	return err == nil && len(s) == len(wire.BusinessDate) && d.Format(wire.BusinessDate) == s
}

// Codes of ResolveParked's errors.
const (
	CodeParkedNotFound           = "parked_not_found"
	CodeParkedResolutionRequired = "parked_resolution_required"
	CodeParkedHashRequired       = "parked_hash_required"
)

// ResolveParked marks the parked event (terminal, seq) of content hash resolved with the
// manager's note of what explained it (the sale voided with the customer, entered again,
// the money counted out of the drawer). hash may be "" when the key is parked with one
// content only; with several, it names the one (CodeParkedHashRequired otherwise), and ""
// names the one restored from HQ without its hash, if any (a refilled ledger). Resolving a
// resolved event changes nothing and returns it with its first resolution (applied false).
// The event stays refused either way.
func (l *Ledger) ResolveParked(ctx context.Context, terminal string, seq int64, hash, note string) (client.Parked, bool, error) {
	if hash == "" {
		var n, unknown int
		var only string
		if err := l.db.R.QueryRowContext(ctx, `SELECT count(*), coalesce(max(hash), ''), count(*) FILTER (WHERE hash = '')
			FROM parked WHERE terminal = ? AND seq = ?`, terminal, seq).Scan(&n, &only, &unknown); err != nil {
			return client.Parked{}, false, fmt.Errorf("resolve parked event %s: %w", wire.Key(terminal, seq), err)
		}
		if unknown > 0 {
			only = ""
		} else if n > 1 {
			return client.Parked{}, false, perr.New(perr.Invalid, CodeParkedHashRequired,
				"%s is parked with %d contents: say which one by its hash", wire.Key(terminal, seq), n)
		}
		hash = only
	}
	p, applied, err := resolve(ctx, l, "parked", selParkedEvents, "terminal = ? AND seq = ? AND hash = ?",
		[]any{terminal, seq, hash}, note, l.scanParked)
	switch {
	case errors.Is(err, errNoNote):
		return client.Parked{}, false, perr.New(perr.Invalid, CodeParkedResolutionRequired,
			"say what explained the parked event (1 to %d bytes of UTF-8)", wire.MaxTextLen)
	case errors.Is(err, sql.ErrNoRows):
		return client.Parked{}, false, perr.New(perr.NotFound, CodeParkedNotFound,
			"no parked event %s%s", wire.Key(terminal, seq), map[bool]string{true: " of content " + hash}[hash != ""])
	case err != nil:
		return client.Parked{}, false, fmt.Errorf("resolve parked event %s: %w", wire.Key(terminal, seq), err)
	}
	return p, applied, nil
}

// DayCloses returns each terminal's declared totals for a business date (the date the day
// close names, not the time it was sent).
// An archived date's come from its archive, and from the ledger for a close that arrived
// since (the later close of a terminal's day stands).
func (l *Ledger) DayCloses(ctx context.Context, date string) (map[string]wire.DayClosePayload, error) {
	out := map[string]wire.DayClosePayload{}
	seqs := map[string]int64{}
	read := func(q sqlitedb.Querier) error {
		return sqlitedb.Each(ctx, q, `SELECT terminal, seq, payload FROM day_closes WHERE business_date = ?`, []any{date},
			func(rows *sql.Rows) error {
				var terminal string
				var seq int64
				var body []byte
				if err := rows.Scan(&terminal, &seq, &body); err != nil {
					return err
				}
				var p wire.DayClosePayload
				if err := json.Unmarshal(body, &p); err != nil {
					return fmt.Errorf("terminal %s: %w", terminal, err)
				}
				if seq > seqs[terminal] {
					out[terminal], seqs[terminal] = p, seq
				}
				return nil
			})
	}
	err := l.readDay(ctx, date, read, func(a *sql.DB, _ int64) error { return read(a) })
	if err != nil {
		return nil, fmt.Errorf("day closes %s: %w", date, err)
	}
	return out, nil
}

// parseTime reads a stored time into the store's zone (the zero time for an empty string;
// UTC for a time whose year in the store's zone JSON cannot write).
func (l *Ledger) parseTime(s string) time.Time {
	if s == "" {
		return time.Time{}
	}
	t, err := time.Parse(timeFormat, s)
	if err != nil {
		return time.Time{}
	}
	// A till's clock far off can stamp a time of the year 9999 that is in the year 10000 in
	// the store's zone (9999-12-31T20:00Z is 10000-01-01 in Shanghai): JSON writes years 0
	// to 9999 only, and such a time in the store's zone made every answer holding it empty.
	// It is kept in UTC, the same instant.
	if y := t.In(l.loc).Year(); y < 0 || y > 9999 {
		return t
	}
	return t.In(l.loc)
}
