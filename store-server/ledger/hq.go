package ledger

// The read side of the ledger that hq-sync upload uses: the hq_outbox queue as hqwire.Rows, in
// commit (id) order, and a business date's manifest (every sale and refund as an hqwire.Txn).
// The uploader opens the ledger with OpenReader: it never writes the ledger (the
// store-server is its only writer) and keeps its own progress in its own database.

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/posgate/posgate/internal/hqwire"
	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/sqlitedb"
	"github.com/posgate/posgate/internal/wire"
)

// OpenReader opens the existing ledger of store storeID at path for reading only: both of
// its connection pools are query-only, so every write method of the returned Ledger fails,
// and no migration is run. It refuses a missing file and a ledger of another store.
//
// SQLite may still checkpoint the ledger's write-ahead log when the last connection to it
// closes; that moves committed pages and changes no row.
func OpenReader(ctx context.Context, path, storeID string, loc *time.Location) (*Ledger, error) {
	if !wire.ValidID(storeID) {
		return nil, fmt.Errorf("open ledger reader: store id %q is not valid", storeID)
	}
	if loc == nil {
		return nil, errors.New("open ledger reader: the store's time zone is missing")
	}
	w, err := sqlitedb.OpenQueryOnly(ctx, path, 1)
	if err != nil {
		return nil, fmt.Errorf("open ledger reader %s: %w", path, err)
	}
	r, err := sqlitedb.OpenQueryOnly(ctx, path, 4)
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("open ledger reader %s: %w", path, err)
	}
	l := &Ledger{Now: time.Now, db: &sqlitedb.DB{W: w, R: r, Path: path}, storeID: storeID, loc: loc,
		prep: map[string]*sql.Stmt{}}
	var id string
	if err := r.QueryRowContext(ctx, `SELECT v FROM meta WHERE k = 'store_id'`).Scan(&id); err != nil {
		l.Close()
		return nil, fmt.Errorf("open ledger reader %s: %w", path, err)
	}
	if id != storeID {
		l.Close()
		return nil, fmt.Errorf("open ledger reader: %s is the ledger of store %q, not %q", path, id, storeID)
	}
	return l, nil
}

// Location returns the store's time zone, in which business dates are taken.
func (l *Ledger) Location() *time.Location { return l.loc }

// OutboxRow is one row of the ledger's hq_outbox queue, as HQ receives it.
type OutboxRow struct {
	// ID is the row's hq_outbox id: rows are committed in id order, and a snapshot of the
	// ledger always holds every id up to its highest.
	ID  int64
	Row hqwire.Row
}

// HQReader reads the ledger for the uploader inside one read transaction: everything it
// returns comes from the same consistent snapshot.
type HQReader struct {
	l  *Ledger
	tx *sql.Tx
	// hqDetail is what the reader selects for a parked content's HQ detail: the column, or
	// '' in a ledger without it; "" until it looked.
	hqDetail string
}

// ViewHQ runs fn with a reader over one consistent snapshot of the ledger.
func (l *Ledger) ViewHQ(ctx context.Context, fn func(r *HQReader) error) error {
	tx, err := l.db.R.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return fmt.Errorf("read ledger: %w", err)
	}
	defer tx.Rollback()
	return fn(&HQReader{l: l, tx: tx})
}

// OutboxAfter returns up to limit rows of hq_outbox with an id above afterID, in id order,
// with the amounts of their sales and refunds from the ledger's tables: a sale's Amount is
// its total and its ByMethod its tenders per method with the change taken off cash
// (store.SaleByMethod); a refund's Amount is its amount, all of it by its method; a day
// close has neither. Payload is the event's payload as the terminal sent it.
func (l *Ledger) OutboxAfter(ctx context.Context, afterID int64, limit int) ([]OutboxRow, error) {
	var out []OutboxRow
	err := l.ViewHQ(ctx, func(r *HQReader) error {
		var err error
		out, err = r.OutboxAfter(ctx, afterID, limit)
		return err
	})
	return out, err
}

// OutboxMaxID returns the highest hq_outbox id (0 when the queue has never held a row).
func (l *Ledger) OutboxMaxID(ctx context.Context) (int64, error) {
	var id int64
	err := l.ViewHQ(ctx, func(r *HQReader) error {
		var err error
		id, err = r.OutboxMaxID(ctx)
		return err
	})
	return id, err
}

