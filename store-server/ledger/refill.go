package ledger

import (
	"context"
	"database/sql"
	"fmt"
	"sort"

	"github.com/posgate/posgate/internal/hqwire"
	"github.com/posgate/posgate/internal/perr"
	"github.com/posgate/posgate/internal/wire"
)

// A ledger refilled from HQ (store-server restore --from-hq): a store that lost its data
// directory with no backup books again, into an empty ledger, what HQ holds of it: its
// stock adjustments as they were booked (RestoreAdjustments), then its sales, refunds and
// day closes as replays of what the store recorded (RestoreRows: the hash, flow number and
// business date each had), so that stock is the sum of the same moves. The tills' catch-up
// then books what HQ did not hold. A SKU whose stock the moves HQ held cannot prove is
// marked unknown (MarkUnknown) until a manager counts it.

// CodeNotEmpty refuses a refill into a ledger that holds anything.
const CodeNotEmpty = "ledger_not_empty"

// Unknown-stock reasons (stock_unknown.why).
const (
	UnknownNoOpening  = "no_opening" // HQ held no opening stock or count of the SKU
	UnknownIncomplete = "incomplete" // HQ lacked part of the store's history
)

// Empty reports whether the ledger holds no event, adjustment or stock move: the only
// ledger a refill from HQ books into.
func (l *Ledger) Empty(ctx context.Context) (bool, error) {
	var n int64
	err := l.db.R.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM (SELECT 1 FROM events LIMIT 1)) +
		(SELECT count(*) FROM (SELECT 1 FROM adjustments LIMIT 1)) + (SELECT count(*) FROM (SELECT 1 FROM stock_moves LIMIT 1)) +
		(SELECT count(*) FROM archived_days)`).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("empty ledger: %w", err)
	}
	return n == 0, nil
}

// ErrNotEmpty is the refusal of a refill into a ledger that holds something.
func ErrNotEmpty(path string) error {
	return perr.New(perr.Conflict, CodeNotEmpty,
		"the ledger %s is not empty: a refill from HQ books only into an empty ledger (a new data directory)", path)
}

// RestoreAdjustments books stock adjustments HQ held, in their order, each under its
// number (the adjustment's rowid), id, time and count, with its stock move: as the lost
// ledger booked them. Numbers are kept, so that the uploader's next adjustments come after
// them.
func (l *Ledger) RestoreAdjustments(ctx context.Context, moves []hqwire.StockMove) error {
	return l.write(ctx, func(w *writer) error {
		for i := range moves {
			m := &moves[i]
			if m.Reason != ReasonOpening && m.Reason != ReasonAdjust {
				return perr.New(perr.Invalid, CodeAdjustmentInvalid, "move %q: reason %q", m.ID, m.Reason)
			}
			at := m.At.UTC().Format(timeFormat)
			var counted sql.NullInt64
			if m.Counted != nil {
				counted = sql.NullInt64{Int64: *m.Counted, Valid: true}
			}
			if err := w.exec(ctx, `INSERT INTO adjustments (rowid, id, sku, delta, reason, at, counted) VALUES (?, ?, ?, ?, ?, ?, ?)`,
				m.N, m.ID, m.SKU, m.Delta, m.Reason, at, counted); err != nil {
				return fmt.Errorf("restore adjustment %s: %w", m.ID, err)
			}
			if counted.Valid && m.Delta == 0 {
				continue
			}
			if _, err := w.move(ctx, m.SKU, m.Delta, m.Reason, m.ID, at); err != nil {
				return fmt.Errorf("restore adjustment %s: %w", m.ID, err)
			}
		}
		return nil
	})
}

// RestoreRows books rows HQ held (sales, refunds, day closes, each with its payload) as
// the store recorded them: accepted, with their hash, time and flow number, as a till's
// replay is. It returns the outcomes; an error only when the commit failed.
func (l *Ledger) RestoreRows(ctx context.Context, rows []hqwire.Row) ([]Outcome, error) {
	recs := make([]Record, len(rows))
	for i := range rows {
		r := &rows[i]
		recs[i] = Record{Terminal: r.Terminal, Seq: r.Seq, Kind: wire.Kind(r.Kind), Hash: r.Hash, At: r.At, Offline: true,
			Payload: r.Payload, Status: wire.AckAccepted, Final: true, FlowNo: r.FlowNo, Replayed: true}
	}
	return l.Commit(ctx, recs)
}

// ForgetRefillExceptions drops the exceptions the refill's bookings flagged (oversells,
// refund exceptions) and their changes: the lost ledger flagged its own, which HQ holds and
// gives back (RestoreExceptions), and the refill judged the rows against stock it cannot
// prove. Only for a refill, before the ledger takes anything else.
func (l *Ledger) ForgetRefillExceptions(ctx context.Context) error {
	return l.write(ctx, func(w *writer) error {
		for _, q := range []string{`DELETE FROM oversells`, `DELETE FROM refund_exceptions`, `DELETE FROM price_exceptions`,
			`UPDATE sales SET oversold = 0`, `UPDATE events SET oversold = 0`, `DELETE FROM exception_changes`} {
			if err := w.exec(ctx, q); err != nil {
				return fmt.Errorf("forget the refill's exceptions: %w", err)
			}
		}
		return nil
	})
}

// MarkUnknown marks skus as of unknown stock, for why, until a manager counts them.
func (l *Ledger) MarkUnknown(ctx context.Context, skus []string, why string) error {
	since := l.now().UTC().Format(timeFormat)
	return l.write(ctx, func(w *writer) error {
		for _, sku := range skus {
			if err := w.exec(ctx, `INSERT INTO stock_unknown (sku, since, why) VALUES (?, ?, ?)
				ON CONFLICT (sku) DO UPDATE SET why = excluded.why`, sku, since, why); err != nil {
				return fmt.Errorf("mark unknown stock: %w", err)
			}
		}
		return nil
	})
}

// UnknownStock returns the SKUs of unknown stock with why each is (UnknownNoOpening,
// UnknownIncomplete), until a count.
func (l *Ledger) UnknownStock(ctx context.Context) (map[string]string, error) {
	rows, err := l.db.R.QueryContext(ctx, `SELECT sku, why FROM stock_unknown`)
	if err != nil {
		return nil, fmt.Errorf("unknown stock: %w", err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var sku, why string
		if err := rows.Scan(&sku, &why); err != nil {
			return nil, fmt.Errorf("unknown stock: %w", err)
		}
		out[sku] = why
	}
	return out, rows.Err()
}

// UnprovenSKUs returns, sorted, the SKUs the ledger holds stock of that no opening stock or
// count proves: after a refill, their quantity is only what the moves HQ held add up to.
func (l *Ledger) UnprovenSKUs(ctx context.Context) ([]string, error) {
	rows, err := l.db.R.QueryContext(ctx, `SELECT sku FROM stock WHERE sku NOT IN
		(SELECT sku FROM adjustments WHERE reason = 'opening' OR counted IS NOT NULL)`)
	if err != nil {
		return nil, fmt.Errorf("unproven stock: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var sku string
		if err := rows.Scan(&sku); err != nil {
			return nil, err
		}
		out = append(out, sku)
	}
	sort.Strings(out)
	return out, rows.Err()
}

// AllSKUs returns, sorted, every SKU the ledger holds stock of.
func (l *Ledger) AllSKUs(ctx context.Context) ([]string, error) {
	m, err := l.Stock(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(m))
	for sku := range m {
		out = append(out, sku)
	}
	sort.Strings(out)
	return out, nil
}

// MarkRefilled records the terminals a refill booked rows of (refilled_terminals): until
// the ledger holds each one's every seq, Next expects the first it lacks.
func (l *Ledger) MarkRefilled(ctx context.Context, terminals []string) error {
	return l.write(ctx, func(w *writer) error {
		for _, t := range terminals {
			if err := w.exec(ctx, `INSERT INTO refilled_terminals (terminal, from_seq) VALUES (?, 1)
				ON CONFLICT (terminal) DO NOTHING`, t); err != nil {
				return err
			}
		}
		return nil
	})
}

// refilledNext lowers next, for each refilled terminal, to the first seq the ledger lacks
// of it (from its from_seq on); a terminal whose every seq the ledger holds again leaves
// refilled_terminals.
func (l *Ledger) refilledNext(ctx context.Context, next map[string]int64) error {
	rows, err := l.db.R.QueryContext(ctx, `SELECT r.terminal, CASE
		WHEN NOT EXISTS (SELECT 1 FROM events e WHERE e.terminal = r.terminal AND e.seq = r.from_seq) THEN r.from_seq
		ELSE (SELECT min(e.seq) + 1 FROM events e WHERE e.terminal = r.terminal AND e.seq >= r.from_seq
			AND NOT EXISTS (SELECT 1 FROM events f WHERE f.terminal = e.terminal AND f.seq = e.seq + 1)) END
		FROM refilled_terminals r`)
	if err != nil {
		return err
	}
	defer rows.Close()
	var whole []string
	for rows.Next() {
		var t string
		var first int64
		if err := rows.Scan(&t, &first); err != nil {
			return err
		}
		if n, ok := next[t]; ok && first < n {
			next[t] = first
			continue
		}
		whole = append(whole, t)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	rows.Close()
	for _, t := range whole {
		if _, err := l.db.W.ExecContext(ctx, `DELETE FROM refilled_terminals WHERE terminal = ?`, t); err != nil {
			return err
		}
	}
	return nil
}
