package serve

import (
	"errors"
	"fmt"
	"time"

	"github.com/posgate/posgate/hq-sync/hqstore"
	"github.com/posgate/posgate/internal/hqwire"
	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/perr"
	"github.com/posgate/posgate/internal/wire"
)

// Validate checks a decoded batch against the upload protocol's rules and returns a
// perr.Invalid error with code batch_invalid whose message names the offending row, day
// or transaction:
//
//   - v is hqwire.Version; store and batch_id are ids as wire.ValidID defines them; at most
//     hqwire.MaxBatchRows rows;
//   - each row: a known kind, a valid terminal id, seq > 0, business_date YYYY-MM-DD, a
//     time, a hash of 1 to hqwire.MaxHashLen bytes, flow_no ≥ 0, and no other row of the batch
//     with the same (terminal, seq);
//   - a sale or refund: 0 ≤ amount ≤ wire.MaxAmount, by_method naming only cash, card and
//     qr, each ≥ 0, adding up to amount exactly;
//   - a day close: amount 0, no by_method, a payload that strictly decodes as a
//     wire.DayClosePayload, passes its Validate and names the row's business date;
//   - each day: business_date YYYY-MM-DD, not declared twice in the batch, revision > 0,
//     a closed_at time, part and parts both 0 or 1 ≤ part ≤ parts ≤ hqwire.MaxDayParts and a
//     split id only on a part, an id if any (as hqstore.DayParts checks them), and
//     transactions checked as sales and refunds are
//     (terminal, seq > 0, kind, flow_no ≥ 0, amount and by_method), no (terminal, seq)
//     listed twice. Within one part only: a part cannot see the ones HQ kept aside;
//   - at most hqwire.MaxBatchExceptions exceptions, each: kind oversell, refund, parked or seq_gap, a valid
//     terminal id, seq > 0, change > 0, business_date YYYY-MM-DD, no NUL in its text (as
//     hqstore.ExceptionText checks it), and no other exception of the batch with the same
//     (kind, terminal, seq, sku); an oversell has a sku of 1 to hqwire.MaxExceptionSKU bytes,
//     a parked event none (the first content parked under its key) or its content's hash
//     (a later one) of at most hqwire.MaxExceptionSKU bytes, a refund and a seq gap none;
//   - a withdrawn exception carries nothing more: no code, detail, qty_short, at or
//     resolution;
//   - any other has a code of 1 to hqwire.MaxCodeLen characters [a-z0-9_] (hqwire.CodeOversold for
//     an oversell; a refund's, a parked event's or a seq gap's code is not tied to the codes this
//     release knows, so that a later store release may add some without its batches being
//     refused), qty_short > 0 on an oversell and none on the others, a detail and a resolution of at most
//     hqwire.MaxExceptionText bytes each, and resolved_at or a resolution only when resolved.
func Validate(b *hqwire.Batch) error {
	switch {
	case b.V != hqwire.Version:
		return invalid("protocol version %d is not supported (HQ speaks %d)", b.V, hqwire.Version)
	case !wire.ValidID(b.Store):
		return invalid("store %q is not an id of 1 to %d characters [A-Za-z0-9_-]", clip(b.Store), wire.MaxIDLen)
	case !wire.ValidID(b.ID):
		return invalid("batch_id %q is not an id of 1 to %d characters [A-Za-z0-9_-]", clip(b.ID), wire.MaxIDLen)
	case len(b.Rows) > hqwire.MaxBatchRows:
		return invalid("%d rows are over the %d row limit of a batch", len(b.Rows), hqwire.MaxBatchRows)
	case len(b.Exceptions) > hqwire.MaxBatchExceptions:
		return invalid("%d exceptions are over the %d exception limit of a batch", len(b.Exceptions), hqwire.MaxBatchExceptions)
	}
	type key struct {
		terminal string
		seq      int64
	}
	seen := make(map[key]int, len(b.Rows))
	var dates dateCheck
	for i := range b.Rows {
		r := &b.Rows[i]
		if err := checkRow(r, &dates); err != nil {
			return invalid("rows[%d] (terminal %q seq %d): %s", i, clip(r.Terminal), r.Seq, err)
		}
		if err := checkContent(b.Store, r); err != nil {
			return invalid("rows[%d] (terminal %q seq %d): %s", i, clip(r.Terminal), r.Seq, err)
		}
		k := key{r.Terminal, r.Seq}
		if j, dup := seen[k]; dup {
			return invalid("rows[%d] (terminal %q seq %d): the same row as rows[%d]", i, r.Terminal, r.Seq, j)
		}
		seen[k] = i
	}
	days := make(map[string]int, len(b.Days))
	for i := range b.Days {
		d := &b.Days[i]
		if err := checkDay(d); err != nil {
			return invalid("days[%d] (business_date %q): %s", i, clip(d.BusinessDate), err)
		}
		if j, dup := days[d.BusinessDate]; dup {
			return invalid("days[%d] (business_date %s): the day is declared in days[%d] too", i, d.BusinessDate, j)
		}
		days[d.BusinessDate] = i
	}
	type exceptionKey struct {
		kind, terminal string
		seq            int64
		sku            string
	}
	exceptions := make(map[exceptionKey]int, len(b.Exceptions))
	for i := range b.Exceptions {
		x := &b.Exceptions[i]
		if err := checkException(x); err != nil {
			return invalid("exceptions[%d] (kind %q terminal %q seq %d sku %q): %s", i, clip(x.Kind), clip(x.Terminal),
				x.Seq, clip(x.SKU), err)
		}
		k := exceptionKey{x.Kind, x.Terminal, x.Seq, x.SKU}
		if j, dup := exceptions[k]; dup {
			return invalid("exceptions[%d] (kind %q terminal %q seq %d sku %q): the same exception as exceptions[%d]",
				i, x.Kind, x.Terminal, x.Seq, clip(x.SKU), j)
		}
		exceptions[k] = i
	}
	return nil
}

