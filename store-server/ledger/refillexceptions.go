package ledger

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/posgate/posgate/internal/hqwire"
	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/wire"
)

// The exceptions of a ledger refilled from HQ (store-server restore --from-hq). The refill
// drops the exceptions its own bookings flagged (ForgetRefillExceptions): it judged the rows
// against stock it cannot prove. The lost ledger's own exceptions are at HQ, which gives
// them back (hqwire.PartExceptions, hqwire.PartFlows), each in the state it holds; they are
// booked as HQ holds them (RestoreExceptions, RestoreFlowExceptions), open ones open and
// resolved ones with their note, straight into the exception tables: the sale logic that
// flagged them is not run again. Their triggers number a change of each for the uploader,
// which sends HQ the same state again; a manager's resolution at the store is then a change
// as any other.

// RestoredExceptions is what a refill booked of the exceptions HQ held.
type RestoredExceptions struct {
	Booked    map[string]int `json:"booked"`    // by kind: hqwire's exception kinds, and "flow" for flow exceptions
	Open      int            `json:"open"`      // of them, not resolved (a seq gap is never resolved)
	Resolved  int            `json:"resolved"`  // of them, resolved by the lost ledger's manager
	Withdrawn int            `json:"withdrawn"` // withdrawn at HQ (the lost ledger no longer held them): not booked
	Held      int            `json:"held"`      // the ledger held them already: left as they were
	// NotBooked names each exception HQ held that the ledger cannot book, and why.
	NotBooked []string `json:"not_booked,omitempty"`
}

// Add adds o's counts to s.
func (s *RestoredExceptions) Add(o RestoredExceptions) {
	if s.Booked == nil {
		s.Booked = map[string]int{}
	}
	for k, n := range o.Booked {
		s.Booked[k] += n
	}
	s.Open += o.Open
	s.Resolved += o.Resolved
	s.Withdrawn += o.Withdrawn
	s.Held += o.Held
	s.NotBooked = append(s.NotBooked, o.NotBooked...)
}

// booked counts one exception of kind booked (or held already), resolved or not.
func (s *RestoredExceptions) booked(kind string, inserted, resolved bool) {
	if !inserted {
		s.Held++
		return
	}
	if s.Booked == nil {
		s.Booked = map[string]int{}
	}
	s.Booked[kind]++
	if resolved {
		s.Resolved++
	} else {
		s.Open++
	}
}

// KindFlow names flow exceptions in RestoredExceptions.Booked.
const KindFlow = "flow"

// RestoreExceptions books exceptions HQ held of the store (a page of hqwire.PartExceptions)
// as HQ holds them, in one transaction: an oversell (its sale marked oversold again), a price
// or refund exception, a parked content, a seq gap; each open or resolved with its note. A
// withdrawn one is not booked; one the ledger holds already is left as it is; one this
// release cannot book (an unknown kind, a detail it cannot read) is named in NotBooked. Only
// for a refill, after ForgetRefillExceptions.
func (l *Ledger) RestoreExceptions(ctx context.Context, xs []hqwire.Exception) (RestoredExceptions, error) {
	var out RestoredExceptions
	err := l.write(ctx, func(w *writer) error {
		out = RestoredExceptions{}
		for i := range xs {
			x := &xs[i]
			if x.Withdrawn {
				out.Withdrawn++
				continue
			}
			inserted, why, err := w.restoreException(ctx, x)
			if err != nil {
				return fmt.Errorf("restore exception %s: %w", x.Key(), err)
			}
			if why != "" {
				out.NotBooked = append(out.NotBooked, x.Key()+": "+why)
				continue
			}
			out.booked(x.Kind, inserted, x.Resolved && x.Kind != hqwire.ExceptionSeqGap)
		}
		return nil
	})
	return out, err
}

