package ledger

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"sync/atomic"

	"github.com/posgate/posgate/internal/perr"
	"github.com/posgate/posgate/internal/sqlitedb"
	"github.com/posgate/posgate/internal/wire"
)

// The staged group commit (Commit's fast path). It reads what the group needs to know from the
// ledger with a few multi-key queries (the events of its keys, the stock of its SKUs, the flow
// numbers it names), decides every record in order in memory with the same rules as
// commitOne (settled, decide: the stage is their state), and writes the rows table by table,
// in record order, with multi-row statements. Whatever commitOne answers from a statement
// that fails (a flow number taken, an unreadable payload) the rules answer before anything of
// the record is staged; any other failure makes Commit start over with commitEach.

// stagedFallbacks counts staged commits that had to start over record by record (for tests).
var stagedFallbacks atomic.Int64

// stage is a group commit decided in memory.
type stage struct {
	l     *Ledger
	w     *writer
	nowMs int64

	keys    map[eventKey]*known  // the group's keys: the ledger's row, then each staged record's
	stock   map[string]int64     // the group's SKUs: quantity in the ledger, then after each move
	skus    []string             // SKUs moved, in the order first moved
	delta   map[string]int64     // SKU → Σ staged moves
	flows   map[flowKey]eventKey // flow numbers taken: the ledger's the group names (no key), and staged (their record's)
	maxFlow map[string]int64     // business date → highest flow number in the ledger (when asked)
	top     map[string]int64     // business date → highest flow number staged

	events  [][]any // rows of insEvents; nil when replaced within the group
	deletes [][]any // non-final events of the ledger replaced by the group
	rs      rowSet  // the rows the rules put
}

// commitStaged decides recs in memory, writes them, flags the refunds the ledger does not
// cover (checkRefunds, as commitEach does), and fills in out. An error means nothing
// it wrote may be kept (the caller rolls back) and the group must be stored record by record.
func (l *Ledger) commitStaged(ctx context.Context, w *writer, recs []Record, out []Outcome, nowMs int64) error {
	s := &stage{l: l, w: w, nowMs: nowMs, keys: map[eventKey]*known{}, stock: map[string]int64{},
		delta: map[string]int64{}, flows: map[flowKey]eventKey{}, maxFlow: map[string]int64{},
		top: map[string]int64{}, rs: rowSet{by: map[*multi][]any{}}}
	entries := make([]entry, len(recs))
	for i := range recs {
		entries[i].init(recs[i])
	}
	if err := s.load(ctx, entries); err != nil {
		stagedFallbacks.Add(1)
		return err
	}
	for i := range entries {
		out[i] = s.add(ctx, &entries[i])
		if out[i].Err != nil {
			if pe := (*perr.Error)(nil); !errors.As(out[i].Err, &pe) {
				stagedFallbacks.Add(1)
				return out[i].Err // a read failed (topFlow): not the record's fault
			}
		}
	}
	if err := s.flush(ctx); err != nil {
		stagedFallbacks.Add(1)
		return err
	}
	if err := w.checkRefunds(ctx, recs, out); err != nil {
		stagedFallbacks.Add(1)
		return err
	}
	return nil
}

// load reads what the ledger holds for the group: the events of its keys, the stock of the
// SKUs its sales and restocking refunds move, and which of the flow numbers it names are taken.
func (s *stage) load(ctx context.Context, entries []entry) error {
	var keys []any // terminal, seq, terminal, seq, …
	flows := map[string][]any{}
	var dates []string
	var skus []any
	sku := func(k string) {
		if _, ok := s.stock[k]; !ok {
			s.stock[k] = 0 // no row: quantity 0, as the writer's stockOf reads it
			skus = append(skus, k)
		}
	}
	for i := range entries {
		x := &entries[i]
		if x.err != nil {
			continue
		}
		k := eventKey{x.r.Terminal, x.r.Seq}
		if _, ok := s.keys[k]; !ok {
			s.keys[k] = nil
			keys = append(keys, k.terminal, k.seq)
		}
		if x.perr != nil {
			continue
		}
		switch {
		case x.sale != nil:
			for _, ln := range x.sale.Lines {
				sku(ln.SKU)
			}
		case x.refund != nil && x.refund.Restock:
			for _, ln := range x.refund.Lines {
				sku(ln.SKU)
			}
		}
		if (x.sale != nil || x.refund != nil) && x.r.FlowNo > 0 && !x.r.At.IsZero() {
			d := s.l.BusinessDate(x.r.At)
			if flows[d] == nil {
				dates = append(dates, d)
			}
			flows[d] = append(flows[d], x.r.FlowNo)
		}
	}
	if err := s.query(ctx, selEvents, nil, keys, func(rows *sql.Rows) error {
		var k eventKey
		var st Stored
		if err := rows.Scan(&k.terminal, &k.seq, &st.Kind, &st.Hash, &st.Status, &st.Final, &st.Code, &st.Message,
			&st.FlowNo, &st.BusinessDate, &st.Oversold); err != nil {
			return err
		}
		s.keys[k] = &known{Stored: st, row: -1}
		return nil
	}); err != nil {
		return err
	}
	if err := s.query(ctx, selStock, nil, skus, func(rows *sql.Rows) error {
		var k string
		var qty int64
		if err := rows.Scan(&k, &qty); err != nil {
			return err
		}
		s.stock[k] = qty
		return nil
	}); err != nil {
		return err
	}
	for _, d := range dates {
		if err := s.query(ctx, selFlows, []any{d}, flows[d], func(rows *sql.Rows) error {
			var f int64
			if err := rows.Scan(&f); err != nil {
				return err
			}
			s.flows[flowKey{d, f}] = eventKey{}
			return nil
		}); err != nil {
			return err
		}
	}
	return nil
}