func invalid(format string, args ...any) error {
	return perr.New(perr.Invalid, hqwire.CodeBatchInvalid, format, args...)
}

// lowerHex reports whether s is all 0-9 a-f.
func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if !lowerHexDigit[s[i]] {
			return false
		}
	}
	return true
}

// lowerHexDigit marks 0-9 a-f.
var lowerHexDigit = func() (t [256]bool) {
	for _, c := range "0123456789abcdef" {
		t[c] = true
	}
	return t
}()

func checkRow(r *hqwire.Row, dates *dateCheck) error {
	switch {
	case r.Kind != hqwire.KindSale && r.Kind != hqwire.KindRefund && r.Kind != hqwire.KindDayClose:
		return fmt.Errorf("kind %q is not sale, refund or day_close", clip(r.Kind))
	case !wire.ValidID(r.Terminal):
		return fmt.Errorf("terminal %q is not an id of 1 to %d characters [A-Za-z0-9_-]", clip(r.Terminal), wire.MaxIDLen)
	case r.Seq <= 0:
		return fmt.Errorf("seq %d is not positive", r.Seq)
	case !dates.valid(r.BusinessDate):
		return fmt.Errorf("business_date %q is not YYYY-MM-DD", clip(r.BusinessDate))
	case r.At.IsZero():
		return fmt.Errorf("at is missing")
	case r.Hash == "" || len(r.Hash) > hqwire.MaxHashLen || !lowerHex(r.Hash):
		// The store's hashes are lowercase hex (wire.Hash). Anything else could hold a NUL,
		// which PostgreSQL's text refuses (500, the batch retried for good) where SQLite
		// stores it: the two engines answered one batch differently.
		return fmt.Errorf("hash must be 1 to %d characters of lowercase hex", hqwire.MaxHashLen)
	case r.FlowNo < 0:
		return fmt.Errorf("flow_no %d is negative", r.FlowNo)
	}
	if r.Kind == hqwire.KindDayClose {
		return checkDayClose(r)
	}
	return checkAmounts(r.Amount, r.ByMethod)
}

