package wire

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/perr"
)

// Payment methods.
const (
	MethodCash = "cash"
	MethodCard = "card"
	MethodQR   = "qr"
)

// ValidMethod reports whether m is a known payment method.
func ValidMethod(m string) bool { return m == MethodCash || m == MethodCard || m == MethodQR }

// Limits on payload contents.
const (
	MaxLines     = 500       // lines in one sale
	MaxQty       = 1_000_000 // units on one line
	MaxPayments  = 20        // tenders in one sale
	MaxTextLen   = 128       // names, references, ids inside payloads
	BusinessDate = "2006-01-02"
)

// MaxAmount is the largest amount one event may carry (1,000,000,000.00 yuan): a sale's
// total, a payment, a refund, a scanned unit price. It keeps every sum the store and HQ
// keep far inside int64 fen: a terminal accepting such events at its highest rate (100 a
// second) for a whole day sums to 8.6e17 fen, a store at 1,000 a second to 8.6e18, both
// under int64's 9.2e18. Without it two valid sales could overflow a terminal's day
// counters in Redis and the ledger's sums, and the store could neither count nor rebuild.
const MaxAmount money.Fen = 100_000_000_000

// Codes of payload validation errors (perr.Invalid).
const (
	CodePayload  = "payload_invalid" // a payload rule is broken (the message says which)
	CodeQuantity = "quantity_invalid"
	CodeAmount   = "amount_invalid"
	CodeMethod   = "payment_method_invalid"
	CodeTooLarge = "amount_above_limit" // above MaxAmount
)

// ScanPayload is a line scanned into an open sale. Online, the store's verdict on it applies
// live scan limits and checks that the quantity is in stock.
type ScanPayload struct {
	SaleID    string    `json:"sale_id"`
	Line      int       `json:"line"`
	SKU       string    `json:"sku"`
	Qty       int64     `json:"qty"`
	UnitPrice money.Fen `json:"unit_price"`
}

// Line is one line of a sale.
type Line struct {
	Line      int       `json:"line"`
	SKU       string    `json:"sku"`
	Name      string    `json:"name,omitempty"`
	Qty       int64     `json:"qty"`
	UnitPrice money.Fen `json:"unit_price"`
	Amount    money.Fen `json:"amount"`
}

// Payment is one tender of a sale or a refund. Card and QR carry the reference the POS app
// got from its payment device.
type Payment struct {
	Method    string    `json:"method"`
	Amount    money.Fen `json:"amount"`
	Reference string    `json:"reference,omitempty"`
}

// SalePayload is a completed sale: lines, tenders and change. Total = Σ line amounts =
// Σ tenders − change; only cash gives change.
type SalePayload struct {
	SaleID   string    `json:"sale_id"`
	OpenedAt time.Time `json:"opened_at"`
	Lines    []Line    `json:"lines"`
	Total    money.Fen `json:"total"`
	Payments []Payment `json:"payments"`
	Change   money.Fen `json:"change"`
	// CatalogVersion is the version of the store's catalog the sale was priced from: the
	// oldest one any of its lines was scanned under (0: the terminal names none). The store
	// holds a live sale's unit prices to its current catalog (price_mismatch), and flags an
	// offline sale's that differ as a price exception.
	CatalogVersion int64 `json:"catalog_version"`
}

// RefundLine is a returned quantity of one line of the original sale.
type RefundLine struct {
	Line   int       `json:"line"`
	SKU    string    `json:"sku"`
	Qty    int64     `json:"qty"`
	Amount money.Fen `json:"amount"`
}

// RefundPayload refunds (part of) a completed sale, identified by its id and the seq of its
// sale event.
type RefundPayload struct {
	RefundID  string       `json:"refund_id"`
	SaleID    string       `json:"sale_id"`
	SaleSeq   int64        `json:"sale_seq"`
	Lines     []RefundLine `json:"lines"`
	Amount    money.Fen    `json:"amount"`
	Method    string       `json:"method"`
	Reference string       `json:"reference,omitempty"`
	Restock   bool         `json:"restock"`
	// ApprovedBy names the supervisor whose PIN the terminal checked for this refund (one
	// above the store's threshold, or made offline: Settings); empty when none was needed.
	ApprovedBy string `json:"approved_by,omitempty"`
}

// MethodTotal is a day's figures for one payment method. Sale amounts are net of change.
type MethodTotal struct {
	Method       string    `json:"method"`
	SaleCount    int64     `json:"sale_count"`
	SaleAmount   money.Fen `json:"sale_amount"`
	RefundCount  int64     `json:"refund_count"`
	RefundAmount money.Fen `json:"refund_amount"`
}

// DayClosePayload is a terminal's own totals for one business day.
type DayClosePayload struct {
	BusinessDate string        `json:"business_date"`
	SaleCount    int64         `json:"sale_count"`
	SaleAmount   money.Fen     `json:"sale_amount"`
	RefundCount  int64         `json:"refund_count"`
	RefundAmount money.Fen     `json:"refund_amount"`
	Methods      []MethodTotal `json:"methods"`
}

