package ledger

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/posgate/posgate/internal/hqwire"
)

// Adjustments returns up to limit of the ledger's stock adjustments (opening stock, a
// manager's adjustments and counts) after the one numbered after, in the order they were
// booked, as HQ keeps them (hqwire.StockMove): N is the adjustment's rowid, one above the
// one before in a ledger that never lost one. The stock moves a ledger derives from its
// transactions (a sale's lines, a restocking refund) are not among them: HQ holds the
// transactions.
func (l *Ledger) Adjustments(ctx context.Context, after int64, limit int) ([]hqwire.StockMove, error) {
	rows, err := l.db.R.QueryContext(ctx, `SELECT rowid, id, sku, delta, reason, at, counted FROM adjustments
		WHERE rowid > ? ORDER BY rowid LIMIT ?`, after, limit)
	if err != nil {
		return nil, fmt.Errorf("adjustments: %w", err)
	}
	defer rows.Close()
	var out []hqwire.StockMove
	for rows.Next() {
		var m hqwire.StockMove
		var at string
		var counted sql.NullInt64
		if err := rows.Scan(&m.N, &m.ID, &m.SKU, &m.Delta, &m.Reason, &at, &counted); err != nil {
			return nil, fmt.Errorf("adjustments: %w", err)
		}
		if m.At, err = time.Parse(timeFormat, at); err != nil {
			return nil, fmt.Errorf("adjustments: %s: at %q: %w", m.ID, at, err)
		}
		if counted.Valid {
			m.Counted = &counted.Int64
		}
		out = append(out, m)
	}
	return out, rows.Err()
}

// MaxAdjustment returns the number (rowid) of the ledger's last stock adjustment, 0 if none.
func (l *Ledger) MaxAdjustment(ctx context.Context) (int64, error) {
	var n sql.NullInt64
	if err := l.db.R.QueryRowContext(ctx, `SELECT max(rowid) FROM adjustments`).Scan(&n); err != nil {
		return 0, fmt.Errorf("adjustments: %w", err)
	}
	return n.Int64, nil
}

// AdjustmentsWaiting counts the adjustments an uploader that HQ acknowledged through
// through has still to send: those after it, or all of them when the ledger's last is below
// it (a ledger restored from a backup, or refilled: the uploader sends them all again).
func (r *HQReader) AdjustmentsWaiting(ctx context.Context, through int64) (int64, error) {
	return countWaiting(ctx, r.tx, "adjustments", "rowid", through)
}

// countWaiting counts the rows of table whose key (col) is above through, or all of them
// when the highest is below through.
func countWaiting(ctx context.Context, tx *sql.Tx, table, col string, through int64) (int64, error) {
	var top sql.NullInt64
	if err := tx.QueryRowContext(ctx, `SELECT max(`+col+`) FROM `+table).Scan(&top); err != nil {
		return 0, fmt.Errorf("%s waiting: %w", table, err)
	}
	if top.Int64 < through {
		through = 0
	}
	var n int64
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM `+table+` WHERE `+col+` > ?`, through).Scan(&n); err != nil {
		return 0, fmt.Errorf("%s waiting: %w", table, err)
	}
	return n, nil
}
