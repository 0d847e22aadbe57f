package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/posgate/posgate/internal/perr"
	"github.com/posgate/posgate/internal/wire"
)

// MaxAdjust bounds the size of one stock adjustment, far above any real one, so that stock
// arithmetic never leaves int64.
const MaxAdjust = 1_000_000_000_000

// Adjust changes a SKU's stock by delta for reason "opening" (opening stock) or "adjust" (a
// manager's correction) and returns the SKU's stock after it. It is idempotent by id: a
// repeated id changes nothing and returns applied=false with the current stock; the same id
// with another SKU, delta or reason is a perr.Conflict ("adjustment_conflict").
func (l *Ledger) Adjust(ctx context.Context, id, sku string, delta int64, reason string) (qty int64, applied bool, err error) {
	switch {
	case id == "" || len(id) > wire.MaxTextLen || sku == "" || len(sku) > wire.MaxTextLen:
		return 0, false, perr.New(perr.Invalid, CodeAdjustmentInvalid,
			"an adjustment needs an id and a sku of at most %d characters", wire.MaxTextLen)
	case reason != ReasonOpening && reason != ReasonAdjust:
		return 0, false, perr.New(perr.Invalid, CodeAdjustmentInvalid, "adjustment reason %q is not %q or %q",
			reason, ReasonOpening, ReasonAdjust)
	case delta > MaxAdjust || delta < -MaxAdjust:
		return 0, false, perr.New(perr.Invalid, CodeAdjustmentInvalid, "adjustment of %d is beyond ±%d", delta, MaxAdjust)
	}
	tx, err := l.db.W.BeginTx(ctx, nil)
	if err != nil {
		return 0, false, fmt.Errorf("adjust %s: %w", id, err)
	}
	w := l.newWriter(tx)
	defer w.finish() // after the rollback below
	defer tx.Rollback()
	var prior struct {
		sku, reason string
		delta       int64
	}
	err = w.scan(ctx, `SELECT sku, delta, reason FROM adjustments WHERE id = ?`, []any{id},
		&prior.sku, &prior.delta, &prior.reason)
	switch {
	case err == nil:
		if prior.sku != sku || prior.delta != delta || prior.reason != reason {
			return 0, false, perr.New(perr.Conflict, CodeAdjustmentConflict,
				"adjustment %q was already used for %s %+d (%s)", id, prior.sku, prior.delta, prior.reason)
		}
		err = w.scan(ctx, `SELECT qty FROM stock WHERE sku = ?`, []any{sku}, &qty)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return 0, false, fmt.Errorf("adjust %s: %w", id, err)
		}
		return qty, false, nil
	case !errors.Is(err, sql.ErrNoRows):
		return 0, false, fmt.Errorf("adjust %s: %w", id, err)
	}
	at := l.now().UTC().Format(timeFormat)
	if err := w.exec(ctx, `INSERT INTO adjustments (id, sku, delta, reason, at) VALUES (?, ?, ?, ?, ?)`,
		id, sku, delta, reason, at); err != nil {
		return 0, false, fmt.Errorf("adjust %s: %w", id, err)
	}
	if qty, err = w.move(ctx, sku, delta, reason, id, at); err != nil {
		return 0, false, fmt.Errorf("adjust %s: %w", id, err)
	}
	if err := tx.Commit(); err != nil {
		return 0, false, fmt.Errorf("adjust %s: %w", id, err)
	}
	return qty, true, nil
}

// Stock returns the current stock of every SKU the ledger knows (negative after oversells).
func (l *Ledger) Stock(ctx context.Context) (map[string]int64, error) {
	m, err := skuQuantities(ctx, l.db.R, `SELECT sku, qty FROM stock`)
	if err != nil {
		return nil, fmt.Errorf("stock: %w", err)
	}
	return m, nil
}

// ProvenStock returns stock as the movements prove it (view stock_flow: stock_moves and
// the lines of accepted sales): per SKU, opening + adjustments − sold + restocked by
// refunds (invariant 4). It always equals Stock.
func (l *Ledger) ProvenStock(ctx context.Context) (map[string]int64, error) {
	m, err := skuQuantities(ctx, l.db.R, `SELECT sku, sum(delta) FROM stock_flow GROUP BY sku`)
	if err != nil {
		return nil, fmt.Errorf("proven stock: %w", err)
	}
	return m, nil
}

// querier is a read pool or a read transaction.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

func skuQuantities(ctx context.Context, q querier, query string) (map[string]int64, error) {
	rows, err := q.QueryContext(ctx, query)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	m := map[string]int64{}
	for rows.Next() {
		var sku string
		var qty int64
		if err := rows.Scan(&sku, &qty); err != nil {
			return nil, err
		}
		m[sku] = qty
	}
	return m, rows.Err()
}
