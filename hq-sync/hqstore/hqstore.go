// Package hqstore is HQ's side of its database: the Storage interface HQ's engines
// (hqstore/sqlite, hqstore/postgres) implement and the rows, declarations and exceptions as
// HQ holds them, and what the engines share: the errors of Storage.PutBatch, the checks a
// batch passes before any engine writes it, the column layout of a per-method amount map and
// the text a time a store sent is kept as. What a store sends is internal/hqwire's.
//
// Both engines implement Storage with the same semantics and pass the same suite
// (hqstore/storetest). This package does no I/O and must never hold engine-specific SQL.
package hqstore

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/posgate/posgate/internal/hqwire"
	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/perr"
	"github.com/posgate/posgate/internal/wire"
)

// StoredRow is a row as HQ holds it, for reconciliation.
type StoredRow struct {
	Store, Terminal string
	Seq             int64
	Kind            string
	BusinessDate    string
	FlowNo          int64
	Amount          money.Fen
	ByMethod        map[string]money.Fen
	ReceivedAt      time.Time
	Payload         json.RawMessage // day_close rows only (the declared totals); nil otherwise
}

// StoredDay is a store's latest declaration of a day as HQ holds it.
type StoredDay struct {
	Store      string
	Day        hqwire.StoreDay
	ReceivedAt time.Time // when HQ received this revision
	FirstAt    time.Time // when HQ received the first declaration of the day ("closed"; in parts: its part 1)
}

// StoredException is an exception as HQ holds it: its latest state from the store.
type StoredException struct {
	Store string
	hqwire.Exception
	ReceivedAt time.Time // when HQ received this state
}

// Storage is HQ's database. Both engines (SQLite, PostgreSQL) pass the same test suite.
type Storage interface {
	// PutBatch stores a batch in one transaction. A batch ID seen before with the same
	// content hash returns the original receipt with Duplicate set and changes nothing; with
	// another hash it is ErrBatchIDReused (perr.Conflict, hqwire.CodeBatchIDReused) and
	// changes nothing. A row whose (store, terminal, seq) HQ already holds is not stored again
	// (with the same hash it counts as old; with another hash the whole batch is refused with
	// ErrRowConflict, perr.Conflict hqwire.CodeRowConflict). A batch Check refuses is a
	// perr.Invalid error with code hqwire.CodeBatchInvalid.
	PutBatch(ctx context.Context, b *hqwire.Batch, contentHash string, at time.Time) (hqwire.Receipt, error)
	// Rows returns every stored sale, refund and day-close row of a business date (of one
	// store, or of all stores when store is "").
	Rows(ctx context.Context, date, store string) ([]StoredRow, error)
	// Days returns the latest declaration of a business date of each store (or one store).
	Days(ctx context.Context, date, store string) ([]StoredDay, error)
	// DateStores returns, in byte order, the stores HQ holds rows or a declaration of on a
	// business date: what reconcile goes through, one store at a time.
	DateStores(ctx context.Context, date string) ([]string, error)
	// RecordReconcile records a reconciliation that ran to its end (hq-sync reconcile):
	// an engine that drops old days (Partitioner) drops only those a run of every store
	// has covered.
	RecordReconcile(ctx context.Context, run ReconcileRun) error
	// Exceptions returns the exceptions of a business date that are not withdrawn, of each
	// store (or one store), by store, kind, terminal, seq and SKU.
	Exceptions(ctx context.Context, date, store string) ([]StoredException, error)
	// OpenExceptions returns the exceptions of every business date that are neither
	// withdrawn nor resolved, of each store (or one store), by business date, store, kind,
	// terminal, seq and SKU.
	OpenExceptions(ctx context.Context, store string) ([]StoredException, error)
	// PutFlowExceptions stores a store's flow exception states (hqwire.FlowsPath) in one
	// transaction: per (store, terminal, seq), the state with the highest Change stands; a
	// state HQ holds at the same or a higher change number is left as it was. It returns how
	// many states it stored. A state of a business day HQ dropped (Partitioner.Retain) is
	// not stored. The states are checked (serve.ValidateFlows) before.
	PutFlowExceptions(ctx context.Context, store, batchID string, xs []hqwire.FlowException, at time.Time) (int, error)
	// FlowExceptions returns the flow exceptions HQ holds of a business date (of every date
	// when date is ""), of each store (or one store), by business date, store, terminal and
	// seq: every one, or with open only those the store's manager has not resolved.
	FlowExceptions(ctx context.Context, date, store string, open bool) ([]StoredFlowException, error)
	// LastBatches returns, for each of stores HQ holds a batch of, when HQ stored the
	// store's latest new batch (a replay does not count): how HQ sees a store gone quiet.
	LastBatches(ctx context.Context, stores []string) (map[string]time.Time, error)
	// DropDrafts deletes the parts of declarations kept aside whose part 1 came before
	// before, of every store, with their transactions, and returns how many store-days'
	// parts it deleted. A store that never sends the rest (retired, or its state lost) would
	// have them kept for good. One that sends the next part after all has it dropped
	// (hqwire.Receipt.PartsDropped) and declares the day anew from part 1, as after any draft lost.
	DropDrafts(ctx context.Context, before time.Time) (int64, error)
	// Close closes the database.
	Close() error
}