// restoreException books x. inserted is false when the ledger held it already; why says
// why x cannot be booked ("" when it was).
func (w *writer) restoreException(ctx context.Context, x *hqwire.Exception) (inserted bool, why string, err error) {
	at, resolvedAt := restoredTime(x.At), restoredTime(x.ResolvedAt)
	var q string
	var args []any
	switch x.Kind {
	case hqwire.ExceptionOversell:
		sku, ok := hqwire.UnescapeSKU(x.SKU)
		if !ok || x.QtyShort <= 0 {
			return false, fmt.Sprintf("an oversell of sku %q, %d short", x.SKU, x.QtyShort), nil
		}
		q = `INSERT INTO oversells (terminal, seq, sku, qty_short, at, business_date, resolved, resolved_at, resolution)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`
		args = []any{x.Terminal, x.Seq, sku, x.QtyShort, at, x.BusinessDate, x.Resolved, resolvedAt, x.Resolution}
	case hqwire.ExceptionPrice:
		sku, ok := hqwire.UnescapeSKU(x.SKU)
		p, pok := parsePriceDetail(x.Detail, x.Code)
		if !ok || !pok {
			return false, fmt.Sprintf("a price exception of sku %q whose detail this release cannot read: %q", x.SKU, x.Detail), nil
		}
		q = `INSERT INTO price_exceptions (terminal, seq, sku, code, qty, sold_price, catalog_price, difference, sale_version,
			store_version, at, business_date, resolved, resolved_at, resolution)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`
		args = []any{x.Terminal, x.Seq, sku, x.Code, p.Qty, int64(p.SoldPrice), int64(p.CatalogPrice), int64(p.Difference),
			p.SaleVersion, p.StoreVersion, at, x.BusinessDate, x.Resolved, resolvedAt, x.Resolution}
	case hqwire.ExceptionRefund:
		q = `INSERT INTO refund_exceptions (terminal, seq, code, detail, at, business_date, resolved, resolved_at, resolution)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`
		args = []any{x.Terminal, x.Seq, x.Code, x.Detail, at, x.BusinessDate, x.Resolved, resolvedAt, x.Resolution}
	case hqwire.ExceptionParked:
		if x.Detail == "" {
			return false, "a parked content without a detail", nil
		}
		// HQ holds the content's detail, not its payload: kept as HQ's detail (hq_detail),
		// the content's hash as its sku says (a later content's) or unknown ("": the first
		// content's; the till's replay of it takes this row, insParked).
		q = `INSERT INTO parked (terminal, seq, hash, sku, kind, code, message, payload, at, parked_ms, business_date,
			resolved, resolved_at, resolution, hq_detail) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT DO NOTHING`
		args = []any{x.Terminal, x.Seq, x.SKU, x.SKU, parkedKind(x.Detail), x.Code, x.Detail, []byte{}, at,
			restoredMs(x.At, w.l.now()), x.BusinessDate, x.Resolved, resolvedAt, x.Resolution, x.Detail}
	case hqwire.ExceptionSeqGap:
		to, ok := parseSeqGapDetail(x.Detail, x.Terminal, x.Seq)
		if !ok || x.Code != GapPruned {
			return false, fmt.Sprintf("a seq gap of reason %q whose detail this release cannot read: %q", x.Code, x.Detail), nil
		}
		q = `INSERT OR IGNORE INTO seq_gaps (terminal, from_seq, to_seq, at_ms, reason) VALUES (?, ?, ?, ?, ?)`
		args = []any{x.Terminal, x.Seq, to, restoredMs(x.At, w.l.now()), x.Code}
	default:
		return false, fmt.Sprintf("kind %q is not one this release books", x.Kind), nil
	}
	res, err := w.tx.ExecContext(ctx, q, args...)
	if err != nil {
		return false, "", err
	}
	n, err := res.RowsAffected()
	if err != nil || n == 0 || x.Kind != hqwire.ExceptionOversell {
		return n == 1, "", err
	}
	// The sale is oversold again, as the lost ledger recorded it (a replay's answer says so).
	if _, err := w.tx.ExecContext(ctx, `UPDATE events SET oversold = 1 WHERE terminal = ? AND seq = ? AND status = 'accepted'`,
		x.Terminal, x.Seq); err != nil {
		return false, "", err
	}
	_, err = w.tx.ExecContext(ctx, `UPDATE sales SET oversold = 1 WHERE (business_date, flow_no) IN
		(SELECT business_date, flow_no FROM events WHERE terminal = ? AND seq = ? AND kind = 'sale' AND status = 'accepted')`,
		x.Terminal, x.Seq)
	return true, "", err
}

// RestoreFlowExceptions books flow exceptions HQ held of the store (a page of
// hqwire.PartFlows) as HQ holds them, in one transaction, open or resolved with the note,
// with the transaction that held the receipt's number when the lost ledger booked it
// (HeldBy, a fact of that booking: its event may be in no ledger the refill makes, a day
// HQ dropped). One the ledger holds already is left as it is; one it cannot book is named
// in NotBooked. Only for a refill.
func (l *Ledger) RestoreFlowExceptions(ctx context.Context, xs []hqwire.FlowException) (RestoredExceptions, error) {
	var out RestoredExceptions
	err := l.write(ctx, func(w *writer) error {
		out = RestoredExceptions{}
		for i := range xs {
			x := &xs[i]
			key := wire.Key(x.Terminal, x.Seq)
			if (x.Kind != hqwire.FlowSale && x.Kind != hqwire.FlowRefund) || x.FlowGiven <= 0 || x.FlowBooked <= 0 {
				out.NotBooked = append(out.NotBooked, fmt.Sprintf("flow %s: a %q flow exception given %d, booked %d",
					key, x.Kind, x.FlowGiven, x.FlowBooked))
				continue
			}
			res, err := w.tx.ExecContext(ctx, `INSERT INTO flow_exceptions (terminal, seq, kind, flow_given, flow_booked,
				held_by, at, business_date, resolved, resolved_at, resolution) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
				ON CONFLICT DO NOTHING`, x.Terminal, x.Seq, x.Kind, x.FlowGiven, x.FlowBooked, x.HeldBy, restoredTime(x.At),
				x.BusinessDate, x.Resolved, restoredTime(x.ResolvedAt), x.Resolution)
			if err != nil {
				return fmt.Errorf("restore flow exception %s: %w", key, err)
			}
			n, err := res.RowsAffected()
			if err != nil {
				return err
			}
			out.booked(KindFlow, n == 1, x.Resolved)
		}
		return nil
	})
	return out, err
}

