package ledger

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mattn/go-sqlite3"
	"github.com/posgate/posgate/internal/perr"
	"github.com/posgate/posgate/internal/sqlitedb"
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
	// OtherContent marks a conflict record (Status AckConflict, Final) of other content for
	// a key whose first content the ledger holds or an earlier record of the same Commit
	// carries: it is parked as a conflict behind the key's final record, never recorded
	// under the key. If the key holds no final record when its turn comes (the first
	// content was refused live, or not stored), nothing of it is written and its Outcome is
	// Undecided.
	OtherContent bool
	// Gap, if not nil, is the gap in the terminal's seq order this record's event jumped
	// (its From..To, the events before it the ledger does not hold): stored in seq_gaps in
	// the record's transaction when the record is written (not for a Duplicate, Undecided
	// or Err outcome), once per (terminal, From).
	Gap *SeqGap
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
	// Undecided reports that an OtherContent record found no final record under its key:
	// nothing was written; the event is to be decided as the key's own.
	Undecided bool
	// GapRecorded reports that the record's Gap was stored by this commit.
	GapRecorded bool
	// Err is set when this record could not be stored (a *perr.Error: a flow number clash,
	// an invalid record); nothing of it was written, the other records still commit.
	Err error
}

// Commit stores records in one transaction (group commit), as if each were stored inside its
// own savepoint so that one bad record does not abort the others, and returns one Outcome per
// record in order.
//
// For each record: a key stored final is not touched (the same hash returns the stored
// result with Duplicate set; another hash returns AckConflict "idempotency_conflict"); a key
// stored non-final is replaced (but an OtherContent record only ever parks: behind a key
// not stored final it is Undecided). An accepted sale writes the sale, its lines (which are its
// stock movement) and payments, the stock decrements (an oversell row for every SKU taken
// below zero), its flow number and an hq_outbox row; an accepted refund writes the refund, its restock moves if it
// restocks, its flow number and an hq_outbox row; an accepted day close writes the terminal's
// declared totals and an hq_outbox row; an accepted scan or heartbeat only its events row; a
// final rejection or conflict also parks the event. Business dates come from Record.At.
//
// Once the group's rows are written, each refund it accepted is held to the sale it names
// and that sale's earlier refunds; one the ledger's records do not cover gets a refund
// exception row (Ledger.RefundExceptions). Its outcome stays accepted: the gate has applied
// it already, and an offline refund has paid the money out.
//
// The group is first decided in memory against what the ledger holds (read with a few
// multi-key queries) and written table by table with multi-row statements: a dozen
// statements per 64 records instead of about 16 per sale. If SQLite refuses any of those writes (a
// constraint the staging did not foresee, an I/O error), that transaction is rolled back and
// the group is stored again record by record, each in its own savepoint, which tells a bad
// record (Outcome.Err) from a failed commit.
//
// The error is non-nil only when the transaction as a whole failed; then nothing committed.
func (l *Ledger) Commit(ctx context.Context, recs []Record) ([]Outcome, error) {
	out := make([]Outcome, len(recs))
	if len(recs) == 0 {
		return out, nil
	}
	nowMs := l.now().UnixMilli()
	if stagedCommit {
		staged, err := l.transact(ctx, func(w *writer) error {
			if err := l.commitStaged(ctx, w, recs, out, nowMs); err != nil {
				return err
			}
			return w.gaps(ctx, recs, out, nowMs)
		})
		if staged == nil && err == nil {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		clear(out)
	}
	each, err := l.transact(ctx, func(w *writer) error {
		if err := l.commitEach(ctx, w, recs, out, nowMs); err != nil {
			return err
		}
		return w.gaps(ctx, recs, out, nowMs)
	})
	if err == nil {
		err = each
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// stagedCommit makes Commit decide a group in memory and write it with multi-row statements
// (commitStaged); false stores it record by record (commitEach). Tests compare the two.
var stagedCommit = true

// transact runs fn in a write transaction and commits it. fnErr is fn's error (the
// transaction was rolled back); err is a failure to begin or to commit.
func (l *Ledger) transact(ctx context.Context, fn func(w *writer) error) (fnErr, err error) {
	tx, err := l.db.W.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("commit: %w", err)
	}
	w := l.newWriter(tx)
	defer w.finish() // after the rollback below
	defer tx.Rollback()
	if err := fn(w); err != nil {
		return err, nil
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("commit: %w", err)
	}
	return nil, nil
}

// commitEach stores the records one by one, each inside its own savepoint, then flags the
// refunds the ledger does not cover (checkRefunds).
func (l *Ledger) commitEach(ctx context.Context, w *writer, recs []Record, out []Outcome, nowMs int64) error {
	for i := range recs {
		r := recs[i] // a copy: checkRecord may fill in its payload
		o, err := l.commitOne(ctx, w, &r, nowMs)
		if err != nil {
			return fmt.Errorf("commit %s: %w", wire.Key(recs[i].Terminal, recs[i].Seq), err)
		}
		out[i] = o
	}
	return w.checkRefunds(ctx, recs, out)
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
			o, args := l.conflict(r, nowMs)
			return o, w.exec(ctx, parkConflict, args...)
		}
		o := prior.outcome()
		o.Duplicate = true
		return o, nil
	}
	if r.OtherContent {
		return Outcome{Undecided: true}, nil
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

// conflict answers a record whose key the ledger holds final with other content: the
// original stands, and the record's content is parked (the parkConflict arguments), for the
// till kept it. Its date is its own, or the store's at nowMs if its time is unknown.
func (l *Ledger) conflict(r *Record, nowMs int64) (Outcome, []any) {
	o := Outcome{Status: wire.AckConflict, Code: CodeIdempotencyConflict,
		Message: fmt.Sprintf("key %s was already used with other content; the original stands", wire.Key(r.Terminal, r.Seq))}
	var at string
	if !r.At.IsZero() {
		at = r.At.UTC().Format(timeFormat)
	}
	payload := r.Payload
	if payload == nil {
		payload = []byte{}
	}
	return o, []any{r.Terminal, r.Seq, r.Hash, string(r.Kind), o.Code, o.Message, payload, at, nowMs,
		l.parkedDate(r.At, nowMs)}
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
		if err := w.exec(ctx, deleteNonFinal, r.Terminal, r.Seq); err != nil {
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
		err = w.exec(ctx, upsertParked, r.Terminal, r.Seq, r.Hash, string(r.Kind), d.code, d.message, payload, d.at,
			nowMs, l.parkedDate(r.At, nowMs))
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

// The staged group commit (Commit's fast path). It reads what the group needs to know from the
// ledger with a few multi-key queries (the events of its keys, the stock of its SKUs, the flow
// numbers it names), decides every record in order in memory exactly as commitOne would
// against the database, and writes the rows table by table, in record order, with multi-row
// statements. Whatever commitOne answers from a statement that fails (a flow number taken, an
// unreadable payload) the staging answers before it writes anything of the record; any other
// failure makes Commit start over with commitEach.

// stagedFallbacks counts staged commits that had to start over record by record (for tests).
var stagedFallbacks atomic.Int64

// multiRows is the most rows one statement of a multi covers.
const multiRows = 64

// multi is a statement over many rows: a multi-row INSERT ("… VALUES (?, ?), (?, ?) …") or a
// query with an IN list ("… IN (?, ?, …)"). n rows take ⌈n/64⌉ statements, one shape per
// row count, each built and prepared on the writer connection the first time it is used.
type multi struct {
	head, row, tail string
	width           int // parameters per row

	mu     sync.Mutex
	shapes [multiRows + 1]string // by row count
}

// newMulti returns the multi head row, row, … tail.
func newMulti(head, row, tail string) *multi {
	return &multi{head: head, row: row, tail: tail, width: strings.Count(row, "?")}
}

// newInsert returns a multi-row INSERT into table of cols, followed by tail.
func newInsert(table, cols, tail string) *multi {
	row := "(?" + strings.Repeat(", ?", strings.Count(cols, ",")) + ")"
	return newMulti("INSERT INTO "+table+" ("+cols+") VALUES ", row, tail)
}

// shape returns the statement for rows rows.
func (m *multi) shape(rows int) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.shapes[rows] == "" {
		var b strings.Builder
		b.WriteString(m.head)
		for j := range rows {
			if j > 0 {
				b.WriteString(", ")
			}
			b.WriteString(m.row)
		}
		b.WriteString(m.tail)
		m.shapes[rows] = b.String()
	}
	return m.shapes[rows]
}

// chunks calls fn for each statement that covers rows [from, to) of n.
func (m *multi) chunks(n int, fn func(query string, from, to int) error) error {
	for from := 0; from < n; {
		to := min(n, from+multiRows)
		if err := fn(m.shape(to-from), from, to); err != nil {
			return err
		}
		from = to
	}
	return nil
}

// The statements of the staged commit. The column lists are the ones commitOne writes.
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
	// Σ deltas per SKU, as commitOne's one upsert per move adds them up.
	upsStock = newInsert("stock", "sku, qty", " ON CONFLICT (sku) DO UPDATE SET qty = qty + excluded.qty")

	selEvents = newMulti(`SELECT terminal, seq, kind, hash, status, final, code, message, coalesce(flow_no, 0),
		business_date, oversold FROM events WHERE (terminal, seq) IN (VALUES `, "(?, ?)", ")")
	selStock = newMulti(`SELECT sku, qty FROM stock WHERE sku IN (`, "?", ")")
	// flow_no IN (…) and flow_no = ? imply flow_no IS NOT NULL: SQLite then seeks in the
	// partial index events_flow (spelled out, the term turned the seeks into a range scan).
	selFlows = newMulti(`SELECT flow_no FROM events WHERE business_date = ? AND flow_no IN (`, "?", ")")
)

// Statements both ways of committing run one row at a time (rare rows: replaced live
// refusals, parked events, day closes).
const (
	deleteNonFinal = `DELETE FROM events WHERE terminal = ? AND seq = ? AND final = 0`
	// insParked parks a content under its key, once per hash (the arguments: terminal, seq,
	// hash, kind, code, message, payload, at, parked_ms, business_date). Its sku, its
	// identity at HQ, is '' for the first content parked under the key and its hash for
	// each later one.
	insParked = `INSERT INTO parked (terminal, seq, hash, sku, kind, code, message, payload, at, parked_ms,
		business_date) VALUES (?1, ?2, ?3,
		CASE WHEN EXISTS (SELECT 1 FROM parked WHERE terminal = ?1 AND seq = ?2) THEN ?3 ELSE '' END,
		?4, ?5, ?6, ?7, ?8, ?9, ?10)`
	// upsertParked parks a final rejection; the same content parked again takes its new
	// verdict.
	upsertParked = insParked + ` ON CONFLICT (terminal, seq, hash) DO UPDATE SET kind = excluded.kind,
		code = excluded.code, message = excluded.message, payload = excluded.payload, at = excluded.at,
		parked_ms = excluded.parked_ms, business_date = excluded.business_date`
	// parkConflict parks a conflict's content unless that content is parked already:
	// redelivered, it changes nothing (no exception change for HQ). Each other content of
	// the key is parked beside the ones before (a key parked as a rejection keeps it too):
	// the till kept every one.
	parkConflict   = insParked + ` ON CONFLICT (terminal, seq, hash) DO NOTHING`
	upsertDayClose = `INSERT INTO day_closes (terminal, business_date, seq, payload) VALUES (?, ?, ?, ?)
		ON CONFLICT (terminal, business_date) DO UPDATE SET seq = excluded.seq, payload = excluded.payload
		WHERE excluded.seq > day_closes.seq`
)

// selMaxFlow reads a business date's highest flow number; selFlowTaken whether one is taken.
const (
	selMaxFlow   = `SELECT coalesce(max(flow_no), 0) FROM events WHERE business_date = ? AND flow_no IS NOT NULL`
	selFlowTaken = `SELECT count(*) FROM events WHERE business_date = ? AND flow_no = ?`
)

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
