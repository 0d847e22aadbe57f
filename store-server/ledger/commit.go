package ledger

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/mattn/go-sqlite3"
	"github.com/posgate/posgate/internal/perr"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/store"
)

// Record is one event decided by the store, to be committed to the ledger.
type Record struct {
	Terminal string
	Seq      int64
	Kind     wire.Kind
	Hash     string
	At       time.Time
	Offline  bool
	Payload  []byte // raw payload as received
	// Status is AckAccepted, AckRejected or AckConflict (final or not, see Final), or
	// AckRateLimited (always stored non-final).
	Status wire.AckStatus
	// Final is false for a live refusal (out of stock, rate limited): an offline resend of the
	// same key replaces it. An accepted record is always stored final.
	Final   bool
	Code    string
	Message string
	// FlowNo is the store flow number the Redis gate took for an accepted sale or refund;
	// 0 makes the ledger allocate one (degrade mode: the date's highest flow number + 1).
	FlowNo int64
	// Oversold is the gate's verdict that an offline sale took stock below zero. The ledger
	// also judges this itself from its own stock; the outcome is oversold if either says so.
	Oversold bool
	// CheckStock (degrade mode, live sale) refuses the sale (Status AckRejected, Code
	// "out_of_stock", not final) instead of taking any SKU below zero. It is ignored for an
	// offline record: a sale completed offline is never refused (invariant 5).
	CheckStock bool
	// The decoded payload of an accepted event (nil otherwise). If it is nil for an accepted
	// sale, refund or day close, the ledger decodes Payload itself.
	Sale     *wire.SalePayload
	Refund   *wire.RefundPayload
	DayClose *wire.DayClosePayload
	Scan     *wire.ScanPayload
}

// Outcome is what was committed for one record.
type Outcome struct {
	Status       wire.AckStatus
	Code         string
	Message      string
	FlowNo       int64
	BusinessDate string
	Oversold     bool
	// Duplicate reports that the key was already stored final with the same hash: nothing
	// was written and the fields above are the original result (the ack is "duplicate").
	Duplicate bool
	// Err is set when this record could not be stored (a *perr.Error: a flow number clash,
	// an invalid record); nothing of it was written, the other records still commit.
	Err error
}

// Commit stores records in one transaction (group commit), each inside its own savepoint so
// that one bad record does not abort the others, and returns one Outcome per record in order.
//
// For each record: a key stored final is not touched (the same hash returns the stored
// result with Duplicate set; another hash returns AckConflict "idempotency_conflict"); a key
// stored non-final is replaced. An accepted sale writes the sale, its lines and payments, the
// stock decrements with their moves (an oversell row for every SKU taken below zero), its flow
// number and an hq_outbox row; an accepted refund writes the refund, its restock moves if it
// restocks, its flow number and an hq_outbox row; an accepted day close writes the terminal's
// declared totals and an hq_outbox row; an accepted scan or heartbeat only its events row; a
// final rejection or conflict also parks the event. Business dates come from Record.At.
//
// The error is non-nil only when the transaction as a whole failed; then nothing committed.
func (l *Ledger) Commit(ctx context.Context, recs []Record) ([]Outcome, error) {
	out := make([]Outcome, len(recs))
	if len(recs) == 0 {
		return out, nil
	}
	tx, err := l.db.W.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("commit: %w", err)
	}
	w := l.newWriter(tx)
	defer w.finish() // after the rollback below
	defer tx.Rollback()
	nowMs := l.now().UnixMilli()
	for i := range recs {
		r := recs[i] // a copy: checkRecord may fill in its payload
		o, err := l.commitOne(ctx, w, &r, nowMs)
		if err != nil {
			return nil, fmt.Errorf("commit %s: %w", wire.Key(recs[i].Terminal, recs[i].Seq), err)
		}
		out[i] = o
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("commit: %w", err)
	}
	return out, nil
}