// ReconcileRun is one reconciliation of a business date that ran to its end.
type ReconcileRun struct {
	Date        string
	Store       string // "" for every store
	Finished    time.Time
	OK          bool  // the date reconciled exactly
	Stores      int   // stores compared
	HQTxns      int64 // sale and refund rows at HQ
	Differences int64 // transaction, totals and missing-declaration entries
}

// Partitioner is implemented by an engine that keeps each business day apart (the
// PostgreSQL engine: a partition per day), so that serve can make the days to come ahead
// of their first batch and drop old ones.
type Partitioner interface {
	// PrepareDays makes room for the days from first to last (YYYY-MM-DD), those not
	// dropped.
	PrepareDays(ctx context.Context, first, last string) error
	// Retain drops every day before before (YYYY-MM-DD) that a reconciliation of every
	// store has covered (RecordReconcile): its rows, declaration, exceptions and flow
	// exceptions. Rows of a dropped day sent again are acknowledged as held and not stored.
	// A day not reconciled yet is kept, whatever its age.
	Retain(ctx context.Context, before string) (Retained, error)
}

// Retained is what Partitioner.Retain did.
type Retained struct {
	Dropped      []string // days dropped
	Unreconciled []string // days before the limit kept: no run of every store covered them
}

// ErrBatchIDReused returns the error for a batch id reused with other content.
func ErrBatchIDReused(store, batchID string) error {
	return perr.New(perr.Conflict, hqwire.CodeBatchIDReused,
		"batch %s of store %s was stored before with other content; the original stands", batchID, store)
}

// ErrRowConflict returns the error for a row whose key HQ holds with another hash.
func ErrRowConflict(store, terminal string, seq int64) error {
	return perr.New(perr.Conflict, hqwire.CodeRowConflict,
		"row %s/%s/%d is stored with another hash; nothing of the batch was stored", store, terminal, seq)
}

// Check verifies what an engine relies on before it writes a batch: a store, an id and a
// content hash, business dates of rows and days as YYYY-MM-DD, payment methods it has
// columns for, declarations in parts numbered as
// DayParts requires (an engine keys a day's parts by their number), and exceptions whose
// text ExceptionText accepts, each listed once (of two states of one exception in a batch,
// the order an engine applies them in would decide which stands). It is not the protocol's
// validation (hq-sync serve does that); it keeps an engine from storing something it would
// read back differently.
func Check(b *hqwire.Batch, contentHash string) error {
	switch {
	case b == nil:
		return perr.New(perr.Invalid, hqwire.CodeBatchInvalid, "no batch")
	case b.Store == "" || b.ID == "":
		return perr.New(perr.Invalid, hqwire.CodeBatchInvalid, "a batch needs a store and a batch_id")
	case contentHash == "":
		return perr.New(perr.Invalid, hqwire.CodeBatchInvalid, "batch %s has no content hash", b.ID)
	}
	for i := range b.Rows {
		if _, err := Split(b.Rows[i].ByMethod); err != nil {
			return fmt.Errorf("rows[%d]: %w", i, err)
		}
		if i > 0 && b.Rows[i].BusinessDate == b.Rows[i-1].BusinessDate {
			continue // checked: a batch's rows are nearly all of one day
		}
		if err := CheckDate(b.Rows[i].BusinessDate); err != nil {
			return fmt.Errorf("rows[%d]: %w", i, err)
		}
	}
	for i := range b.Days {
		if err := CheckDate(b.Days[i].BusinessDate); err != nil {
			return fmt.Errorf("days[%d]: %w", i, err)
		}
		if _, _, err := DayParts(&b.Days[i]); err != nil {
			return fmt.Errorf("days[%d]: %w", i, err)
		}
		for j := range b.Days[i].Txns {
			if _, err := Split(b.Days[i].Txns[j].ByMethod); err != nil {
				return fmt.Errorf("days[%d].txns[%d]: %w", i, j, err)
			}
		}
	}
	type key struct {
		kind, terminal string
		seq            int64
		sku            string
	}
	seen := make(map[key]int, len(b.Exceptions))
	for i := range b.Exceptions {
		x := &b.Exceptions[i]
		if err := ExceptionText(x); err != nil {
			return fmt.Errorf("exceptions[%d]: %w", i, err)
		}
		k := key{x.Kind, x.Terminal, x.Seq, x.SKU}
		if j, dup := seen[k]; dup {
			return perr.New(perr.Invalid, hqwire.CodeBatchInvalid, "exceptions[%d] is the same exception as exceptions[%d]", i, j)
		}
		seen[k] = i
	}
	return nil
}