// checkContent holds a row to its content: its hash is the hash HQ computes from the row's
// kind, store, terminal, seq, time and payload (wire.Hash), and a sale's or refund's amount
// and split by method are its payload's. A row that says otherwise is refused whole: HQ
// keeps one row per key, and a row whose figures are not its content's would make a changed
// amount look like the row HQ holds (same hash) and go unseen.
func checkContent(store string, r *hqwire.Row) error {
	if !wire.HashIs(r.Hash, wire.Kind(r.Kind), store, r.Terminal, r.Seq, r.At, r.Payload) {
		h := wire.Hash(wire.Kind(r.Kind), store, r.Terminal, r.Seq, r.At, r.Payload)
		return fmt.Errorf("hash %s is not the hash of the row's content (%s)", clip(r.Hash), h)
	}
	if r.Kind != hqwire.KindSale && r.Kind != hqwire.KindRefund {
		return nil // a day close's totals are its payload (checkDayClose)
	}
	p, err := wire.DecodePayload(wire.Envelope{Kind: wire.Kind(r.Kind), Payload: r.Payload})
	if err != nil {
		return fmt.Errorf("payload: %s", perr.As(err).Message)
	}
	switch p := p.(type) {
	case *wire.SalePayload:
		if p.Total != r.Amount || !sameTender(p, r.ByMethod) {
			return figuresDiffer(r, p.Total, p.Tendered())
		}
	case *wire.RefundPayload:
		if by := map[string]money.Fen{p.Method: p.Amount}; p.Amount != r.Amount || !sameFigures(by, r.ByMethod) {
			return figuresDiffer(r, p.Amount, by)
		}
	}
	return nil
}

// figuresDiffer is the error of a row whose amount or split by method is not its payload's.
func figuresDiffer(r *hqwire.Row, amount money.Fen, by map[string]money.Fen) error {
	return fmt.Errorf("amount %s by method %v is not the payload's %s by method %v", r.Amount, r.ByMethod, amount, by)
}

// sameTender reports whether by, a row's split by method, is what the valid sale p took
// per method (SalePayload.Tendered, a method missing from either standing for 0), without
// building Tendered's map: HQ checks every sale of every batch with it.
func sameTender(p *wire.SalePayload, by map[string]money.Fen) bool {
	var cash, card, qr money.Fen // a valid sale's payments name no other method
	for _, pm := range p.Payments {
		switch pm.Method {
		case wire.MethodCash:
			cash += pm.Amount
		case wire.MethodCard:
			card += pm.Amount
		case wire.MethodQR:
			qr += pm.Amount
		default:
			return sameFigures(p.Tendered(), by)
		}
	}
	cash -= p.Change
	for m, v := range by {
		switch m {
		case wire.MethodCash, wire.MethodCard, wire.MethodQR:
		default:
			if v != 0 {
				return false
			}
		}
	}
	return by[wire.MethodCash] == cash && by[wire.MethodCard] == card && by[wire.MethodQR] == qr
}

// sameFigures compares two splits by method, a method missing from one standing for 0.
func sameFigures(a, b map[string]money.Fen) bool {
	for m, v := range a {
		if b[m] != v {
			return false
		}
	}
	for m, v := range b {
		if a[m] != v {
			return false
		}
	}
	return true
}