// HeartbeatPayload reports a terminal's backlog.
type HeartbeatPayload struct {
	Backlog        int64 `json:"backlog"`
	OldestAgeMs    int64 `json:"oldest_age_ms"`
	CatalogVersion int64 `json:"catalog_version"`
}

func bad(code, format string, args ...any) *perr.Error {
	return perr.New(perr.Invalid, code, format, args...)
}

func textOK(s string, required bool) bool {
	return len(s) <= MaxTextLen && (!required || s != "")
}

// Validate checks a scan payload.
func (p *ScanPayload) Validate() error {
	switch {
	case !textOK(p.SaleID, true) || !textOK(p.SKU, true):
		return bad(CodePayload, "scan needs a sale_id and a sku")
	case p.Line <= 0:
		return bad(CodePayload, "line number must be positive")
	case p.Qty <= 0 || p.Qty > MaxQty:
		return bad(CodeQuantity, "quantity must be between 1 and %d, got %d", MaxQty, p.Qty)
	case p.UnitPrice < 0:
		return bad(CodeAmount, "unit price must not be negative")
	case p.UnitPrice > MaxAmount:
		return tooLarge("unit price", p.UnitPrice)
	}
	return nil
}

func tooLarge(what string, a money.Fen) error {
	return bad(CodeTooLarge, "%s %s is above the %s one event may carry", what, a, MaxAmount)
}

// Validate checks a sale payload: lines, amounts and tenders add up exactly in fen.
func (p *SalePayload) Validate() error {
	if !textOK(p.SaleID, true) {
		return bad(CodePayload, "sale needs a sale_id")
	}
	if len(p.Lines) == 0 || len(p.Lines) > MaxLines {
		return bad(CodePayload, "a sale needs 1 to %d lines, got %d", MaxLines, len(p.Lines))
	}
	if p.CatalogVersion < 0 {
		return bad(CodePayload, "a sale's catalog_version must not be negative")
	}
	var total money.Fen
	for _, l := range p.Lines {
		if err := checkLine(l.Line, l.SKU, l.Qty); err != nil {
			return err
		}
		if !textOK(l.Name, false) {
			return bad(CodePayload, "line %d: name is longer than %d characters", l.Line, MaxTextLen)
		}
		if l.UnitPrice < 0 {
			return bad(CodeAmount, "line %d: unit price must not be negative", l.Line)
		}
		amt, err := money.Mul(l.UnitPrice, l.Qty)
		if err != nil {
			return err
		}
		if amt != l.Amount {
			return bad(CodeAmount, "line %d: amount %s is not %d × %s", l.Line, l.Amount, l.Qty, l.UnitPrice)
		}
		if total, err = money.Add(total, amt); err != nil {
			return err
		}
	}
	if total != p.Total {
		return bad(CodeAmount, "total %s is not the sum of the lines %s", p.Total, total)
	}
	if len(p.Payments) == 0 || len(p.Payments) > MaxPayments {
		return bad(CodePayload, "a sale needs 1 to %d payments, got %d", MaxPayments, len(p.Payments))
	}
	var paid, cash money.Fen
	for _, pm := range p.Payments {
		if err := checkPayment(pm); err != nil {
			return err
		}
		var err error
		if paid, err = money.Add(paid, pm.Amount); err != nil {
			return err
		}
		if pm.Method == MethodCash {
			cash += pm.Amount // bounded by paid, which did not overflow
		}
	}
	if p.Change < 0 || p.Change > cash {
		return bad(CodeAmount, "change %s must be between 0 and the cash tendered %s", p.Change, cash)
	}
	if paid-p.Change != p.Total {
		return bad(CodeAmount, "payments %s less change %s do not equal the total %s", paid, p.Change, p.Total)
	}
	if p.Total > MaxAmount {
		return tooLarge("total", p.Total)
	}
	for _, pm := range p.Payments {
		if pm.Amount > MaxAmount {
			return tooLarge("payment", pm.Amount)
		}
	}
	return nil
}

// Tendered returns what a valid sale took per payment method, cash net of its change: the
// figures the store's ledger books for it and HQ checks a sale's row against.
func (p *SalePayload) Tendered() map[string]money.Fen {
	by := make(map[string]money.Fen, len(p.Payments))
	for _, pm := range p.Payments {
		by[pm.Method] += pm.Amount
	}
	if p.Change != 0 {
		by[MethodCash] -= p.Change
	}
	return by
}

func checkLine(line int, sku string, qty int64) error {
	switch {
	case line <= 0:
		return bad(CodePayload, "line number must be positive")
	case !textOK(sku, true):
		return bad(CodePayload, "line %d has no sku", line)
	case qty <= 0 || qty > MaxQty:
		return bad(CodeQuantity, "line %d: quantity must be between 1 and %d, got %d", line, MaxQty, qty)
	}
	return nil
}