// CheckDate returns a perr.Invalid error unless date is a business date as YYYY-MM-DD: an
// engine keeps each day apart by it (the PostgreSQL engine's partitions), and hq-sync serve
// refuses any other first.
func CheckDate(date string) error {
	if len(date) != len(wire.BusinessDate) {
		return perr.New(perr.Invalid, hqwire.CodeBatchInvalid, "business_date %q is not YYYY-MM-DD", date)
	}
	if _, err := time.Parse(wire.BusinessDate, date); err != nil {
		return perr.New(perr.Invalid, hqwire.CodeBatchInvalid, "business_date %q is not YYYY-MM-DD", date)
	}
	return nil
}

// ExceptionText returns a perr.Invalid error if a text of x holds a NUL character, which
// PostgreSQL's text cannot hold: the engines refuse it alike, and hq-sync serve with the
// same words.
func ExceptionText(x *hqwire.Exception) error {
	for _, f := range []struct{ name, text string }{
		{"kind", x.Kind}, {"terminal", x.Terminal}, {"sku", x.SKU}, {"business_date", x.BusinessDate},
		{"code", x.Code}, {"detail", x.Detail}, {"resolution", x.Resolution},
	} {
		if strings.ContainsRune(f.text, 0) {
			return perr.New(perr.Invalid, hqwire.CodeBatchInvalid, "%s holds a NUL character", f.name)
		}
	}
	return nil
}

// DayParts returns which part of its declaration d is and of how many parts: (1, 1) for a
// whole declaration (Part and Parts both 0, or both 1), (k, n) for part k of n. Any other
// numbering (a part 0 or above Parts, more than hqwire.MaxDayParts parts, one of the two
// without the other), a split id that is not an id as wire.ValidID says, or a whole
// declaration with one is a perr.Invalid error: hq-sync serve refuses it with the same
// words, and an engine never keeps such a part aside. A part without a split id (an
// uploader from before split ids) is taken as of the split "".
func DayParts(d *hqwire.StoreDay) (part, parts int, err error) {
	switch {
	case d.Part == 0 && d.Parts == 0, d.Part == 1 && d.Parts == 1:
		part, parts = 1, 1
	case 1 <= d.Part && d.Part <= d.Parts && d.Parts <= hqwire.MaxDayParts:
		part, parts = d.Part, d.Parts
	default:
		return 0, 0, perr.New(perr.Invalid, hqwire.CodeBatchInvalid,
			"part %d of %d parts is not numbered 1 ≤ part ≤ parts ≤ %d (both 0: the whole day in one)",
			d.Part, d.Parts, hqwire.MaxDayParts)
	}
	switch {
	case parts > 1 && d.Split != "" && !wire.ValidID(d.Split):
		return 0, 0, perr.New(perr.Invalid, hqwire.CodeBatchInvalid,
			"part %d of %d parts has a split id that is not 1 to %d characters [A-Za-z0-9_-]", part, parts, wire.MaxIDLen)
	case parts == 1 && d.Split != "":
		return 0, 0, perr.New(perr.Invalid, hqwire.CodeBatchInvalid, "a whole declaration has a split id")
	}
	return part, parts, nil
}

// Method bits of Methods.Mask.
const (
	BitCash = 1 << iota
	BitCard
	BitQR
)

// Methods is a per-method amount map as the engines store it: one column per method and
// a mask of the methods the map named, so that {"cash": "0.00"} reads back as it was sent.
type Methods struct {
	Cash, Card, QR int64
	Mask           int64
}

