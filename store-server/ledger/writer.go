package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/posgate/posgate/internal/perr"
	"github.com/posgate/posgate/internal/sqlitedb"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/store"
)

// sale writes an accepted sale, or turns d into an out-of-stock refusal (CheckStock).
func (w *writer) sale(ctx context.Context, r *Record, d *decision) error {
	p, err := payloadOf(r.Sale, r)
	if err != nil {
		return err
	}
	need := sumBySKU(len(p.Lines), func(i int) (string, int64) { return p.Lines[i].SKU, p.Lines[i].Qty })
	if r.CheckStock && !r.Offline {
		sku, have, want, err := w.shortage(ctx, need)
		if err != nil {
			return err
		}
		if sku != "" {
			d.status, d.final, d.code = wire.AckRejected, false, CodeOutOfStock
			d.message = fmt.Sprintf("sku %q: %d in stock, the sale needs %d", sku, have, want)
			return nil
		}
	}
	if err := w.takeFlow(ctx, r, d); err != nil {
		return err
	}
	for _, ln := range need { // the sale's lines are its stock movement (view stock_flow)
		after, err := w.stock(ctx, ln.SKU, -ln.Qty)
		if err != nil {
			return err
		}
		if after < 0 {
			d.oversold = true
			if err := w.exec(ctx, `INSERT INTO oversells (terminal, seq, sku, qty_short, at, business_date)
				VALUES (?, ?, ?, ?, ?, ?)`, r.Terminal, r.Seq, ln.SKU, min(ln.Qty, -after), d.at, d.date); err != nil {
				return err
			}
		}
	}
	d.oversold = d.oversold || r.Oversold
	if err := w.exec(ctx, `INSERT INTO sales (terminal, seq, sale_id, at, business_date, flow_no, total, change,
		offline, oversold) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, r.Terminal, r.Seq, p.SaleID, d.at, d.date,
		d.flowNo, int64(p.Total), int64(p.Change), r.Offline, d.oversold); err != nil {
		return err
	}
	for i, ln := range p.Lines {
		if err := w.exec(ctx, `INSERT INTO sale_lines (terminal, seq, n, line, sku, name, qty, unit_price, amount)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`, r.Terminal, r.Seq, i+1, ln.Line, ln.SKU, ln.Name, ln.Qty,
			int64(ln.UnitPrice), int64(ln.Amount)); err != nil {
			return err
		}
	}
	for i, pm := range p.Payments {
		if err := w.exec(ctx, `INSERT INTO payments (business_date, flow_no, n, terminal, seq, method, amount, reference)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, d.date, d.flowNo, i+1, r.Terminal, r.Seq, pm.Method, int64(pm.Amount),
			pm.Reference); err != nil {
			return err
		}
	}
	return w.outbox(ctx, r, d, d.date)
}

// shortage returns the first SKU of need that the stock does not cover ("" if all are).
func (w *writer) shortage(ctx context.Context, need []store.Line) (sku string, have, want int64, err error) {
	for _, ln := range need {
		var qty int64
		err := w.scan(ctx, `SELECT qty FROM stock WHERE sku = ?`, []any{ln.SKU}, &qty)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return "", 0, 0, err
		}
		if qty < ln.Qty {
			return ln.SKU, qty, ln.Qty, nil
		}
	}
	return "", 0, 0, nil
}

// takeFlow records the record's flow number on its business date, allocating the date's
// highest + 1 when the record brings none.
func (w *writer) takeFlow(ctx context.Context, r *Record, d *decision) error {
	flow := r.FlowNo
	if flow == 0 {
		if err := w.scan(ctx, selMaxFlow, []any{d.date}, &flow); err != nil {
			return err
		}
		flow++
	}
	var taken int
	if err := w.scan(ctx, selFlowTaken, []any{d.date, flow}, &taken); err != nil {
		return err
	}
	if taken > 0 {
		return perr.New(perr.Conflict, CodeFlowClash, "flow number %d of %s is already taken", flow, d.date)
	}
	d.flowNo = flow // unique through the record's events row (index events_flow)
	return nil
}