// commitOne stores one record inside a savepoint. A *perr.Error from apply rolls the record
// back and becomes its Outcome.Err; any other error fails the whole commit.
func (l *Ledger) commitOne(ctx context.Context, w *writer, r *Record, nowMs int64) (Outcome, error) {
	if err := checkRecord(r); err != nil {
		return Outcome{Err: err}, nil
	}
	prior, found, err := w.lookup(ctx, r.Terminal, r.Seq)
	if err != nil {
		return Outcome{}, err
	}
	if found && prior.Final {
		if prior.Hash != r.Hash {
			return Outcome{Status: wire.AckConflict, Code: CodeIdempotencyConflict,
				Message: fmt.Sprintf("key %s was already used with other content; the original stands",
					wire.Key(r.Terminal, r.Seq))}, nil
		}
		o := prior.outcome()
		o.Duplicate = true
		return o, nil
	}
	if err := w.exec(ctx, `SAVEPOINT record`); err != nil {
		return Outcome{}, err
	}
	o, err := l.apply(ctx, w, r, found, nowMs)
	if err != nil {
		var pe *perr.Error
		if !errors.As(err, &pe) {
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

// checkRecord rejects a record the ledger cannot store as given, and fills in the raw
// payload from the decoded one if the caller left it out.
func checkRecord(r *Record) error {
	invalid := func(format string, args ...any) error {
		return perr.New(perr.Invalid, CodeRecordInvalid, "event %s: "+format,
			append([]any{wire.Key(r.Terminal, r.Seq)}, args...)...)
	}
	switch {
	case r.Terminal == "" || r.Seq <= 0:
		return invalid("a record needs a terminal and a positive seq")
	case r.FlowNo < 0:
		return invalid("flow number %d is negative", r.FlowNo)
	}
	switch r.Status {
	case wire.AckAccepted, wire.AckRejected, wire.AckConflict, wire.AckRateLimited:
	default:
		return invalid("status %q cannot be stored", r.Status)
	}
	if r.Status == wire.AckAccepted && (!r.Kind.Valid() || r.At.IsZero()) {
		return invalid("an accepted event needs a known kind and its time")
	}
	if len(r.Payload) == 0 {
		var v any
		switch {
		case r.Sale != nil:
			v = r.Sale
		case r.Refund != nil:
			v = r.Refund
		case r.DayClose != nil:
			v = r.DayClose
		case r.Scan != nil:
			v = r.Scan
		}
		if v != nil {
			b, err := json.Marshal(v)
			if err != nil {
				return invalid("encode payload: %v", err)
			}
			r.Payload = b
		}
	}
	return nil
}

// decision is what the ledger writes to the events row and answers.
type decision struct {
	status   wire.AckStatus
	final    bool
	code     string
	message  string
	flowNo   int64
	date     string
	at       string
	oversold bool
}

func (d *decision) outcome() Outcome {
	return Outcome{Status: d.status, Code: d.code, Message: d.message, FlowNo: d.flowNo,
		BusinessDate: d.date, Oversold: d.oversold}
}

// apply writes one record; a *perr.Error means the record cannot be stored.
func (l *Ledger) apply(ctx context.Context, w *writer, r *Record, replace bool, nowMs int64) (Outcome, error) {
	if replace {
		if err := w.exec(ctx, `DELETE FROM events WHERE terminal = ? AND seq = ? AND final = 0`, r.Terminal, r.Seq); err != nil {
			return Outcome{}, err
		}
	}
	d := decision{status: r.Status, final: r.Final, code: r.Code, message: r.Message}
	switch r.Status {
	case wire.AckAccepted:
		d.final = true
	case wire.AckRateLimited:
		d.final = false
	}
	if !r.At.IsZero() {
		d.date = l.BusinessDate(r.At)
		d.at = r.At.UTC().Format(timeFormat)
	}
	payload := r.Payload
	if payload == nil {
		payload = []byte{}
	}
	var err error
	if r.Status == wire.AckAccepted {
		switch r.Kind {
		case wire.KindSale:
			err = w.sale(ctx, r, &d)
		case wire.KindRefund:
			err = w.refund(ctx, r, &d)
		case wire.KindDayClose:
			err = w.dayClose(ctx, r, &d)
		case wire.KindScan, wire.KindHeartbeat:
		}
	} else if d.final {
		err = w.exec(ctx, `INSERT INTO parked (terminal, seq, kind, code, message, payload, at, parked_ms)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (terminal, seq) DO UPDATE SET kind = excluded.kind, code = excluded.code,
				message = excluded.message, payload = excluded.payload, at = excluded.at, parked_ms = excluded.parked_ms`,
			r.Terminal, r.Seq, string(r.Kind), d.code, d.message, payload, d.at, nowMs)
	}
	if err != nil {
		return Outcome{}, constraint(err)
	}
	err = w.exec(ctx, `INSERT INTO events (terminal, seq, kind, hash, at, business_date, offline, status, final,
		code, message, flow_no, oversold, received_ms, payload) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		r.Terminal, r.Seq, string(r.Kind), r.Hash, d.at, d.date, r.Offline, string(d.status), d.final,
		d.code, d.message, sql.NullInt64{Int64: d.flowNo, Valid: d.flowNo > 0}, d.oversold, nowMs, payload)
	if err != nil {
		return Outcome{}, constraint(err)
	}
	return d.outcome(), nil
}

// constraint turns a SQLite constraint violation into a per-record error; other errors pass.
func constraint(err error) error {
	var pe *perr.Error
	if errors.As(err, &pe) {
		return err
	}
	var se sqlite3.Error
	if errors.As(err, &se) && se.Code == sqlite3.ErrConstraint {
		return perr.Wrap(err, perr.Conflict, CodeConstraint, "the record breaks a ledger constraint")
	}
	return err
}

// payloadOf returns the decoded payload the caller gave, or decodes raw, and validates it.
func payloadOf[T any, P interface {
	*T
	wire.Payload
}](given P, r *Record) (P, error) {
	p := given
	if p == nil {
		p = new(T)
		if err := json.Unmarshal(r.Payload, p); err != nil {
			return nil, perr.Wrap(err, perr.Invalid, CodeRecordInvalid, "event %s: the %s payload cannot be read",
				wire.Key(r.Terminal, r.Seq), r.Kind)
		}
	}
	if err := p.Validate(); err != nil {
		return nil, perr.Wrap(err, perr.Invalid, CodeRecordInvalid, "event %s: %s", wire.Key(r.Terminal, r.Seq),
			perr.As(err).Message)
	}
	return p, nil
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
	ref := wire.Key(r.Terminal, r.Seq)
	for _, ln := range need {
		after, err := w.move(ctx, ln.SKU, -ln.Qty, ReasonSale, ref, d.at)
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
		if err := w.exec(ctx, `INSERT INTO payments (terminal, seq, n, method, amount, reference)
			VALUES (?, ?, ?, ?, ?, ?)`, r.Terminal, r.Seq, i+1, pm.Method, int64(pm.Amount), pm.Reference); err != nil {
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
		if err := w.scan(ctx, `SELECT coalesce(max(flow_no), 0) + 1 FROM flow_numbers WHERE business_date = ?`,
			[]any{d.date}, &flow); err != nil {
			return err
		}
	}
	err := w.exec(ctx, `INSERT INTO flow_numbers (business_date, flow_no, terminal, seq, kind) VALUES (?, ?, ?, ?, ?)`,
		d.date, flow, r.Terminal, r.Seq, string(r.Kind))
	var se sqlite3.Error
	if errors.As(err, &se) && se.Code == sqlite3.ErrConstraint {
		return perr.Wrap(err, perr.Conflict, CodeFlowClash, "flow number %d of %s is already taken", flow, d.date)
	}
	if err != nil {
		return err
	}
	d.flowNo = flow
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
	if err := w.exec(ctx, `INSERT INTO day_closes (terminal, business_date, seq, payload) VALUES (?, ?, ?, ?)
		ON CONFLICT (terminal, business_date) DO UPDATE SET seq = excluded.seq, payload = excluded.payload
		WHERE excluded.seq > day_closes.seq`, r.Terminal, p.BusinessDate, r.Seq, r.Payload); err != nil {
		return err
	}
	return w.outbox(ctx, r, d, p.BusinessDate)
}

// outbox queues an accepted event for headquarters.
func (w *writer) outbox(ctx context.Context, r *Record, d *decision, date string) error {
	return w.exec(ctx, `INSERT INTO hq_outbox (kind, terminal, seq, business_date, flow_no, at, hash, payload)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, string(r.Kind), r.Terminal, r.Seq, date,
		sql.NullInt64{Int64: d.flowNo, Valid: d.flowNo > 0}, d.at, r.Hash, r.Payload)
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

func (w *writer) lookup(ctx context.Context, terminal string, seq int64) (Stored, bool, error) {
	s, err := w.stmt(ctx, lookupQuery)
	if err != nil {
		return Stored{}, false, err
	}
	return scanStored(s.QueryRowContext(ctx, terminal, seq))
}

// move changes a SKU's stock by delta with its stock move, and returns the new quantity.
func (w *writer) move(ctx context.Context, sku string, delta int64, reason, ref, at string) (int64, error) {
	var qty int64
	if err := w.scan(ctx, `INSERT INTO stock (sku, qty) VALUES (?, ?)
		ON CONFLICT (sku) DO UPDATE SET qty = qty + excluded.qty RETURNING qty`, []any{sku, delta}, &qty); err != nil {
		return 0, err
	}
	err := w.exec(ctx, `INSERT INTO stock_moves (sku, delta, reason, ref, at) VALUES (?, ?, ?, ?, ?)`,
		sku, delta, reason, ref, at)
	return qty, err
}
