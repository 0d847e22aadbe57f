package ledger

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/posgate/posgate/internal/perr"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/store"
)

// The business rules of an accepted record, written once for both ways of committing
// (decide calls them): against state, which the writer implements on the write transaction
// one statement at a time (commitEach) and the stage in memory for a whole group
// (commitStaged). A rule reads and changes stock and flow numbers through state and puts the
// rows it writes in state's rowSet. Whatever refuses the record (an unreadable payload, a
// flow number taken) comes before anything of it is changed or put.

// state is what the rules read and write of the ledger.
type state interface {
	// stockOf returns a SKU's quantity in stock (0 if the ledger has no row for it).
	stockOf(ctx context.Context, sku string) (int64, error)
	// take changes a SKU's stock by delta and returns its quantity after.
	take(ctx context.Context, sku string, delta int64) (int64, error)
	// topFlow returns a business date's highest flow number taken (0 if none).
	topFlow(ctx context.Context, date string) (int64, error)
	// flowTaken reports whether a flow number is taken; claimFlow takes it for the record
	// of key by.
	flowTaken(ctx context.Context, f flowKey) (bool, error)
	// flowHolder returns the event (terminal:seq) that holds a flow number and whether one
	// does: in the ledger, or in the archive of its day (Ledger.archivedFlow).
	flowHolder(ctx context.Context, f flowKey) (string, bool, error)
	// ledger returns the ledger the state is of.
	ledger() *Ledger
	claimFlow(f flowKey, by eventKey)
	// rows returns where the rules put the rows they write.
	rows() *rowSet
	// record ends the record decided under k: st is what k holds now, row its events row
	// (of insEvents), which replaces prior, a non-final record, if prior is not nil.
	record(ctx context.Context, k eventKey, prior *known, st Stored, row []any) error
}

// rowSet holds the rows the rules write until they are written (write): the rows of each
// multi-row INSERT, flattened, and the statements run on their own, in the order put.
type rowSet struct {
	by      map[*multi][]any
	singles []single
}

// single is one statement run on its own.
type single struct {
	query string
	args  []any
}

// add puts one row of m.
func (rs *rowSet) add(m *multi, args ...any) { rs.by[m] = append(rs.by[m], args...) }

// one puts a statement run on its own.
func (rs *rowSet) one(query string, args ...any) {
	rs.singles = append(rs.singles, single{query, args})
}

// write writes the rows through w and empties rs: each table's rows in the order put (so
// AUTOINCREMENT ids follow the records, as hq_outbox's order must), then the statements run
// on their own, then hq_outbox.
func (rs *rowSet) write(ctx context.Context, w *writer) error {
	for _, m := range []*multi{insMoves, insOversells, insPriceExceptions, insSales, insSaleLines, insPayments,
		insRefunds, insRefundLines} {
		if err := w.insert(ctx, m, rs.by[m]); err != nil {
			return err
		}
	}
	for _, x := range rs.singles {
		if err := w.exec(ctx, x.query, x.args...); err != nil {
			return err
		}
	}
	if err := w.insert(ctx, insOutbox, rs.by[insOutbox]); err != nil {
		return err
	}
	rs.reset()
	return nil
}

// reset empties rs, keeping its memory for the next rows.
func (rs *rowSet) reset() {
	for m, rows := range rs.by {
		rs.by[m] = rows[:0]
	}
	rs.singles = rs.singles[:0]
}

// sale applies an accepted sale: with CheckStock (a live sale), an out-of-stock refusal if
// the stock does not cover each SKU; else its flow number, its lines as its stock movement
// (an oversell row for every SKU taken below zero), its sales, sale_lines and payments rows
// and its hq_outbox row.
func sale(ctx context.Context, st state, e *entry, d *decision) error {
	if e.perr != nil {
		return e.perr
	}
	r, p := &e.r, e.sale
	need := sumBySKU(len(p.Lines), func(i int) (string, int64) { return p.Lines[i].SKU, p.Lines[i].Qty })
	if r.CheckStock && !r.Offline {
		for _, ln := range need {
			have, err := st.stockOf(ctx, ln.SKU)
			if err != nil {
				return err
			}
			if have < ln.Qty {
				d.status, d.final, d.code = wire.AckRejected, false, CodeOutOfStock
				d.message = fmt.Sprintf("sku %q: %d in stock, the sale needs %d", ln.SKU, have, ln.Qty)
				return nil
			}
		}
	}
	if err := takeFlow(ctx, st, r, d); err != nil {
		return err
	}
	rs := st.rows()
	for _, ln := range need { // the sale's lines are its stock movement (view stock_flow)
		after, err := st.take(ctx, ln.SKU, -ln.Qty)
		if err != nil {
			return err
		}
		if after < 0 {
			d.oversold = true
			rs.add(insOversells, r.Terminal, r.Seq, ln.SKU, min(ln.Qty, -after), d.at, d.date)
		}
	}
	d.oversold = d.oversold || r.Oversold
	priceRows(rs, r, d)
	rs.add(insSales, r.Terminal, r.Seq, p.SaleID, d.at, d.date, d.flowNo, int64(p.Total), int64(p.Change),
		r.Offline, d.oversold)
	for i, ln := range p.Lines {
		rs.add(insSaleLines, r.Terminal, r.Seq, i+1, ln.Line, ln.SKU, ln.Name, ln.Qty, int64(ln.UnitPrice),
			int64(ln.Amount))
	}
	for i, pm := range p.Payments {
		rs.add(insPayments, d.date, d.flowNo, i+1, r.Terminal, r.Seq, pm.Method, int64(pm.Amount), pm.Reference)
	}
	outbox(rs, r, d, d.date)
	return nil
}