// DayManifest returns every accepted sale and refund of a business date as hqwire.Txns, by
// terminal and seq.
func (l *Ledger) DayManifest(ctx context.Context, date string) ([]hqwire.Txn, error) {
	var out []hqwire.Txn
	err := l.ViewHQ(ctx, func(r *HQReader) error {
		var err error
		out, err = r.DayManifest(ctx, date)
		return err
	})
	return out, err
}

// OutboxKey is the identity of an hq_outbox row: its id and its event's key and hash.
type OutboxKey struct {
	ID       int64
	Terminal string
	Seq      int64
	Hash     string
}

// OutboxKeysAfter returns the identities of up to limit hq_outbox rows after afterID, in id
// order: what OutboxAfter returns without the rows' content, for checking that the ledger
// still holds rows sent before (an event not in the events table has an empty Hash).
func (r *HQReader) OutboxKeysAfter(ctx context.Context, afterID int64, limit int) ([]OutboxKey, error) {
	if limit <= 0 {
		return nil, nil
	}
	out := make([]OutboxKey, 0, min(limit, 4096))
	err := sqlitedb.Each(ctx, r.tx, `SELECT o.id, o.terminal, o.seq, coalesce(e.hash, '') FROM hq_outbox o
		LEFT JOIN events e ON e.terminal = o.terminal AND e.seq = o.seq
		WHERE o.id > ? ORDER BY o.id LIMIT ?`, []any{afterID, limit}, func(rows *sql.Rows) error {
		var k OutboxKey
		if err := rows.Scan(&k.ID, &k.Terminal, &k.Seq, &k.Hash); err != nil {
			return err
		}
		out = append(out, k)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("outbox keys: %w", err)
	}
	return out, nil
}

// OutboxAfter is Ledger.OutboxAfter inside the reader's snapshot.
func (r *HQReader) OutboxAfter(ctx context.Context, afterID int64, limit int) ([]OutboxRow, error) {
	if limit <= 0 {
		return nil, nil
	}
	out := make([]OutboxRow, 0, min(limit, 4096))
	sales := map[txnKey]int{}     // (terminal, seq) of a sale → its index in out
	change := map[int]money.Fen{} // index in out → the sale's change, when it gave any
	err := sqlitedb.Each(ctx, r.tx, `SELECT o.id, o.kind, o.terminal, o.seq, o.business_date, coalesce(o.flow_no, 0),
			e.at, e.hash, e.payload, s.total, s.change, f.amount, f.method
		FROM hq_outbox o
		LEFT JOIN events e ON e.terminal = o.terminal AND e.seq = o.seq
		LEFT JOIN sales s ON o.kind = 'sale' AND s.business_date = o.business_date AND s.flow_no = o.flow_no
		LEFT JOIN refunds f ON o.kind = 'refund' AND f.terminal = o.terminal AND f.seq = o.seq
		WHERE o.id > ? ORDER BY o.id LIMIT ?`, []any{afterID, limit}, func(rows *sql.Rows) error {
		var o OutboxRow
		var at, hash sql.NullString
		var payload []byte
		var total, chg, refund sql.NullInt64
		var method sql.NullString
		if err := rows.Scan(&o.ID, &o.Row.Kind, &o.Row.Terminal, &o.Row.Seq, &o.Row.BusinessDate, &o.Row.FlowNo,
			&at, &hash, &payload, &total, &chg, &refund, &method); err != nil {
			return err
		}
		if !hash.Valid {
			return fmt.Errorf("hq_outbox row %d: event %s is not in the events table", o.ID, wire.Key(o.Row.Terminal, o.Row.Seq))
		}
		o.Row.Hash = hash.String
		t, err := time.Parse(timeFormat, at.String)
		if err != nil {
			return fmt.Errorf("hq_outbox row %d: time %q: %w", o.ID, at.String, err)
		}
		o.Row.At = t
		o.Row.Payload = payload
		switch o.Row.Kind {
		case hqwire.KindSale:
			if !total.Valid {
				return fmt.Errorf("hq_outbox row %d: sale %s is not in the sales table", o.ID, wire.Key(o.Row.Terminal, o.Row.Seq))
			}
			o.Row.Amount = money.Fen(total.Int64)
			o.Row.ByMethod = map[string]money.Fen{}
			sales[txnKey{o.Row.Terminal, o.Row.Seq}] = len(out)
			if chg.Int64 != 0 {
				change[len(out)] = money.Fen(chg.Int64)
			}
		case hqwire.KindRefund:
			if !refund.Valid {
				return fmt.Errorf("hq_outbox row %d: refund %s is not in the refunds table", o.ID, wire.Key(o.Row.Terminal, o.Row.Seq))
			}
			o.Row.Amount = money.Fen(refund.Int64)
			o.Row.ByMethod = map[string]money.Fen{method.String: money.Fen(refund.Int64)}
		}
		out = append(out, o)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("hq outbox after %d: %w", afterID, err)
	}
	if len(sales) == 0 {
		return out, nil
	}
	last := out[len(out)-1].ID
	err = sqlitedb.Each(ctx, r.tx, `SELECT p.terminal, p.seq, p.method, p.amount
		FROM hq_outbox o JOIN payments p ON p.business_date = o.business_date AND p.flow_no = o.flow_no
		WHERE o.id > ? AND o.id <= ? AND o.kind = 'sale'`, []any{afterID, last}, func(rows *sql.Rows) error {
		var k txnKey
		var method string
		var amt money.Fen
		if err := rows.Scan(&k.terminal, &k.seq, &method, &amt); err != nil {
			return err
		}
		if i, ok := sales[k]; ok {
			out[i].Row.ByMethod[method] += amt
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("hq outbox after %d: payments: %w", afterID, err)
	}
	for i, c := range change { // change is given in cash
		out[i].Row.ByMethod[wire.MethodCash] -= c
	}
	return out, nil
}

// OutboxMaxID is Ledger.OutboxMaxID inside the reader's snapshot.
func (r *HQReader) OutboxMaxID(ctx context.Context) (int64, error) {
	var id int64
	if err := r.tx.QueryRowContext(ctx, `SELECT coalesce(max(id), 0) FROM hq_outbox`).Scan(&id); err != nil {
		return 0, fmt.Errorf("hq outbox max id: %w", err)
	}
	return id, nil
}

// OutboxCountAfter returns how many hq_outbox rows have an id above afterID.
func (r *HQReader) OutboxCountAfter(ctx context.Context, afterID int64) (int64, error) {
	var n int64
	if err := r.tx.QueryRowContext(ctx, `SELECT count(*) FROM hq_outbox WHERE id > ?`, afterID).Scan(&n); err != nil {
		return 0, fmt.Errorf("hq outbox count after %d: %w", afterID, err)
	}
	return n, nil
}

// HasOutboxAfter reports whether hq_outbox holds a row of a business date with an id above
// afterID: whether the date has rows beyond an upload watermark.
func (r *HQReader) HasOutboxAfter(ctx context.Context, date string, afterID int64) (bool, error) {
	var n int
	err := r.tx.QueryRowContext(ctx, `SELECT count(*) FROM (SELECT 1 FROM hq_outbox
		WHERE business_date = ? AND id > ? LIMIT 1)`, date, afterID).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("hq outbox of %s after %d: %w", date, afterID, err)
	}
	return n > 0, nil
}

// DayManifest is Ledger.DayManifest inside the reader's snapshot. An archived date's
// transactions are those of its archive and of the ledger (arrived since it was archived).
func (r *HQReader) DayManifest(ctx context.Context, date string) ([]hqwire.Txn, error) {
	out, err := manifestOf(ctx, r.tx, date, math.MaxInt64)
	if err != nil {
		return nil, err
	}
	err = r.l.fromArchive(ctx, r.tx, date, func(a *sql.DB, maxFlow int64) error {
		more, err := manifestOf(ctx, a, date, maxFlow)
		out = append(out, more...)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("manifest %s: %w", date, err)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Terminal != out[j].Terminal {
			return out[i].Terminal < out[j].Terminal
		}
		return out[i].Seq < out[j].Seq
	})
	return out, nil
}

// manifestOf reads a date's accepted sales and refunds up to flow number maxFlow from q (the
// ledger or an archive).
func manifestOf(ctx context.Context, q sqlitedb.Querier, date string, maxFlow int64) ([]hqwire.Txn, error) {
	out := []hqwire.Txn{}
	sales := map[txnKey]int{}
	var change []money.Fen
	err := sqlitedb.Each(ctx, q, `SELECT terminal, seq, flow_no, total, change FROM sales WHERE business_date = ? AND flow_no <= ?`,
		[]any{date, maxFlow}, func(rows *sql.Rows) error {
			t := hqwire.Txn{Kind: hqwire.KindSale, ByMethod: map[string]money.Fen{}}
			var chg money.Fen
			if err := rows.Scan(&t.Terminal, &t.Seq, &t.FlowNo, &t.Amount, &chg); err != nil {
				return err
			}
			sales[txnKey{t.Terminal, t.Seq}] = len(out)
			change = append(change, chg)
			out = append(out, t)
			return nil
		})
	if err != nil {
		return nil, fmt.Errorf("manifest %s: sales: %w", date, err)
	}
	err = sqlitedb.Each(ctx, q, `SELECT p.terminal, p.seq, p.method, p.amount
		FROM sales s JOIN payments p ON p.business_date = s.business_date AND p.flow_no = s.flow_no
		WHERE s.business_date = ? AND s.flow_no <= ?`, []any{date, maxFlow}, func(rows *sql.Rows) error {
		var k txnKey
		var method string
		var amt money.Fen
		if err := rows.Scan(&k.terminal, &k.seq, &method, &amt); err != nil {
			return err
		}
		if i, ok := sales[k]; ok {
			out[i].ByMethod[method] += amt
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("manifest %s: payments: %w", date, err)
	}
	for i, c := range change { // sales are out[0:len(change)]
		if c != 0 {
			out[i].ByMethod[wire.MethodCash] -= c
		}
	}
	err = sqlitedb.Each(ctx, q, `SELECT terminal, seq, flow_no, amount, method FROM refunds WHERE business_date = ? AND flow_no <= ?`,
		[]any{date, maxFlow}, func(rows *sql.Rows) error {
			t := hqwire.Txn{Kind: hqwire.KindRefund}
			var method string
			if err := rows.Scan(&t.Terminal, &t.Seq, &t.FlowNo, &t.Amount, &method); err != nil {
				return err
			}
			t.ByMethod = map[string]money.Fen{method: t.Amount}
			out = append(out, t)
			return nil
		})
	if err != nil {
		return nil, fmt.Errorf("manifest %s: refunds: %w", date, err)
	}
	return out, nil
}

// txnKey is an event's idempotency key.
type txnKey struct {
	terminal string
	seq      int64
}

// Exception change queries: the changes after a number, in order; each exception's state now.
const (
	selExceptionChanges = `SELECT id, kind, terminal, seq, sku, business_date FROM exception_changes
		WHERE id > ? ORDER BY id LIMIT ?`
	selOversellState = `SELECT qty_short, at, resolved, resolved_at, resolution FROM oversells
		WHERE terminal = ? AND seq = ? AND sku = ?`
	selRefundExceptionState = `SELECT code, detail || earlier, at, resolved, resolved_at, resolution FROM refund_exceptions
		WHERE terminal = ? AND seq = ?`
	selParkedState = `SELECT kind, code, message, payload, at, resolved, resolved_at, resolution, business_date, %s
		FROM parked WHERE terminal = ? AND seq = ? AND sku = ?`
	// selSeqGapState reads a seq gap, with the business date of the event after it.
	selSeqGapState = `SELECT g.to_seq, g.at_ms, g.reason, coalesce((SELECT e.business_date FROM events e
		WHERE e.terminal = g.terminal AND e.seq = g.to_seq + 1), '') FROM seq_gaps g
		WHERE g.terminal = ? AND g.from_seq = ? AND ? = ''`
)

// ExceptionsAfter reads up to limit changes of the ledger's exceptions (oversell lines,
// refund exceptions, parked events and seq gaps) after change number afterID, in order,
// and returns the state each exception they name holds now, as an hqwire.Exception whose
// Change is the exception's last change read (an exception deleted since is Withdrawn),
// ordered by Change; the last change number read (afterID when there is none); and whether
// it read limit changes (more may follow). An exception changed again after the changes
// read is returned as it is now: its later change sends the same state again.
func (r *HQReader) ExceptionsAfter(ctx context.Context, afterID int64, limit int) (
	xs []hqwire.Exception, last int64, full bool, err error) {
	last = afterID
	read := 0
	byKey := map[string]int{}
	var out []hqwire.Exception
	err = sqlitedb.Each(ctx, r.tx, selExceptionChanges, []any{afterID, limit}, func(rows *sql.Rows) error {
		var x hqwire.Exception
		if err := rows.Scan(&x.Change, &x.Kind, &x.Terminal, &x.Seq, &x.SKU, &x.BusinessDate); err != nil {
			return err
		}
		last = x.Change
		read++
		if i, ok := byKey[x.Key()]; ok {
			out[i].Change = x.Change
			return nil
		}
		byKey[x.Key()] = len(out)
		out = append(out, x)
		return nil
	})
	if err != nil {
		return nil, 0, false, fmt.Errorf("exception changes: %w", err)
	}
	for i := range out {
		if err := r.exceptionState(ctx, &out[i]); err != nil {
			return nil, 0, false, fmt.Errorf("exception %s: %w", out[i].Key(), err)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Change < out[j].Change })
	return out, last, read == limit, nil
}

// ExceptionChangesAfter counts the ledger's exception changes after change number afterID:
// those an uploader whose receipts acknowledged changes through afterID has yet to send.
func (r *HQReader) ExceptionChangesAfter(ctx context.Context, afterID int64) (int64, error) {
	var n int64
	if err := r.tx.QueryRowContext(ctx, `SELECT count(*) FROM exception_changes WHERE id > ?`, afterID).Scan(&n); err != nil {
		return 0, fmt.Errorf("exception changes after %d: %w", afterID, err)
	}
	return n, nil
}

// exceptionState fills in x (its kind and key set) from the exception tables, or marks it
// Withdrawn when they no longer hold it.
func (r *HQReader) exceptionState(ctx context.Context, x *hqwire.Exception) error {
	var at, resolvedAt string
	var err error
	switch x.Kind {
	case hqwire.ExceptionOversell:
		x.Code = hqwire.CodeOversold
		err = r.tx.QueryRowContext(ctx, selOversellState, x.Terminal, x.Seq, x.SKU).Scan(&x.QtyShort, &at, &x.Resolved,
			&resolvedAt, &x.Resolution)
	case hqwire.ExceptionPrice:
		err = r.priceState(ctx, x, &at, &resolvedAt)
	case hqwire.ExceptionRefund:
		err = r.tx.QueryRowContext(ctx, selRefundExceptionState, x.Terminal, x.Seq).Scan(&x.Code, &x.Detail, &at,
			&x.Resolved, &resolvedAt, &x.Resolution)
	case hqwire.ExceptionParked:
		var kind, message, date, hqDetail string
		var payload []byte
		col, cerr := r.hqDetailColumn(ctx)
		if cerr != nil {
			return cerr
		}
		err = r.tx.QueryRowContext(ctx, fmt.Sprintf(selParkedState, col), x.Terminal, x.Seq, x.SKU).Scan(&kind, &x.Code,
			&message, &payload, &at, &x.Resolved, &resolvedAt, &x.Resolution, &date, &hqDetail)
		x.Detail = parkedDetail(wire.Kind(kind), message, payload)
		if hqDetail != "" { // restored from HQ without its payload: HQ's detail, as it was
			x.Detail = hqDetail
		}
		if err == nil {
			// The date the parked event is filed under now (parkedDate: one HQ takes).
			x.BusinessDate = date
			if d := dayCloseDate(wire.Kind(kind), payload); d != "" {
				// A day close is of the day its payload names, as the ledger files an
				// accepted one, not of its time: a till closes a day after midnight.
				// Under its time's date, HQ would list it the night after the day it
				// leaves without a day close.
				x.BusinessDate = d
			}
		}
	case hqwire.ExceptionSeqGap:
		var to, atMs int64
		var date string
		err = r.tx.QueryRowContext(ctx, selSeqGapState, x.Terminal, x.Seq, x.SKU).Scan(&to, &atMs, &x.Code, &date)
		if err == nil {
			x.Detail = seqGapDetail(x.Terminal, x.Seq, to, x.Code)
			x.BusinessDate = date
			if !validDate(date) {
				x.BusinessDate = r.l.parkedDate(time.Time{}, atMs)
			}
			at = time.UnixMilli(atMs).In(r.l.loc).Format(timeFormat)
		}
	default:
		return fmt.Errorf("unknown exception kind %q", x.Kind)
	}
	if errors.Is(err, sql.ErrNoRows) {
		*x = hqwire.Exception{Change: x.Change, Kind: x.Kind, Terminal: x.Terminal, Seq: x.Seq, SKU: x.SKU,
			BusinessDate: x.BusinessDate, Withdrawn: true}
		return nil
	}
	if err != nil {
		return err
	}
	x.At, x.ResolvedAt = r.l.parseTime(at), r.l.parseTime(resolvedAt)
	return nil
}

// hqDetailColumn returns what selParkedState reads as a parked content's HQ detail: the
// column, or an empty text in a ledger the store-server has not migrated to
// 007_restored_exceptions.sql yet (an uploader upgraded before its store-server:
// OpenReader runs no migration).
func (r *HQReader) hqDetailColumn(ctx context.Context) (string, error) {
	if r.hqDetail != "" {
		return r.hqDetail, nil
	}
	ok, err := sqlitedb.Migrated(ctx, r.tx, "007_restored_exceptions.sql")
	if err != nil {
		return "", err
	}
	r.hqDetail = "''"
	if ok {
		r.hqDetail = "hq_detail"
	}
	return r.hqDetail, nil
}

// seqGapDetail says, for HQ, which events of the terminal a seq gap lacks and why.
func seqGapDetail(terminal string, from, to int64, reason string) string {
	what := fmt.Sprintf("seqs %d to %d of terminal %s", from, to, terminal)
	if from == to {
		what = fmt.Sprintf("seq %d of terminal %s", from, terminal)
	}
	why := "reason " + reason
	if reason == GapPruned {
		why = "the ledger lost them (restored from a backup, or started empty) and the till, asked for them " +
			"again, no longer held them"
	}
	return what + ": acked by a ledger the store no longer holds, not in its rows (the till's day close " +
		"counts them); " + why + " (" + reason + ")"
}

// parkedDetail says what a parked event was, for HQ: its kind and, for a sale or refund
// whose payload can be read, what the till took or paid out, then why the store refused it.
func parkedDetail(kind wire.Kind, message string, payload []byte) string {
	what := string(kind)
	switch kind {
	case wire.KindSale:
		var p wire.SalePayload
		if json.Unmarshal(payload, &p) == nil {
			var b strings.Builder
			fmt.Fprintf(&b, "sale %q of %s (", p.SaleID, p.Total)
			for i, pm := range p.Payments {
				if i > 0 {
					b.WriteString(", ")
				}
				fmt.Fprintf(&b, "%s %s", pm.Method, pm.Amount)
			}
			if p.Change != 0 {
				fmt.Fprintf(&b, ", change %s", p.Change)
			}
			b.WriteString(")")
			what = b.String()
		}
	case wire.KindRefund:
		var p wire.RefundPayload
		if json.Unmarshal(payload, &p) == nil {
			what = fmt.Sprintf("refund %q of %s by %s, of sale %q (seq %d)", p.RefundID, p.Amount, p.Method,
				p.SaleID, p.SaleSeq)
		}
	case wire.KindDayClose:
		var p wire.DayClosePayload
		if json.Unmarshal(payload, &p) == nil {
			var b strings.Builder
			fmt.Fprintf(&b, "day close of %q (sales %d of %s, refunds %d of %s", p.BusinessDate, p.SaleCount,
				p.SaleAmount, p.RefundCount, p.RefundAmount)
			for _, m := range p.Methods {
				fmt.Fprintf(&b, "; %s: sales %d of %s, refunds %d of %s", m.Method, m.SaleCount, m.SaleAmount,
					m.RefundCount, m.RefundAmount)
			}
			b.WriteString(")")
			what = b.String()
		}
	case "":
		what = "event"
	}
	return what + ": " + message
}

// dayCloseDate returns the business date a parked day close names, or "" when kind is not
// a day close or its payload names no date HQ takes.
func dayCloseDate(kind wire.Kind, payload []byte) string {
	if kind != wire.KindDayClose {
		return ""
	}
	var p wire.DayClosePayload
	if json.Unmarshal(payload, &p) != nil || !validDate(p.BusinessDate) {
		return ""
	}
	return p.BusinessDate
}
