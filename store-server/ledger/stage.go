package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/posgate/posgate/internal/perr"
	"github.com/posgate/posgate/internal/sqlitedb"
	"github.com/posgate/posgate/internal/wire"
)

// The staged group commit (Commit's fast path). It reads what the group needs to know from the
// ledger with a few multi-key queries (the events of its keys, the stock of its SKUs, the flow
// numbers it names), decides every record in order in memory exactly as commitOne would
// against the database, and writes the rows table by table, in record order, with multi-row
// statements. Whatever commitOne answers from a statement that fails (a flow number taken, an
// unreadable payload) the staging answers before it writes anything of the record; any other
// failure makes Commit start over with commitEach.

// stagedFallbacks counts staged commits that had to start over record by record (for tests).
var stagedFallbacks atomic.Int64

// eventKey is an idempotency key.
type eventKey struct {
	terminal string
	seq      int64
}

// flowKey is a flow number of a business date.
type flowKey struct {
	date string
	flow int64
}

// known is what the ledger holds for a key, as the staging sees it.
type known struct {
	Stored
	row int // index of its staged events row, or -1 when it is in the ledger already
}

// staged is one record on its way through the staged commit.
type staged struct {
	r        Record // a copy: checkRecord may fill in its payload
	err      error  // from checkRecord
	sale     *wire.SalePayload
	refund   *wire.RefundPayload
	dayClose *wire.DayClosePayload
	perr     error // from decoding and validating the payload (payloadOf)
}

// stage is a group commit decided in memory.
type stage struct {
	l     *Ledger
	w     *writer
	nowMs int64

	keys    map[eventKey]*known // the group's keys: the ledger's row, then each staged record's
	stock   map[string]int64    // the group's SKUs: quantity in the ledger, then after each move
	skus    []string            // SKUs moved, in the order first moved
	delta   map[string]int64    // SKU → Σ staged moves
	flows   map[flowKey]bool    // flow numbers taken: those of the group's in the ledger, and staged
	maxFlow map[string]int64    // business date → highest flow number in the ledger (when asked)
	topFlow map[string]int64    // business date → highest flow number staged

	events  [][]any // rows of insEvents; nil when replaced within the group
	deletes [][]any // non-final events of the ledger replaced by the group
	singles []single
	rows    map[*multi][]any // rows of the multi-row INSERTs, flattened
}

// single is one statement run on its own.
type single struct {
	query string
	args  []any
}