func checkPayment(pm Payment) error {
	switch {
	case !ValidMethod(pm.Method):
		return bad(CodeMethod, "payment method %q is not cash, card or qr", pm.Method)
	case pm.Amount <= 0:
		return bad(CodeAmount, "a payment amount must be positive")
	case pm.Method != MethodCash && !textOK(pm.Reference, true):
		return bad(CodePayload, "a %s payment needs the payment device's reference", pm.Method)
	case !textOK(pm.Reference, false):
		return bad(CodePayload, "payment reference is longer than %d characters", MaxTextLen)
	}
	return nil
}

// Validate checks a refund payload.
func (p *RefundPayload) Validate() error {
	if !textOK(p.RefundID, true) || !textOK(p.SaleID, true) || p.SaleSeq <= 0 {
		return bad(CodePayload, "refund needs a refund_id, a sale_id and the sale's seq")
	}
	if !textOK(p.ApprovedBy, false) {
		return bad(CodePayload, "a refund's approved_by is at most %d bytes", MaxTextLen)
	}
	if len(p.Lines) == 0 || len(p.Lines) > MaxLines {
		return bad(CodePayload, "a refund needs 1 to %d lines", MaxLines)
	}
	var total money.Fen
	for _, l := range p.Lines {
		if err := checkLine(l.Line, l.SKU, l.Qty); err != nil {
			return err
		}
		if l.Amount < 0 {
			return bad(CodeAmount, "line %d: refund amount must not be negative", l.Line)
		}
		var err error
		if total, err = money.Add(total, l.Amount); err != nil {
			return err
		}
	}
	if total != p.Amount || p.Amount <= 0 {
		return bad(CodeAmount, "refund amount %s must be positive and the sum of its lines %s", p.Amount, total)
	}
	if p.Amount > MaxAmount {
		return tooLarge("refund amount", p.Amount)
	}
	return checkPayment(Payment{Method: p.Method, Amount: p.Amount, Reference: p.Reference})
}

// Validate checks a day close payload.
func (p *DayClosePayload) Validate() error {
	if _, err := time.Parse(BusinessDate, p.BusinessDate); err != nil {
		return bad(CodePayload, "business_date %q is not YYYY-MM-DD", p.BusinessDate)
	}
	if p.SaleCount < 0 || p.RefundCount < 0 || p.SaleAmount < 0 || p.RefundAmount < 0 {
		return bad(CodeAmount, "day totals must not be negative")
	}
	seen := map[string]bool{}
	for _, m := range p.Methods {
		if !ValidMethod(m.Method) || seen[m.Method] {
			return bad(CodeMethod, "day totals list method %q twice or it is unknown", m.Method)
		}
		seen[m.Method] = true
		if m.SaleCount < 0 || m.RefundCount < 0 || m.SaleAmount < 0 || m.RefundAmount < 0 {
			return bad(CodeAmount, "day totals must not be negative")
		}
	}
	return nil
}

// Validate checks a heartbeat payload.
func (p *HeartbeatPayload) Validate() error {
	if p.Backlog < 0 || p.OldestAgeMs < 0 || p.CatalogVersion < 0 {
		return bad(CodePayload, "heartbeat figures must not be negative")
	}
	return nil
}

// Payload is implemented by every event payload.
type Payload interface{ Validate() error }

// NewPayload returns a zero payload of the kind's type.
func NewPayload(k Kind) (Payload, error) {
	switch k {
	case KindScan:
		return &ScanPayload{}, nil
	case KindSale:
		return &SalePayload{}, nil
	case KindRefund:
		return &RefundPayload{}, nil
	case KindDayClose:
		return &DayClosePayload{}, nil
	case KindHeartbeat:
		return &HeartbeatPayload{}, nil
	}
	return nil, bad(CodeKind, "unknown event kind %q", k)
}

// DecodePayload strictly decodes and validates an envelope's payload into the kind's type
// (*ScanPayload, *SalePayload, *RefundPayload, *DayClosePayload or *HeartbeatPayload).
func DecodePayload(e Envelope) (Payload, error) {
	p, err := NewPayload(e.Kind)
	if err != nil {
		return nil, err
	}
	if err := decodeStrict(e.Payload, p); err != nil {
		return nil, err
	}
	return p, p.Validate()
}

// LoadLocation returns the time zone a store's business dates are taken in: an IANA name
// ("Asia/Shanghai", "Local") or a fixed offset from UTC written "UTC+08:00" or "UTC-05:30".
// Offsets are whole minutes, as RFC 3339 (the envelope's time format) can carry no more.
func LoadLocation(name string) (*time.Location, error) {
	rest, ok := strings.CutPrefix(name, "UTC")
	if !ok || rest == "" {
		return time.LoadLocation(name)
	}
	bad := fmt.Errorf("time zone %q: want an IANA name or UTC+hh:mm", name)
	if len(rest) != 6 || (rest[0] != '+' && rest[0] != '-') || rest[3] != ':' {
		return nil, bad
	}
	h, herr := strconv.Atoi(rest[1:3])
	m, merr := strconv.Atoi(rest[4:6])
	if herr != nil || merr != nil || h > 14 || m > 59 {
		return nil, bad
	}
	secs := (h*60 + m) * 60
	if rest[0] == '-' {
		secs = -secs
	}
	return time.FixedZone(name, secs), nil
}