// refund applies an accepted refund: its flow number, its refunds and refund_lines rows,
// if it restocks a stock move back per SKU, and its hq_outbox row. Whether the ledger's
// records cover it is checked once the group is written (checkRefunds).
func refund(ctx context.Context, st state, e *entry, d *decision) error {
	if e.perr != nil {
		return e.perr
	}
	r, p := &e.r, e.refund
	if err := takeFlow(ctx, st, r, d); err != nil {
		return err
	}
	rs := st.rows()
	rs.add(insRefunds, r.Terminal, r.Seq, p.RefundID, p.SaleID, p.SaleSeq, d.at, d.date, d.flowNo,
		int64(p.Amount), p.Method, p.Reference, p.Restock)
	for i, ln := range p.Lines {
		rs.add(insRefundLines, r.Terminal, r.Seq, i+1, ln.Line, ln.SKU, ln.Qty, int64(ln.Amount))
	}
	if p.Restock {
		ref := wire.Key(r.Terminal, r.Seq)
		back := sumBySKU(len(p.Lines), func(i int) (string, int64) { return p.Lines[i].SKU, p.Lines[i].Qty })
		for _, ln := range back {
			rs.add(insMoves, ln.SKU, ln.Qty, ReasonRefund, ref, d.at)
			if _, err := st.take(ctx, ln.SKU, ln.Qty); err != nil {
				return err
			}
		}
	}
	outbox(rs, r, d, d.date)
	return nil
}

// dayClose applies an accepted day close: the terminal's declared totals for the day its
// payload names (a later seq of the same day replaces them), and its hq_outbox row.
func dayClose(st state, e *entry, d *decision) error {
	if e.perr != nil {
		return e.perr
	}
	r, p := &e.r, e.dayClose
	rs := st.rows()
	rs.one(upsertDayClose, r.Terminal, p.BusinessDate, r.Seq, r.Payload)
	outbox(rs, r, d, p.BusinessDate)
	return nil
}

// takeFlow gives the record its flow number on its business date: the one it brings, or the
// date's highest + 1 when it brings none (degrade mode) or when the date's keys left Redis
// (redis_days: the gate's counter for it is gone or short; the record's day is touched). A
// number taken already refuses the record, except a replay's (Record.Replayed), which takes
// the date's highest + 1 instead and is recorded as a flow exception (flowException) naming
// the event that holds the number, in the ledger or in the archive of its day.
func takeFlow(ctx context.Context, st state, r *Record, d *decision) error {
	flow, given, heldBy := r.FlowNo, int64(0), ""
	if flow != 0 && !r.Replayed && st.ledger().redisExpired(d.date) {
		flow = 0
		st.rows().one(touchRedisDay, d.date)
	}
	if flow != 0 && r.Replayed {
		var taken bool
		var err error
		if heldBy, taken, err = st.flowHolder(ctx, flowKey{d.date, flow}); err != nil {
			return err
		}
		if taken { // given again since the ledger lost it: the replay takes a new one
			flow, given = 0, r.FlowNo
		}
	}
	if flow == 0 {
		top, err := st.topFlow(ctx, d.date)
		if err != nil {
			return err
		}
		flow = top + 1
	}
	f := flowKey{d.date, flow}
	taken, err := st.flowTaken(ctx, f)
	if err != nil {
		return err
	}
	if taken {
		return perr.New(perr.Conflict, CodeFlowClash, "flow number %d of %s is already taken", flow, d.date)
	}
	st.claimFlow(f, eventKey{r.Terminal, r.Seq})
	d.flowNo = flow
	if given != 0 {
		flowException(st, r, d, given, flow, heldBy)
	}
	return nil
}

// outbox queues an accepted event for headquarters under date.
func outbox(rs *rowSet, r *Record, d *decision, date string) {
	rs.add(insOutbox, string(r.Kind), r.Terminal, r.Seq, date, sql.NullInt64{Int64: d.flowNo, Valid: d.flowNo > 0})
}

// sumBySKU adds up quantities per SKU, in the order the SKUs first appear.
func sumBySKU(n int, line func(i int) (string, int64)) []store.Line {
	out := make([]store.Line, 0, n)
	at := make(map[string]int, n)
	for i := 0; i < n; i++ {
		sku, qty := line(i)
		if j, ok := at[sku]; ok {
			out[j].Qty += qty
			continue
		}
		at[sku] = len(out)
		out = append(out, store.Line{SKU: sku, Qty: qty})
	}
	return out
}

