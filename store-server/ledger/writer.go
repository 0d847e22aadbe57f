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

// commitEach stores the records one by one, each inside its own savepoint, then flags the
// refunds the ledger does not cover (checkRefunds). It is Commit's fallback when a staged
// write fails: a savepoint per record tells a record SQLite refuses (its Outcome.Err) from a
// commit that fails.
func (l *Ledger) commitEach(ctx context.Context, w *writer, recs []Record, out []Outcome, nowMs int64) error {
	var e entry
	for i := range recs {
		e.init(recs[i])
		o, err := l.commitOne(ctx, w, &e, nowMs)
		if err != nil {
			return fmt.Errorf("commit %s: %w", wire.Key(recs[i].Terminal, recs[i].Seq), err)
		}
		out[i] = o
	}
	return w.checkRefunds(ctx, recs, out)
}

// commitOne stores one record: settled or decided, and its rows written at once (flush),
// the decision inside a savepoint. A *perr.Error from deciding or writing it (a SQLite
// constraint becomes one) rolls the record back and becomes its Outcome.Err; any other error
// fails the whole commit.
func (l *Ledger) commitOne(ctx context.Context, w *writer, e *entry, nowMs int64) (Outcome, error) {
	if e.err != nil {
		return Outcome{Err: e.err}, nil
	}
	prior, err := w.prior(ctx, e.r.Terminal, e.r.Seq)
	if err != nil {
		return Outcome{}, err
	}
	if o, done := l.settled(w, e, prior, nowMs); done {
		return o, w.flush(ctx) // a conflict's parking
	}
	if err := w.exec(ctx, `SAVEPOINT record`); err != nil {
		return Outcome{}, err
	}
	o, err := l.decide(ctx, w, e, prior, nowMs)
	if err == nil {
		err = w.flush(ctx)
	}
	if err != nil {
		w.discard()
		var pe *perr.Error
		if !errors.As(constraint(err), &pe) {
			return Outcome{}, err
		}
		if err := w.exec(ctx, `ROLLBACK TO record`); err != nil {
			return Outcome{}, err
		}
		if err := w.exec(ctx, `RELEASE record`); err != nil {
			return Outcome{}, err
		}
		return Outcome{Err: pe}, nil
	}
	if err := w.exec(ctx, `RELEASE record`); err != nil {
		return Outcome{}, err
	}
	return o, nil
}

// writer runs the statements of one write transaction. A group commit runs the same few
// statements thousands of times, so each is prepared once per transaction at most, and the
// ledger keeps them prepared on the writer connection for the next transactions.
type writer struct {
	l      *Ledger
	tx     *sql.Tx
	stmts  map[string]*sql.Stmt
	missed []string // statements prepared inside tx, to prepare on the connection afterwards

	// The record commitOne decides (as state): the rows its rules put, and its events row.
	rs    rowSet
	event []any
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

// prior returns what the ledger holds under a key, nil if nothing.
func (w *writer) prior(ctx context.Context, terminal string, seq int64) (*known, error) {
	s, err := w.stmt(ctx, lookupQuery)
	if err != nil {
		return nil, err
	}
	st, found, err := scanStored(s.QueryRowContext(ctx, terminal, seq))
	if err != nil || !found {
		return nil, err
	}
	return &known{Stored: st, row: -1}, nil
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

// insert writes the flattened rows of m.
func (w *writer) insert(ctx context.Context, m *multi, rows []any) error {
	return m.chunks(len(rows)/m.width, func(query string, from, to int) error {
		return w.exec(ctx, query, rows[from*m.width:to*m.width]...)
	})
}

// The writer as the rules' state: the ledger as the transaction holds it, each read and
// stock change one statement, the rows of a record written once it is decided (flush).

func (w *writer) stockOf(ctx context.Context, sku string) (int64, error) { return w.qty(ctx, sku) }

func (w *writer) take(ctx context.Context, sku string, delta int64) (int64, error) {
	return w.stock(ctx, sku, delta)
}

func (w *writer) topFlow(ctx context.Context, date string) (int64, error) {
	var top int64
	err := w.scan(ctx, selMaxFlow, []any{date}, &top)
	return top, err
}

func (w *writer) flowTaken(ctx context.Context, f flowKey) (bool, error) {
	var taken int
	err := w.scan(ctx, selFlowTaken, []any{f.date, f.flow}, &taken)
	return taken > 0, err
}

// flowHolder reads the event that holds a flow number (one record at a time, the records
// of the group before are written), or looks in the archive of its day.
func (w *writer) flowHolder(ctx context.Context, f flowKey) (string, bool, error) {
	var key string
	err := w.scan(ctx, selFlowHolder, []any{f.date, f.flow}, &key)
	if errors.Is(err, sql.ErrNoRows) {
		return w.l.archivedFlow(ctx, w.tx, f)
	}
	return key, err == nil, err
}

// claimFlow takes nothing yet: the record's events row takes its flow number when written,
// unique through the index events_flow.
func (w *writer) claimFlow(flowKey, eventKey) {}

func (w *writer) ledger() *Ledger { return w.l }

func (w *writer) rows() *rowSet {
	if w.rs.by == nil {
		w.rs.by = map[*multi][]any{}
	}
	return &w.rs
}

// record deletes prior at once and keeps the events row for flush.
func (w *writer) record(ctx context.Context, k eventKey, prior *known, _ Stored, row []any) error {
	if prior != nil {
		if err := w.exec(ctx, deleteNonFinal, k.terminal, k.seq); err != nil {
			return err
		}
	}
	w.event = row
	return nil
}

// flush writes the rows the rules put for the record, then its events row (if it has one).
func (w *writer) flush(ctx context.Context) error {
	if err := w.rs.write(ctx, w); err != nil {
		return err
	}
	if w.event == nil {
		return nil
	}
	row := w.event
	w.event = nil
	return w.exec(ctx, insEvents.shape(1), row...)
}

// discard drops what the record put and flush did not write.
func (w *writer) discard() {
	w.rs.reset()
	w.event = nil
}