// Split returns the columns of a by_method map. A method other than cash, card and qr is
// a perr.Invalid error.
func Split(m map[string]money.Fen) (Methods, error) {
	var c Methods
	for k, v := range m {
		switch k {
		case "cash":
			c.Cash, c.Mask = int64(v), c.Mask|BitCash
		case "card":
			c.Card, c.Mask = int64(v), c.Mask|BitCard
		case "qr":
			c.QR, c.Mask = int64(v), c.Mask|BitQR
		default:
			return Methods{}, perr.New(perr.Invalid, hqwire.CodeBatchInvalid, "unknown payment method %q", k)
		}
	}
	return c, nil
}

// Map returns the by_method map the columns were split from (nil for an empty mask).
func (c Methods) Map() map[string]money.Fen {
	if c.Mask == 0 {
		return nil
	}
	m := make(map[string]money.Fen, 3)
	if c.Mask&BitCash != 0 {
		m["cash"] = money.Fen(c.Cash)
	}
	if c.Mask&BitCard != 0 {
		m["card"] = money.Fen(c.Card)
	}
	if c.Mask&BitQR != 0 {
		m["qr"] = money.Fen(c.QR)
	}
	return m
}

// Interner hands out one copy of each distinct string it is given, so that a million rows
// of five hundred stores hold five hundred store names, not a million.
type Interner map[string]string

// Bytes returns the interned string equal to b.
func (in Interner) Bytes(b []byte) string {
	if s, ok := in[string(b)]; ok { // no allocation for the lookup
		return s
	}
	s := string(b)
	in[s] = s
	return s
}

// String returns the interned string equal to s.
func (in Interner) String(s string) string {
	if v, ok := in[s]; ok {
		return v
	}
	in[s] = s
	return s
}

// DayStored reports whether a declaration of revision rev replaces one of revision held
// (held 0: none yet). The highest revision stands; an equal revision is a resend and
// changes nothing.
func DayStored(held, rev int64) bool { return rev > held }

// Held notes in m (made when nil), for hqwire.Receipt.DaysHeld, that HQ kept the revision held
// of date rather than the batch's declaration of it.
func Held(m map[string]int64, date string, held int64) map[string]int64 {
	if m == nil {
		m = map[string]int64{}
	}
	m[date] = max(m[date], held)
	return m
}

// Dropped notes in m (made when nil), for hqwire.Receipt.PartsDropped, that HQ kept nothing of
// the batch's part of revision rev of date, since it does not follow the parts HQ holds.
func Dropped(m map[string]int64, date string, rev int64) map[string]int64 {
	if m == nil {
		m = map[string]int64{}
	}
	m[date] = rev
	return m
}

// TimeText is how the engines keep a time a store sent: RFC 3339 in UTC to the
// nanosecond, "" for the zero time (none sent).
func TimeText(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// ParseTime reads back a time kept as TimeText wrote it.
func ParseTime(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	return time.Parse(time.RFC3339Nano, s)
}

// ExceptionColumns are the columns of the exceptions table ScanExceptions reads, in order.
const ExceptionColumns = `store, kind, terminal, seq, sku, business_date, change, code, detail, qty_short, at,
	resolved, resolved_at, resolution, received_ms`

// Rows is what ScanExceptions reads: database/sql's rows and pgx's alike.
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}

// ScanExceptions reads exceptions from rows of ExceptionColumns; what names them in errors
// ("exceptions of 2026-11-29").
func ScanExceptions(what string, rows Rows) ([]StoredException, error) {
	var out []StoredException
	for rows.Next() {
		var x StoredException
		var at, resolvedAt string
		var received int64
		if err := rows.Scan(&x.Store, &x.Kind, &x.Terminal, &x.Seq, &x.SKU, &x.BusinessDate, &x.Change, &x.Code,
			&x.Detail, &x.QtyShort, &at, &x.Resolved, &resolvedAt, &x.Resolution, &received); err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		var err error
		if x.At, err = ParseTime(at); err != nil {
			return nil, fmt.Errorf("%s: %s/%s: at: %w", what, x.Store, x.Key(), err)
		}
		if x.ResolvedAt, err = ParseTime(resolvedAt); err != nil {
			return nil, fmt.Errorf("%s: %s/%s: resolved_at: %w", what, x.Store, x.Key(), err)
		}
		x.ReceivedAt = time.UnixMilli(received).UTC()
		out = append(out, x)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return out, nil
}