// NumberChangesAbove makes the ledger number its next exception changes above exceptions
// and its next flow exception changes above flows: the highest change numbers HQ held of the
// store's (withdrawn ones included), which the lost ledger gave by its own clock. HQ keeps,
// per exception, the state of the highest number: a manager's resolution at the refilled
// store must outnumber what HQ holds, whatever that clock said. It raises the ledger's last
// change of each to the number (the uploader sends that exception's state again under it,
// which HQ keeps); a ledger with no change of one yet is left as it is. Only for a refill,
// once its exceptions are booked.
func (l *Ledger) NumberChangesAbove(ctx context.Context, exceptions, flows int64) error {
	return l.write(ctx, func(w *writer) error {
		for table, floor := range map[string]int64{"exception_changes": exceptions, "flow_exception_changes": flows} {
			if err := w.exec(ctx, `UPDATE `+table+` SET id = ?1 WHERE id = (SELECT max(id) FROM `+table+`) AND id < ?1`,
				floor); err != nil {
				return fmt.Errorf("number %s above %d: %w", table, floor, err)
			}
		}
		return nil
	})
}

// restoredTime is how the ledger keeps a time HQ sent: the empty text for none.
func restoredTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(timeFormat)
}

// restoredMs is t in Unix milliseconds, or now's for the zero time.
func restoredMs(t, now time.Time) int64 {
	if t.IsZero() {
		return now.UnixMilli()
	}
	return t.UnixMilli()
}

// priceDetailRE reads what priceDetail writes.
var priceDetailRE = regexp.MustCompile(`^(\d+) sold at (-?\d+\.\d\d), catalog (-?\d+\.\d\d) \(difference (-?\d+\.\d\d)\); ` +
	`sale priced from catalog version (-?\d+), the store's was (-?\d+) \(([a-z0-9_]+)\)$`)

// parsePriceDetail reads back the figures of a price exception from the detail priceDetail
// wrote of it, of code code; ok is false for any other text.
func parsePriceDetail(detail, code string) (p PriceException, ok bool) {
	m := priceDetailRE.FindStringSubmatch(detail)
	if m == nil || m[7] != code {
		return p, false
	}
	var errs [6]error
	p.Code = code
	p.Qty, errs[0] = strconv.ParseInt(m[1], 10, 64)
	p.SoldPrice, errs[1] = money.Parse(m[2])
	p.CatalogPrice, errs[2] = money.Parse(m[3])
	p.Difference, errs[3] = money.Parse(m[4])
	p.SaleVersion, errs[4] = strconv.ParseInt(m[5], 10, 64)
	p.StoreVersion, errs[5] = strconv.ParseInt(m[6], 10, 64)
	for _, err := range errs {
		if err != nil {
			return p, false
		}
	}
	return p, p.Qty > 0
}

// seqGapDetailRE reads the seqs seqGapDetail names.
var seqGapDetailRE = regexp.MustCompile(`^seqs? (\d+)(?: to (\d+))? of terminal (.*?): acked by a ledger`)

// parseSeqGapDetail reads back the last seq of a gap of terminal from from the detail
// seqGapDetail wrote of it; ok is false for any other text.
func parseSeqGapDetail(detail, terminal string, from int64) (to int64, ok bool) {
	m := seqGapDetailRE.FindStringSubmatch(detail)
	if m == nil || m[1] != strconv.FormatInt(from, 10) || m[3] != terminal {
		return 0, false
	}
	if m[2] == "" {
		return from, true
	}
	to, err := strconv.ParseInt(m[2], 10, 64)
	return to, err == nil && to >= from
}

// parkedKind reads the kind of a parked event from the detail parkedDetail wrote of it, ""
// when it names none.
func parkedKind(detail string) string {
	head, _, _ := strings.Cut(detail, ":")
	if strings.HasPrefix(head, "day close of ") {
		return string(wire.KindDayClose)
	}
	first, _, _ := strings.Cut(head, " ")
	if wire.Kind(first).Valid() {
		return first
	}
	return ""
}