// checkAmounts checks a sale's or refund's amount against its split by method.
func checkAmounts(amount money.Fen, by map[string]money.Fen) error {
	if amount < 0 {
		return fmt.Errorf("amount %s is negative", amount)
	}
	if amount > wire.MaxAmount { // what no store takes: HQ's and reconcile's sums stay in int64
		return fmt.Errorf("amount %s is above the %s one event may carry", amount, wire.MaxAmount)
	}
	parts := make([]money.Fen, 0, len(by))
	for m, a := range by {
		if !wire.ValidMethod(m) {
			return fmt.Errorf("by_method names %q, not cash, card or qr", clip(m))
		}
		if a < 0 {
			return fmt.Errorf("by_method %s amount %s is negative", m, a)
		}
		parts = append(parts, a)
	}
	sum, err := money.Sum(parts...)
	if err != nil {
		return fmt.Errorf("by_method amounts overflow")
	}
	if sum != amount {
		return fmt.Errorf("by_method adds up to %s, not the amount %s", sum, amount)
	}
	return nil
}

func checkDayClose(r *hqwire.Row) error {
	if r.Amount != 0 || len(r.ByMethod) != 0 {
		return fmt.Errorf("a day close carries its totals in its payload: amount must be 0.00 and by_method empty")
	}
	var p wire.DayClosePayload
	if err := decodeStrict(r.Payload, &p); err != nil {
		return fmt.Errorf("payload is not a day close: %s", jsonDetail(err))
	}
	if err := p.Validate(); err != nil {
		return fmt.Errorf("payload: %s", perr.As(err).Message)
	}
	if p.BusinessDate != r.BusinessDate {
		return fmt.Errorf("payload closes %s, not the row's business_date", p.BusinessDate)
	}
	return nil
}

func checkDay(d *hqwire.StoreDay) error {
	switch {
	case !validDate(d.BusinessDate):
		return fmt.Errorf("business_date is not YYYY-MM-DD")
	case d.Revision <= 0:
		return fmt.Errorf("revision %d is not positive", d.Revision)
	case d.ClosedAt.IsZero():
		return fmt.Errorf("closed_at is missing")
	}
	if _, _, err := hqstore.DayParts(d); err != nil {
		return errors.New(perr.As(err).Message)
	}
	type key struct {
		terminal string
		seq      int64
	}
	seen := make(map[key]int, len(d.Txns))
	for i := range d.Txns {
		t := &d.Txns[i]
		if err := checkTxn(t); err != nil {
			return fmt.Errorf("txns[%d] (terminal %q seq %d): %w", i, clip(t.Terminal), t.Seq, err)
		}
		k := key{t.Terminal, t.Seq}
		if j, dup := seen[k]; dup {
			return fmt.Errorf("txns[%d] (terminal %q seq %d): the same transaction as txns[%d]", i, t.Terminal, t.Seq, j)
		}
		seen[k] = i
	}
	return nil
}

func checkTxn(t *hqwire.Txn) error {
	switch {
	case t.Kind != hqwire.KindSale && t.Kind != hqwire.KindRefund:
		return fmt.Errorf("kind %q is not sale or refund", clip(t.Kind))
	case !wire.ValidID(t.Terminal):
		return fmt.Errorf("terminal is not an id of 1 to %d characters [A-Za-z0-9_-]", wire.MaxIDLen)
	case t.Seq <= 0:
		return fmt.Errorf("seq %d is not positive", t.Seq)
	case t.FlowNo < 0:
		return fmt.Errorf("flow_no %d is negative", t.FlowNo)
	}
	return checkAmounts(t.Amount, t.ByMethod)
}

