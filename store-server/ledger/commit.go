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
	// Prices are the SKUs of an accepted offline sale sold at another unit price than the
	// store's catalog: a price_exceptions row each, written with the sale.
	Prices []PriceException
	// Gap, if not nil, is the gap in the terminal's seq order this record's event jumped
	// (its From..To, the events before it the ledger does not hold): stored in seq_gaps in
	// the record's transaction when the record is written (not for a Duplicate, Undecided
	// or Err outcome), once per (terminal, From).
	Gap *SeqGap
	// Replayed marks an accepted event its till sent again (the ledger had lost it) with
	// the flow number the store gave it then (FlowNo): it keeps that number, whatever Redis
	// holds of its day. Only a number taken since (by the ledger alone, in degrade mode)
	// makes it take the day's next one.
	Replayed bool
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
// statements per 64 records instead of about a dozen per sale. If SQLite refuses any of
// those writes (a constraint the staging did not foresee, an I/O error), that transaction is
// rolled back and the group is stored again record by record, each in its own savepoint,
// which tells a bad record (Outcome.Err) from a failed commit. Both ways decide a record with
// the same rules (settled, decide and the rules they call), against a different state.
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

// entry is one record on its way through a commit, either way: a copy of it (checkRecord may
// fill in its payload), checked, with the payload of an accepted sale, refund or day close
// decoded and validated.
type entry struct {
	r        Record
	err      error // from checkRecord: the record cannot be stored
	sale     *wire.SalePayload
	refund   *wire.RefundPayload
	dayClose *wire.DayClosePayload
	perr     error // from payloadOf: the accepted record cannot be stored
}

// init makes e the entry of r.
func (e *entry) init(r Record) {
	*e = entry{r: r}
	if e.err = checkRecord(&e.r); e.err != nil || e.r.Status != wire.AckAccepted {
		return
	}
	switch e.r.Kind {
	case wire.KindSale:
		e.sale, e.perr = payloadOf(e.r.Sale, &e.r)
	case wire.KindRefund:
		e.refund, e.perr = payloadOf(e.r.Refund, &e.r)
	case wire.KindDayClose:
		e.dayClose, e.perr = payloadOf(e.r.DayClose, &e.r)
	}
}

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

// known is what the ledger holds for a key, as a commit sees it.
type known struct {
	Stored
	row int // index of its staged events row (stage), or -1 when it is in the ledger already
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

// settled answers a record without applying any rule when its key decides it: a key
// stored final answers a replay (Duplicate) or, for other content, a conflict whose content is
// parked; an OtherContent record behind a key not stored final is Undecided. prior is what
// the key holds (nil: nothing). done is false when the record is to be decided (decide).
func (l *Ledger) settled(st state, e *entry, prior *known, nowMs int64) (o Outcome, done bool) {
	r := &e.r
	if prior == nil {
		prior = l.archivedPrior(r.Terminal, r.Seq)
	}
	if prior != nil && prior.Final {
		if prior.Hash != r.Hash {
			o, args := l.conflict(r, nowMs)
			st.rows().one(parkConflict, args...)
			return o, true
		}
		o := prior.outcome()
		o.Duplicate = true
		return o, true
	}
	if r.OtherContent {
		return Outcome{Undecided: true}, true
	}
	return Outcome{}, false
}

// decide applies the ledger's rules to a record that settled left to decide, in st: the
// rules of its kind if it is accepted (sale, refund, dayClose), its parking if it is a final
// refusal, and its events row, which replaces prior (a non-final record) if there is one. A
// *perr.Error means the record cannot be stored; the rules return it before they change st.
func (l *Ledger) decide(ctx context.Context, st state, e *entry, prior *known, nowMs int64) (Outcome, error) {
	r := &e.r
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
	if r.Status == wire.AckAccepted {
		var err error
		switch r.Kind {
		case wire.KindSale:
			err = sale(ctx, st, e, &d)
		case wire.KindRefund:
			err = refund(ctx, st, e, &d)
		case wire.KindDayClose:
			err = dayClose(st, e, &d)
		case wire.KindScan, wire.KindHeartbeat:
		}
		if err != nil {
			return Outcome{}, err
		}
	} else if d.final {
		st.rows().one(upsertParked, r.Terminal, r.Seq, r.Hash, string(r.Kind), d.code, d.message, payload, d.at,
			nowMs, l.parkedDate(r.At, nowMs))
	}
	err := st.record(ctx, eventKey{r.Terminal, r.Seq}, prior,
		Stored{Kind: r.Kind, Hash: r.Hash, Status: d.status, Final: d.final, Code: d.code, Message: d.message,
			FlowNo: d.flowNo, BusinessDate: d.date, Oversold: d.oversold},
		[]any{r.Terminal, r.Seq, string(r.Kind), r.Hash, d.at, d.date, r.Offline, string(d.status), d.final,
			d.code, d.message, sql.NullInt64{Int64: d.flowNo, Valid: d.flowNo > 0}, d.oversold, nowMs, payload})
	if err != nil {
		return Outcome{}, err
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