// commitStaged decides recs in memory, writes them, flags the refunds the ledger does not
// cover (checkRefunds, as commitEach does), and fills in out. An error means nothing
// it wrote may be kept (the caller rolls back) and the group must be stored record by record.
func (l *Ledger) commitStaged(ctx context.Context, w *writer, recs []Record, out []Outcome, nowMs int64) error {
	s := &stage{l: l, w: w, nowMs: nowMs, keys: map[eventKey]*known{}, stock: map[string]int64{},
		delta: map[string]int64{}, flows: map[flowKey]bool{}, maxFlow: map[string]int64{},
		topFlow: map[string]int64{}, rows: map[*multi][]any{}}
	items := make([]staged, len(recs))
	for i := range recs {
		x := &items[i]
		x.r = recs[i]
		if x.err = checkRecord(&x.r); x.err == nil && x.r.Status == wire.AckAccepted {
			switch x.r.Kind {
			case wire.KindSale:
				x.sale, x.perr = payloadOf(x.r.Sale, &x.r)
			case wire.KindRefund:
				x.refund, x.perr = payloadOf(x.r.Refund, &x.r)
			case wire.KindDayClose:
				x.dayClose, x.perr = payloadOf(x.r.DayClose, &x.r)
			}
		}
	}
	if err := s.load(ctx, items); err != nil {
		stagedFallbacks.Add(1)
		return err
	}
	for i := range items {
		out[i] = s.add(ctx, &items[i])
		if out[i].Err != nil {
			if pe := (*perr.Error)(nil); !errors.As(out[i].Err, &pe) {
				stagedFallbacks.Add(1)
				return out[i].Err // a read failed (maxFlow): not the record's fault
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
func (s *stage) load(ctx context.Context, items []staged) error {
	var keys []any // terminal, seq, terminal, seq, …
	flows := map[string][]any{}
	var dates []string
	var skus []any
	sku := func(k string) {
		if _, ok := s.stock[k]; !ok {
			s.stock[k] = 0 // no row: quantity 0, as commitOne's shortage reads it
			skus = append(skus, k)
		}
	}
	for i := range items {
		x := &items[i]
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
			s.flows[flowKey{d, f}] = true
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
func (s *stage) add(ctx context.Context, x *staged) Outcome {
	if x.err != nil {
		return Outcome{Err: x.err}
	}
	r := &x.r
	k := eventKey{r.Terminal, r.Seq}
	prior := s.keys[k]
	if prior != nil && prior.Final {
		if prior.Hash != r.Hash {
			o, args := s.l.conflict(r, s.nowMs)
			s.singles = append(s.singles, single{parkConflict, args})
			return o
		}
		o := prior.outcome()
		o.Duplicate = true
		return o
	}
	if r.OtherContent {
		return Outcome{Undecided: true}
	}
	d := decision{status: r.Status, final: r.Final, code: r.Code, message: r.Message}
	switch r.Status {
	case wire.AckAccepted:
		d.final = true
	case wire.AckRateLimited:
		d.final = false
	}
	if !r.At.IsZero() {
		d.date = s.l.BusinessDate(r.At)
		d.at = r.At.UTC().Format(timeFormat)
	}
	payload := r.Payload
	if payload == nil {
		payload = []byte{}
	}
	if r.Status == wire.AckAccepted {
		var err error
		switch r.Kind {
		case wire.KindSale:
			err = s.sale(ctx, x, &d)
		case wire.KindRefund:
			err = s.refund(ctx, x, &d)
		case wire.KindDayClose:
			err = s.dayCloseOf(x, &d)
		}
		if err != nil {
			return Outcome{Err: err}
		}
	} else if d.final {
		s.singles = append(s.singles, single{upsertParked,
			[]any{r.Terminal, r.Seq, r.Hash, string(r.Kind), d.code, d.message, payload, d.at, s.nowMs,
				s.l.parkedDate(r.At, s.nowMs)}})
	}
	// Written: replace what the key held (a non-final record), as commitOne's DELETE does.
	if prior != nil {
		if prior.row >= 0 {
			s.events[prior.row] = nil
		} else {
			s.deletes = append(s.deletes, []any{r.Terminal, r.Seq})
		}
	}
	s.keys[k] = &known{row: len(s.events), Stored: Stored{Kind: r.Kind, Hash: r.Hash, Status: d.status,
		Final: d.final, Code: d.code, Message: d.message, FlowNo: d.flowNo, BusinessDate: d.date, Oversold: d.oversold}}
	s.events = append(s.events, []any{r.Terminal, r.Seq, string(r.Kind), r.Hash, d.at, d.date, r.Offline,
		string(d.status), d.final, d.code, d.message, sql.NullInt64{Int64: d.flowNo, Valid: d.flowNo > 0},
		d.oversold, s.nowMs, payload})
	return d.outcome()
}

// sale stages an accepted sale as writer.sale writes it. Everything that can refuse the
// record comes before anything is staged.
func (s *stage) sale(ctx context.Context, x *staged, d *decision) error {
	if x.perr != nil {
		return x.perr
	}
	r, p := &x.r, x.sale
	need := sumBySKU(len(p.Lines), func(i int) (string, int64) { return p.Lines[i].SKU, p.Lines[i].Qty })
	if r.CheckStock && !r.Offline {
		for _, ln := range need {
			if have := s.stock[ln.SKU]; have < ln.Qty {
				d.status, d.final, d.code = wire.AckRejected, false, CodeOutOfStock
				d.message = fmt.Sprintf("sku %q: %d in stock, the sale needs %d", ln.SKU, have, ln.Qty)
				return nil
			}
		}
	}
	if err := s.takeFlow(ctx, r, d); err != nil {
		return err
	}
	for _, ln := range need { // the sale's lines are its stock movement (view stock_flow)
		if after := s.take(ln.SKU, -ln.Qty); after < 0 {
			d.oversold = true
			s.add1(insOversells, r.Terminal, r.Seq, ln.SKU, min(ln.Qty, -after), d.at, d.date)
		}
	}
	d.oversold = d.oversold || r.Oversold
	s.add1(insSales, r.Terminal, r.Seq, p.SaleID, d.at, d.date, d.flowNo, int64(p.Total), int64(p.Change),
		r.Offline, d.oversold)
	for i, ln := range p.Lines {
		s.add1(insSaleLines, r.Terminal, r.Seq, i+1, ln.Line, ln.SKU, ln.Name, ln.Qty, int64(ln.UnitPrice),
			int64(ln.Amount))
	}
	for i, pm := range p.Payments {
		s.add1(insPayments, d.date, d.flowNo, i+1, r.Terminal, r.Seq, pm.Method, int64(pm.Amount), pm.Reference)
	}
	s.outbox(r, d, d.date)
	return nil
}

// refund stages an accepted refund as writer.refund writes it.
func (s *stage) refund(ctx context.Context, x *staged, d *decision) error {
	if x.perr != nil {
		return x.perr
	}
	r, p := &x.r, x.refund
	if err := s.takeFlow(ctx, r, d); err != nil {
		return err
	}
	s.add1(insRefunds, r.Terminal, r.Seq, p.RefundID, p.SaleID, p.SaleSeq, d.at, d.date, d.flowNo,
		int64(p.Amount), p.Method, p.Reference, p.Restock)
	for i, ln := range p.Lines {
		s.add1(insRefundLines, r.Terminal, r.Seq, i+1, ln.Line, ln.SKU, ln.Qty, int64(ln.Amount))
	}
	if p.Restock {
		ref := wire.Key(r.Terminal, r.Seq)
		back := sumBySKU(len(p.Lines), func(i int) (string, int64) { return p.Lines[i].SKU, p.Lines[i].Qty })
		for _, ln := range back {
			s.move(ln.SKU, ln.Qty, ReasonRefund, ref, d.at)
		}
	}
	s.outbox(r, d, d.date)
	return nil
}

// dayCloseOf stages an accepted day close as writer.dayClose writes it.
func (s *stage) dayCloseOf(x *staged, d *decision) error {
	if x.perr != nil {
		return x.perr
	}
	r, p := &x.r, x.dayClose
	s.singles = append(s.singles, single{upsertDayClose, []any{r.Terminal, p.BusinessDate, r.Seq, r.Payload}})
	s.outbox(r, d, p.BusinessDate)
	return nil
}

// takeFlow takes the record's flow number (the date's highest + 1 when it brings none), or
// refuses the record as writer.takeFlow does when the number is taken.
func (s *stage) takeFlow(ctx context.Context, r *Record, d *decision) error {
	flow := r.FlowNo
	if flow == 0 {
		top, ok := s.maxFlow[d.date]
		if !ok {
			st, err := s.w.stmt(ctx, selMaxFlow)
			if err != nil {
				return err
			}
			if err := st.QueryRowContext(ctx, d.date).Scan(&top); err != nil {
				return err
			}
			s.maxFlow[d.date] = top
		}
		flow = max(top, s.topFlow[d.date]) + 1
	}
	k := flowKey{d.date, flow}
	if s.flows[k] {
		return perr.New(perr.Conflict, CodeFlowClash, "flow number %d of %s is already taken", flow, d.date)
	}
	s.flows[k] = true
	s.topFlow[d.date] = max(s.topFlow[d.date], flow)
	d.flowNo = flow
	return nil
}

// take stages a change of a SKU's stock and returns the SKU's quantity after it.
func (s *stage) take(sku string, delta int64) int64 {
	if _, ok := s.delta[sku]; !ok {
		s.skus = append(s.skus, sku)
	}
	s.delta[sku] += delta
	s.stock[sku] += delta
	return s.stock[sku]
}

// move stages a stock move (not a sale's) and returns the SKU's quantity after it.
func (s *stage) move(sku string, delta int64, reason, ref, at string) int64 {
	s.add1(insMoves, sku, delta, reason, ref, at)
	return s.take(sku, delta)
}

// outbox stages the record's hq_outbox row.
func (s *stage) outbox(r *Record, d *decision, date string) {
	s.add1(insOutbox, string(r.Kind), r.Terminal, r.Seq, date, sql.NullInt64{Int64: d.flowNo, Valid: d.flowNo > 0})
}

// add1 stages one row of m.
func (s *stage) add1(m *multi, args ...any) { s.rows[m] = append(s.rows[m], args...) }

// flush writes the staged rows: first the replaced events out, then each table in record
// order (so AUTOINCREMENT ids follow the records, as hq_outbox's order must), the stock last.
func (s *stage) flush(ctx context.Context) error {
	for _, a := range s.deletes {
		if err := s.w.exec(ctx, deleteNonFinal, a...); err != nil {
			return err
		}
	}
	for _, m := range []*multi{insMoves, insOversells, insSales, insSaleLines, insPayments,
		insRefunds, insRefundLines} {
		if err := s.insert(ctx, m, s.rows[m]); err != nil {
			return err
		}
	}
	for _, x := range s.singles {
		if err := s.w.exec(ctx, x.query, x.args...); err != nil {
			return err
		}
	}
	if err := s.insert(ctx, insOutbox, s.rows[insOutbox]); err != nil {
		return err
	}
	var events []any
	for _, e := range s.events {
		events = append(events, e...) // nil: replaced within the group
	}
	if err := s.insert(ctx, insEvents, events); err != nil {
		return err
	}
	stock := make([]any, 0, 2*len(s.skus))
	for _, sku := range s.skus {
		stock = append(stock, sku, s.delta[sku])
	}
	return s.insert(ctx, upsStock, stock)
}

// insert writes the flattened rows of m.
func (s *stage) insert(ctx context.Context, m *multi, rows []any) error {
	return m.chunks(len(rows)/m.width, func(query string, from, to int) error {
		return s.w.exec(ctx, query, rows[from*m.width:to*m.width]...)
	})
}