func checkException(x *hqwire.Exception) error {
	oversell := x.Kind == hqwire.ExceptionOversell
	switch {
	case !oversell && x.Kind != hqwire.ExceptionPrice && x.Kind != hqwire.ExceptionRefund && x.Kind != hqwire.ExceptionParked &&
		x.Kind != hqwire.ExceptionSeqGap:
		return fmt.Errorf("kind %q is not oversell, price, refund, parked or seq_gap", clip(x.Kind))
	case !wire.ValidID(x.Terminal):
		return fmt.Errorf("terminal is not an id of 1 to %d characters [A-Za-z0-9_-]", wire.MaxIDLen)
	case x.Seq <= 0:
		return fmt.Errorf("seq %d is not positive", x.Seq)
	case x.Change <= 0:
		return fmt.Errorf("change %d is not positive", x.Change)
	case !validDate(x.BusinessDate):
		return fmt.Errorf("business_date %q is not YYYY-MM-DD", clip(x.BusinessDate))
	case oversell && (x.SKU == "" || len(x.SKU) > hqwire.MaxExceptionSKU):
		return fmt.Errorf("an oversell needs a sku of 1 to %d bytes", hqwire.MaxExceptionSKU)
	case x.Kind == hqwire.ExceptionPrice && (x.SKU == "" || len(x.SKU) > hqwire.MaxExceptionSKU):
		return fmt.Errorf("a price exception needs a sku of 1 to %d bytes", hqwire.MaxExceptionSKU)
	case (x.Kind == hqwire.ExceptionRefund || x.Kind == hqwire.ExceptionSeqGap) && x.SKU != "":
		return fmt.Errorf("a %s exception has no sku", x.Kind)
	case x.Kind == hqwire.ExceptionParked && len(x.SKU) > hqwire.MaxExceptionSKU:
		return fmt.Errorf("a parked exception's sku is longer than %d bytes", hqwire.MaxExceptionSKU)
	}
	if err := hqstore.ExceptionText(x); err != nil {
		return errors.New(perr.As(err).Message)
	}
	if x.Withdrawn {
		if x.Code != "" || x.Detail != "" || x.QtyShort != 0 || !x.At.IsZero() || x.Resolved ||
			!x.ResolvedAt.IsZero() || x.Resolution != "" {
			return fmt.Errorf("a withdrawn exception carries no code, detail, qty_short, at or resolution")
		}
		return nil
	}
	switch {
	case oversell && x.QtyShort <= 0:
		return fmt.Errorf("qty_short %d of an oversell is not positive", x.QtyShort)
	case oversell && x.Code != hqwire.CodeOversold:
		return fmt.Errorf("code %q of an oversell is not %s", clip(x.Code), hqwire.CodeOversold)
	case !oversell && x.QtyShort != 0:
		return fmt.Errorf("a %s exception has no qty_short", x.Kind)
	case !validCode(x.Code):
		return fmt.Errorf("code %q is not 1 to %d characters [a-z0-9_]", clip(x.Code), hqwire.MaxCodeLen)
	case len(x.Detail) > hqwire.MaxExceptionText:
		return fmt.Errorf("detail is longer than %d bytes", hqwire.MaxExceptionText)
	case len(x.Resolution) > hqwire.MaxExceptionText:
		return fmt.Errorf("resolution is longer than %d bytes", hqwire.MaxExceptionText)
	case !x.Resolved && !x.ResolvedAt.IsZero():
		return fmt.Errorf("resolved_at without resolved")
	case !x.Resolved && x.Resolution != "":
		return fmt.Errorf("a resolution without resolved")
	}
	return nil
}

// validCode reports whether s is an exception's code: 1 to hqwire.MaxCodeLen characters [a-z0-9_].
func validCode(s string) bool {
	if s == "" || len(s) > hqwire.MaxCodeLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '_' {
			return false
		}
	}
	return true
}

// dateCheck is validDate remembering the last date it found valid: a batch's rows are
// nearly all of one day, and parsing each row's date again was a tenth of the checks.
type dateCheck struct{ last string }

func (d *dateCheck) valid(s string) bool {
	if s != "" && s == d.last {
		return true
	}
	if !validDate(s) {
		return false
	}
	d.last = s
	return true
}

// validDate reports whether s is a calendar date written YYYY-MM-DD.
func validDate(s string) bool {
	if len(s) != len(wire.BusinessDate) {
		return false
	}
	d, err := time.Parse(wire.BusinessDate, s)
	return err == nil && d.Format(wire.BusinessDate) == s
}