// refund writes an accepted refund and, if it restocks, its stock moves.
func (w *writer) refund(ctx context.Context, r *Record, d *decision) error {
	p, err := payloadOf(r.Refund, r)
	if err != nil {
		return err
	}
	if err := w.takeFlow(ctx, r, d); err != nil {
		return err
	}
	if err := w.exec(ctx, `INSERT INTO refunds (terminal, seq, refund_id, sale_id, sale_seq, at, business_date,
		flow_no, amount, method, reference, restock) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		r.Terminal, r.Seq, p.RefundID, p.SaleID, p.SaleSeq, d.at, d.date, d.flowNo, int64(p.Amount), p.Method,
		p.Reference, p.Restock); err != nil {
		return err
	}
	for i, ln := range p.Lines {
		if err := w.exec(ctx, `INSERT INTO refund_lines (terminal, seq, n, line, sku, qty, amount)
			VALUES (?, ?, ?, ?, ?, ?, ?)`, r.Terminal, r.Seq, i+1, ln.Line, ln.SKU, ln.Qty, int64(ln.Amount)); err != nil {
			return err
		}
	}
	if p.Restock {
		ref := wire.Key(r.Terminal, r.Seq)
		back := sumBySKU(len(p.Lines), func(i int) (string, int64) { return p.Lines[i].SKU, p.Lines[i].Qty })
		for _, ln := range back {
			if _, err := w.move(ctx, ln.SKU, ln.Qty, ReasonRefund, ref, d.at); err != nil {
				return err
			}
		}
	}
	return w.outbox(ctx, r, d, d.date)
}

// dayClose records a terminal's declared totals for the day its payload names.
func (w *writer) dayClose(ctx context.Context, r *Record, d *decision) error {
	p, err := payloadOf(r.DayClose, r)
	if err != nil {
		return err
	}
	if err := w.exec(ctx, upsertDayClose, r.Terminal, p.BusinessDate, r.Seq, r.Payload); err != nil {
		return err
	}
	return w.outbox(ctx, r, d, p.BusinessDate)
}

// outbox queues an accepted event for headquarters.
func (w *writer) outbox(ctx context.Context, r *Record, d *decision, date string) error {
	return w.exec(ctx, `INSERT INTO hq_outbox (kind, terminal, seq, business_date, flow_no) VALUES (?, ?, ?, ?, ?)`,
		string(r.Kind), r.Terminal, r.Seq, date, sql.NullInt64{Int64: d.flowNo, Valid: d.flowNo > 0})
}

// writer runs the statements of one write transaction. A group commit runs the same few
// statements thousands of times, so each is prepared once per transaction at most, and the
// ledger keeps them prepared on the writer connection for the next transactions.
type writer struct {
	l      *Ledger
	tx     *sql.Tx
	stmts  map[string]*sql.Stmt
	missed []string // statements prepared inside tx, to prepare on the connection afterwards
}

func (l *Ledger) newWriter(tx *sql.Tx) *writer {
	return &writer{l: l, tx: tx, stmts: map[string]*sql.Stmt{}}
}

func (w *writer) stmt(ctx context.Context, query string) (*sql.Stmt, error) {
	if s, ok := w.stmts[query]; ok {
		return s, nil
	}
	var s *sql.Stmt
	if p := w.l.prepared(query); p != nil {
		s = w.tx.StmtContext(ctx, p)
	} else {
		var err error
		if s, err = w.tx.PrepareContext(ctx, query); err != nil { // closed with the transaction
			return nil, err
		}
		w.missed = append(w.missed, query)
	}
	w.stmts[query] = s
	return s, nil
}

// finish runs after the transaction ended: it prepares on the writer connection the
// statements this transaction had to prepare for itself.
func (w *writer) finish() {
	for _, q := range w.missed {
		w.l.prepare(q)
	}
}

func (w *writer) exec(ctx context.Context, query string, args ...any) error {
	s, err := w.stmt(ctx, query)
	if err != nil {
		return err
	}
	_, err = s.ExecContext(ctx, args...)
	return err
}

// scan runs a query expected to return one row and scans it into dest (sql.ErrNoRows if none).
func (w *writer) scan(ctx context.Context, query string, args []any, dest ...any) error {
	s, err := w.stmt(ctx, query)
	if err != nil {
		return err
	}
	return s.QueryRowContext(ctx, args...).Scan(dest...)
}

// each runs a query and calls fn for each row it returns.
func (w *writer) each(ctx context.Context, query string, args []any, fn func(*sql.Rows) error) error {
	s, err := w.stmt(ctx, query)
	if err != nil {
		return err
	}
	return sqlitedb.EachRow(s.QueryContext(ctx, args...))(fn)
}

func (w *writer) lookup(ctx context.Context, terminal string, seq int64) (Stored, bool, error) {
	s, err := w.stmt(ctx, lookupQuery)
	if err != nil {
		return Stored{}, false, err
	}
	return scanStored(s.QueryRowContext(ctx, terminal, seq))
}

// stock changes a SKU's stock by delta and returns the new quantity.
func (w *writer) stock(ctx context.Context, sku string, delta int64) (int64, error) {
	var qty int64
	err := w.scan(ctx, `INSERT INTO stock (sku, qty) VALUES (?, ?)
		ON CONFLICT (sku) DO UPDATE SET qty = qty + excluded.qty RETURNING qty`, []any{sku, delta}, &qty)
	return qty, err
}

// move changes a SKU's stock by delta with its stock move (not a sale: a sale's lines are
// its movement), and returns the new quantity.
func (w *writer) move(ctx context.Context, sku string, delta int64, reason, ref, at string) (int64, error) {
	qty, err := w.stock(ctx, sku, delta)
	if err != nil {
		return 0, err
	}
	err = w.exec(ctx, `INSERT INTO stock_moves (sku, delta, reason, ref, at) VALUES (?, ?, ?, ?, ?)`,
		sku, delta, reason, ref, at)
	return qty, err
}