// The rows the rules write: multi-row INSERTs, and statements run one row at a time (rare
// rows: replaced live refusals, parked events, day closes).
var (
	insEvents = newInsert("events", `terminal, seq, kind, hash, at, business_date, offline, status, final,
		code, message, flow_no, oversold, received_ms, payload`, "")
	insSales       = newInsert("sales", "terminal, seq, sale_id, at, business_date, flow_no, total, change, offline, oversold", "")
	insSaleLines   = newInsert("sale_lines", "terminal, seq, n, line, sku, name, qty, unit_price, amount", "")
	insPayments    = newInsert("payments", "business_date, flow_no, n, terminal, seq, method, amount, reference", "")
	insRefunds     = newInsert("refunds", "terminal, seq, refund_id, sale_id, sale_seq, at, business_date, flow_no, amount, method, reference, restock", "")
	insRefundLines = newInsert("refund_lines", "terminal, seq, n, line, sku, qty, amount", "")
	insMoves       = newInsert("stock_moves", "sku, delta, reason, ref, at", "")
	insOversells   = newInsert("oversells", "terminal, seq, sku, qty_short, at, business_date", "")
	insOutbox      = newInsert("hq_outbox", "kind, terminal, seq, business_date, flow_no", "")
)

const (
	deleteNonFinal = `DELETE FROM events WHERE terminal = ? AND seq = ? AND final = 0`
	// insParked parks a content under its key, once per hash (the arguments: terminal, seq,
	// hash, kind, code, message, payload, at, parked_ms, business_date). Its sku, its
	// identity at HQ, is '' for the first content parked under the key and its hash for
	// each later one. A first content restored from HQ (a refilled ledger: hash '', its
	// detail HQ's, schema/store/007_restored_exceptions.sql) is not counted: the content
	// parked now is the till's replay of it, and takes its row (adoptParked).
	insParked = `INSERT INTO parked (terminal, seq, hash, sku, kind, code, message, payload, at, parked_ms,
		business_date) VALUES (?1, ?2, ?3,
		CASE WHEN EXISTS (SELECT 1 FROM parked WHERE terminal = ?1 AND seq = ?2 AND sku = ''
			AND NOT (hash = '' AND hq_detail <> '')) THEN ?3 ELSE '' END,
		?4, ?5, ?6, ?7, ?8, ?9, ?10)`
	// adoptParked gives a parked row the content parked now: its hash, verdict and payload,
	// HQ's detail dropped (the row's resolution is kept).
	adoptParked = ` DO UPDATE SET hash = excluded.hash, kind = excluded.kind, code = excluded.code,
		message = excluded.message, payload = excluded.payload, at = excluded.at, parked_ms = excluded.parked_ms,
		business_date = excluded.business_date, hq_detail = ''`
	// restoredFirst adopts the first content restored from HQ under the key: the content
	// parked now, which insParked gave its sku ''.
	restoredFirst = ` ON CONFLICT (terminal, seq, sku)` + adoptParked + ` WHERE parked.hash = '' AND parked.hq_detail <> ''`
	// upsertParked parks a final rejection; the same content parked again takes its new
	// verdict.
	upsertParked = insParked + ` ON CONFLICT (terminal, seq, hash)` + adoptParked + restoredFirst
	// parkConflict parks a conflict's content unless that content is parked already:
	// redelivered, it changes nothing (no exception change for HQ), unless it was restored
	// from HQ without its payload. Each other content of the key is parked beside the ones
	// before (a key parked as a rejection keeps it too): the till kept every one.
	parkConflict = insParked + ` ON CONFLICT (terminal, seq, hash)` + adoptParked + ` WHERE parked.hq_detail <> ''` +
		restoredFirst
	upsertDayClose = `INSERT INTO day_closes (terminal, business_date, seq, payload) VALUES (?, ?, ?, ?)
		ON CONFLICT (terminal, business_date) DO UPDATE SET seq = excluded.seq, payload = excluded.payload
		WHERE excluded.seq > day_closes.seq`
)

// selMaxFlow reads a business date's highest flow number, of the ledger or of its archive;
// selFlowTaken whether one is taken; touchRedisDay counts an event of a day whose keys left
// Redis.
const (
	selMaxFlow = `SELECT max(coalesce((SELECT max(flow_no) FROM events WHERE business_date = ?1 AND flow_no IS NOT NULL), 0),
		coalesce((SELECT max_flow FROM archived_days WHERE business_date = ?1), 0))`
	touchRedisDay = `UPDATE redis_days SET touched = touched + 1 WHERE business_date = ?`
	selFlowTaken  = `SELECT count(*) FROM events WHERE business_date = ? AND flow_no = ?`
	selFlowHolder = `SELECT terminal || ':' || seq FROM events WHERE business_date = ? AND flow_no = ?`
)