// query runs m over keys (fixed arguments first, then m.width per key) and calls fn for
// every row.
func (s *stage) query(ctx context.Context, m *multi, fixed, keys []any, fn func(*sql.Rows) error) error {
	return m.chunks(len(keys)/m.width, func(query string, from, to int) error {
		from, to = from*m.width, to*m.width
		st, err := s.w.stmt(ctx, query)
		if err != nil {
			return err
		}
		return sqlitedb.EachRow(st.QueryContext(ctx, append(slices.Clip(fixed), keys[from:to]...)...))(fn)
	})
}

// add decides one record as commitOne does, and stages its rows.
func (s *stage) add(ctx context.Context, e *entry) Outcome {
	if e.err != nil {
		return Outcome{Err: e.err}
	}
	prior := s.keys[eventKey{e.r.Terminal, e.r.Seq}]
	if o, done := s.l.settled(s, e, prior, s.nowMs); done {
		return o
	}
	o, err := s.l.decide(ctx, s, e, prior, s.nowMs)
	if err != nil {
		return Outcome{Err: err}
	}
	return o
}

// The stage as the rules' state: the ledger as load read it, changed by the records staged
// before.

func (s *stage) stockOf(_ context.Context, sku string) (int64, error) { return s.stock[sku], nil }

// take stages a change of a SKU's stock.
func (s *stage) take(_ context.Context, sku string, delta int64) (int64, error) {
	if _, ok := s.delta[sku]; !ok {
		s.skus = append(s.skus, sku)
	}
	s.delta[sku] += delta
	s.stock[sku] += delta
	return s.stock[sku], nil
}

// topFlow reads a date's highest flow number in the ledger once, and counts those staged.
func (s *stage) topFlow(ctx context.Context, date string) (int64, error) {
	top, ok := s.maxFlow[date]
	if !ok {
		st, err := s.w.stmt(ctx, selMaxFlow)
		if err != nil {
			return 0, err
		}
		if err := st.QueryRowContext(ctx, date).Scan(&top); err != nil {
			return 0, err
		}
		s.maxFlow[date] = top
	}
	return max(top, s.top[date]), nil
}

// flowTaken knows the ledger's flow numbers that the group's records name (load), and those
// staged. A number topFlow gave is above the ledger's.
func (s *stage) flowTaken(_ context.Context, f flowKey) (bool, error) {
	_, taken := s.flows[f]
	return taken, nil
}

// flowHolder names a record staged under the number, or reads the ledger's event that
// holds it (load found it taken), or looks in the archive of its day.
func (s *stage) flowHolder(ctx context.Context, f flowKey) (string, bool, error) {
	by, taken := s.flows[f]
	switch {
	case taken && by.terminal != "":
		return wire.Key(by.terminal, by.seq), true, nil
	case taken:
		return s.w.flowHolder(ctx, f)
	}
	return s.l.archivedFlow(ctx, s.w.tx, f)
}

func (s *stage) claimFlow(f flowKey, by eventKey) {
	s.flows[f] = by
	s.top[f.date] = max(s.top[f.date], f.flow)
}

func (s *stage) rows() *rowSet { return &s.rs }

func (s *stage) ledger() *Ledger { return s.l }

// record stages the events row, in place of prior: a row staged before is dropped, a row of
// the ledger deleted when the group is written.
func (s *stage) record(_ context.Context, k eventKey, prior *known, st Stored, row []any) error {
	if prior != nil {
		if prior.row >= 0 {
			s.events[prior.row] = nil
		} else {
			s.deletes = append(s.deletes, []any{k.terminal, k.seq})
		}
	}
	s.keys[k] = &known{Stored: st, row: len(s.events)}
	s.events = append(s.events, row)
	return nil
}

// flush writes the staged rows: first the replaced events out, then the rules' rows
// (rowSet.write), the events and the stock last, as Σ deltas per SKU.
func (s *stage) flush(ctx context.Context) error {
	for _, a := range s.deletes {
		if err := s.w.exec(ctx, deleteNonFinal, a...); err != nil {
			return err
		}
	}
	if err := s.rs.write(ctx, s.w); err != nil {
		return err
	}
	var events []any
	for _, e := range s.events {
		events = append(events, e...) // nil: replaced within the group
	}
	if err := s.w.insert(ctx, insEvents, events); err != nil {
		return err
	}
	stock := make([]any, 0, 2*len(s.skus))
	for _, sku := range s.skus {
		stock = append(stock, sku, s.delta[sku])
	}
	return s.w.insert(ctx, upsStock, stock)
}

// The statements only the stage runs.
var (
	// Σ deltas per SKU, as commitOne's one upsert per stock change adds them up.
	upsStock = newInsert("stock", "sku, qty", " ON CONFLICT (sku) DO UPDATE SET qty = qty + excluded.qty")

	selEvents = newMulti(`SELECT terminal, seq, kind, hash, status, final, code, message, coalesce(flow_no, 0),
		business_date, oversold FROM events WHERE (terminal, seq) IN (VALUES `, "(?, ?)", ")")
	selStock = newMulti(`SELECT sku, qty FROM stock WHERE sku IN (`, "?", ")")
	// flow_no IN (…) and flow_no = ? imply flow_no IS NOT NULL: SQLite then seeks in the
	// partial index events_flow (spelled out, the term turned the seeks into a range scan).
	selFlows = newMulti(`SELECT flow_no FROM events WHERE business_date = ? AND flow_no IN (`, "?", ")")
)
