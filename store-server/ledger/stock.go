package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/posgate/posgate/internal/perr"
	"github.com/posgate/posgate/internal/sqlitedb"
	"github.com/posgate/posgate/internal/wire"
)

// MaxAdjust bounds the size of one stock adjustment, far above any real one, so that stock
// arithmetic never leaves int64.
const MaxAdjust = 1_000_000_000_000

// Adjust changes a SKU's stock by delta for reason "opening" (opening stock) or "adjust" (a
// manager's correction) and returns the SKU's stock after it. It is idempotent by id: a
// repeated id changes nothing and returns applied=false with the current stock; the same id
// with another SKU, delta or reason, or an id a count used, is a perr.Conflict
// ("adjustment_conflict").
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
	err = l.write(ctx, func(w *writer) error {
		prior, found, err := w.adjustment(ctx, id)
		switch {
		case err != nil:
			return err
		case found && (prior.sku != sku || prior.delta != delta || prior.reason != reason || prior.counted.Valid):
			return prior.conflict()
		case found:
			qty, err = w.qty(ctx, sku)
			return err
		}
		qty, err = w.adjust(ctx, adjustment{id: id, sku: sku, delta: delta, reason: reason})
		applied = err == nil
		return err
	})
	if err != nil {
		return 0, false, wrap("adjust", id, err)
	}
	return qty, applied, nil
}

// Count books a shelf count: counted units of the SKU are on the shelf. In one write
// transaction it reads the ledger's quantity (0 if the SKU has none) and books the
// difference as an adjustment (reason "adjust"), so that a sale or refund committed while
// the manager counted is not counted twice, as a delta worked out from an earlier reading
// would count it. It returns the delta booked and the SKU's stock after it (counted, when
// applied). A count that finds the ledger right books no stock move but is recorded under
// its id with delta 0. Count is idempotent by id: a repeated count with the same SKU and
// counted changes nothing and returns the first booking's delta with applied=false and the
// current stock; the same id with another SKU or count, or an id an adjustment used, is a
// perr.Conflict ("adjustment_conflict").
func (l *Ledger) Count(ctx context.Context, id, sku string, counted int64) (delta, qty int64, applied bool, err error) {
	switch {
	case id == "" || len(id) > wire.MaxTextLen || sku == "" || len(sku) > wire.MaxTextLen:
		return 0, 0, false, perr.New(perr.Invalid, CodeAdjustmentInvalid,
			"a count needs an id and a sku of at most %d characters", wire.MaxTextLen)
	case counted < 0 || counted > MaxAdjust:
		return 0, 0, false, perr.New(perr.Invalid, CodeAdjustmentInvalid, "a count of %d is not 0 to %d", counted, MaxAdjust)
	}
	err = l.write(ctx, func(w *writer) error {
		prior, found, err := w.adjustment(ctx, id)
		switch {
		case err != nil:
			return err
		case found && (prior.sku != sku || !prior.counted.Valid || prior.counted.Int64 != counted):
			return prior.conflict()
		case found:
			delta = prior.delta
			qty, err = w.qty(ctx, sku)
			return err
		}
		have, err := w.qty(ctx, sku)
		if err != nil {
			return err
		}
		if delta = counted - have; delta > MaxAdjust || delta < -MaxAdjust {
			return perr.New(perr.Invalid, CodeAdjustmentInvalid,
				"the ledger holds %d of %s: a count of %d would adjust it by more than ±%d", have, sku, counted, MaxAdjust)
		}
		qty, err = w.adjust(ctx, adjustment{id: id, sku: sku, delta: delta, reason: ReasonAdjust,
			counted: sql.NullInt64{Int64: counted, Valid: true}})
		applied = err == nil
		return err
	})
	if err != nil {
		return 0, 0, false, wrap("count", id, err)
	}
	return delta, qty, applied, nil
}

// adjustment is a row of adjustments: counted is valid for a count (Count) only.
type adjustment struct {
	id, sku, reason string
	delta           int64
	counted         sql.NullInt64
}

// conflict is the error for another use of a's id.
func (a adjustment) conflict() error {
	if a.counted.Valid {
		return perr.New(perr.Conflict, CodeAdjustmentConflict,
			"adjustment %q was already used for a count of %d × %s (%+d)", a.id, a.counted.Int64, a.sku, a.delta)
	}
	return perr.New(perr.Conflict, CodeAdjustmentConflict,
		"adjustment %q was already used for %s %+d (%s)", a.id, a.sku, a.delta, a.reason)
}

// wrap adds what failed to an error that is not already one of the ledger's answers.
func wrap(what, id string, err error) error {
	var pe *perr.Error
	if errors.As(err, &pe) {
		return err
	}
	return fmt.Errorf("%s %s: %w", what, id, err)
}

// write runs f in one write transaction and commits it if f returns nil.
func (l *Ledger) write(ctx context.Context, f func(w *writer) error) error {
	tx, err := l.db.W.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	w := l.newWriter(tx)
	defer w.finish() // after the rollback below
	defer tx.Rollback()
	if err := f(w); err != nil {
		return err
	}
	return tx.Commit()
}

// adjustment reads the adjustment booked under id, if any.
func (w *writer) adjustment(ctx context.Context, id string) (a adjustment, found bool, err error) {
	a.id = id
	err = w.scan(ctx, `SELECT sku, delta, reason, counted FROM adjustments WHERE id = ?`, []any{id},
		&a.sku, &a.delta, &a.reason, &a.counted)
	if errors.Is(err, sql.ErrNoRows) {
		return adjustment{}, false, nil
	}
	return a, err == nil, err
}

// qty returns a SKU's stock (0 if the ledger has none).
func (w *writer) qty(ctx context.Context, sku string) (int64, error) {
	var qty int64
	err := w.scan(ctx, `SELECT qty FROM stock WHERE sku = ?`, []any{sku}, &qty)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	return qty, err
}

// adjust books a new adjustment in w's transaction: its adjustments row and its stock move,
// and returns the SKU's stock after it. A count that found the ledger right (delta 0)
// changes no stock and gets no stock move; an adjustment by 0 (opening stock of nothing)
// does, so that the SKU has a stock row.
func (w *writer) adjust(ctx context.Context, a adjustment) (int64, error) {
	at := w.l.now().UTC().Format(timeFormat)
	if err := w.exec(ctx, `INSERT INTO adjustments (id, sku, delta, reason, at, counted) VALUES (?, ?, ?, ?, ?, ?)`,
		a.id, a.sku, a.delta, a.reason, at, a.counted); err != nil {
		return 0, err
	}
	if a.counted.Valid && a.delta == 0 {
		return w.qty(ctx, a.sku)
	}
	return w.move(ctx, a.sku, a.delta, a.reason, a.id, at)
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

func skuQuantities(ctx context.Context, q sqlitedb.Querier, query string) (map[string]int64, error) {
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
