package client

import (
	"time"

	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/wire"
)

// ErrorBody is the JSON body of every error answer: a stable code to switch on, a message a
// cashier can read, and for a 429 how long to wait before the same request is sent again.
type ErrorBody struct {
	Code         string `json:"code"`
	Message      string `json:"message"`
	RetryAfterMs int64  `json:"retry_after_ms,omitempty"`
}

// EventRef names the event a request created.
type EventRef struct {
	Seq     int64  `json:"seq"`
	Key     string `json:"key"`
	Offline bool   `json:"offline"` // decided by the terminal without the store's verdict
	FlowNo  int64  `json:"flow_no,omitempty"`
	// Parked: the store rejected the event the terminal had decided; the step stands and
	// the event is listed by GET /v1/parked.
	Parked bool `json:"parked,omitempty"`
}

// SaleLine is a line as the POS app shows it.
type SaleLine struct {
	Line      int       `json:"line"`
	SKU       string    `json:"sku"`
	Name      string    `json:"name"`
	Qty       int64     `json:"qty"`
	UnitPrice money.Fen `json:"unit_price"`
	Amount    money.Fen `json:"amount"`
	Refunded  int64     `json:"refunded_qty"`
}

// SalePayment is a tender as the POS app shows it.
type SalePayment struct {
	N         int       `json:"n"`
	Method    string    `json:"method"`
	Amount    money.Fen `json:"amount"`
	Reference string    `json:"reference,omitempty"`
	Voided    bool      `json:"voided,omitempty"`
}

// Sale is a sale as the POS app shows it.
type Sale struct {
	ID           string        `json:"id"`
	State        string        `json:"state"`
	OpenedAt     time.Time     `json:"opened_at"`
	CompletedAt  *time.Time    `json:"completed_at,omitempty"`
	BusinessDate string        `json:"business_date,omitempty"`
	Lines        []SaleLine    `json:"lines"`
	Total        money.Fen     `json:"total"`
	Paid         money.Fen     `json:"paid"`
	Due          money.Fen     `json:"due"`
	Change       money.Fen     `json:"change"`
	Payments     []SalePayment `json:"payments"`
	Seq          int64         `json:"seq,omitempty"`
	FlowNo       int64         `json:"flow_no,omitempty"`
}

// SaleAnswer is the answer to every sale request: the sale as it stands, the event the
// request created (nil when it created none), and the line an added line became.
type SaleAnswer struct {
	Sale  Sale      `json:"sale"`
	Event *EventRef `json:"event,omitempty"`
	Line  int       `json:"line,omitempty"`
}

// AddLineRequest adds an item by SKU or barcode.
type AddLineRequest struct {
	SKU     string `json:"sku,omitempty"`
	Barcode string `json:"barcode,omitempty"`
	Qty     int64  `json:"qty"`
}

// PayRequest takes one payment. Amount is decimal text ("12.30").
type PayRequest struct {
	Method    string `json:"method"`
	Amount    string `json:"amount"`
	Reference string `json:"reference,omitempty"`
}

// RefundLine asks to refund qty units of a sale's line.
type RefundLine struct {
	Line int   `json:"line"`
	Qty  int64 `json:"qty"`
}

// RefundRequest refunds lines of a completed sale; no lines refunds all that is left.
type RefundRequest struct {
	SaleID    string       `json:"sale_id"`
	Lines     []RefundLine `json:"lines,omitempty"`
	Method    string       `json:"method,omitempty"`
	Reference string       `json:"reference,omitempty"`
	Restock   *bool        `json:"restock,omitempty"` // default true
	// Supervisor approves a refund above the store's threshold or one made offline (the
	// agent answers supervisor_required when one is needed and missing).
	Supervisor *Supervisor `json:"supervisor,omitempty"`
}

// Supervisor is a supervisor's approval as typed at the till: the name the store set and
// the PIN. The agent checks the PIN against the hash the store published, also offline,
// and records the name, never the PIN.
type Supervisor struct {
	Name string `json:"name"`
	PIN  string `json:"pin"`
}

// Refund is a refund as the POS app shows it.
type Refund struct {
	ID           string    `json:"id"`
	SaleID       string    `json:"sale_id"`
	State        string    `json:"state"`
	At           time.Time `json:"at"`
	BusinessDate string    `json:"business_date"`
	Amount       money.Fen `json:"amount"`
	Method       string    `json:"method"`
	Restock      bool      `json:"restock"`
	Seq          int64     `json:"seq"`
	FlowNo       int64     `json:"flow_no,omitempty"`
	// ApprovedBy names the supervisor who approved it, when one was needed or given.
	ApprovedBy string `json:"approved_by,omitempty"`
}

// RefundAnswer is the answer to a refund.
type RefundAnswer struct {
	Refund Refund    `json:"refund"`
	Event  *EventRef `json:"event,omitempty"`
}

// DayCloseRequest closes a business day (default: the one open day, docs/terminal-api.md).
type DayCloseRequest struct {
	BusinessDate string `json:"business_date,omitempty"`
}

// DayCloseAnswer is the answer to a day close: the totals queued for the store.
type DayCloseAnswer struct {
	Totals wire.DayClosePayload `json:"totals"`
	Event  *EventRef            `json:"event,omitempty"`
}

// DayReopenRequest is a supervisor's reopen of a closed business day. Reason and
// Supervisor are required: the agent checks the supervisor's PIN.
type DayReopenRequest struct {
	BusinessDate string      `json:"business_date"`
	Reason       string      `json:"reason"`
	Supervisor   *Supervisor `json:"supervisor,omitempty"`
}

// DayReopen is a supervisor's reopen of a closed business day, kept for good: the close it
// undid (its event seq and the totals it declared), why, by whom and when.
type DayReopen struct {
	BusinessDate string `json:"business_date"`
	// CloseSeq is the day_close event reopened. It was not withdrawn: the store holds its
	// totals until the day's next close (a higher seq) takes their place.
	CloseSeq     int64                `json:"close_seq"`
	ClosedTotals wire.DayClosePayload `json:"closed_totals"`
	Reason       string               `json:"reason"`
	Supervisor   string               `json:"supervisor"` // the supervisor whose PIN the agent checked
	ReopenedAt   time.Time            `json:"reopened_at"`
}

// DayReopenAnswer is the answer to a reopen: the reopen as kept, with the close it undid.
type DayReopenAnswer struct {
	Reopen DayReopen `json:"reopen"`
}

// DayTotalsAnswer is a business day's totals at this terminal as they stand now, with the
// day's close and reopens.
type DayTotalsAnswer struct {
	wire.DayClosePayload
	// ClosedSeq is the day_close event that closes the day now; absent while it is open.
	ClosedSeq int64 `json:"closed_seq,omitempty"`
	// Reopens lists the supervisors' reopens of the day, oldest first, each with the close
	// it undid; absent when the day was never reopened.
	Reopens []DayReopen `json:"reopens,omitempty"`
}

// DatesApart is what the store's acks say of the till's business dates. The store dates an
// event it accepts by its time, from midnight in the store's zone (the ack's
// business_date), as the till does in its own (--tz). Any difference means the two zones
// are not the same: the till's day totals and closes then cover other hours than the
// store's days, and HQ finds the days apart.
type DatesApart struct {
	// Events counts, among the latest events the store dated, those it dated otherwise
	// than the till.
	Events int64 `json:"events"`
	// The latest of them: its seq, and the date each side gave it.
	Seq       int64  `json:"seq"`
	TillDate  string `json:"till_date"`
	StoreDate string `json:"store_date"`
	// TillZone is the till's --tz.
	TillZone string `json:"till_zone"`
}

// StatusAnswer is the terminal's sync state.
type StatusAnswer struct {
	Store          string     `json:"store"`
	Terminal       string     `json:"terminal"`
	Online         bool       `json:"online"`
	OfflineSince   *time.Time `json:"offline_since,omitempty"`
	Backlog        int64      `json:"backlog"`
	OldestSeq      int64      `json:"oldest_unsynced_seq,omitempty"`
	OldestAgeMs    int64      `json:"oldest_unsynced_age_ms"`
	StoredCard     money.Fen  `json:"stored_card_amount"`
	Parked         int64      `json:"parked"`
	InFlight       int        `json:"in_flight"`
	LastAckAt      *time.Time `json:"last_ack_at,omitempty"`
	CatalogVersion int64      `json:"catalog_version"`
	// CatalogsRefused counts the catalogs the terminal ignored as not signed by the store's
	// key it pinned (a catalog another client retained on the store's topic).
	CatalogsRefused int64 `json:"catalogs_refused"`
	// SettingsVersion is the version of the store's settings (supervisors, refund rules)
	// the terminal holds: 0 until it has received them, and no supervisor is known.
	SettingsVersion int64 `json:"settings_version"`
	// OldOpenDays are business days with sales or refunds, not closed, older than a close
	// naming no day looks back (--day-close-lookback): a supervisor closes each by its date.
	OldOpenDays []string `json:"old_open_days,omitempty"`
	// DatesApart, when present, says the store dated some of the till's latest events on
	// another business day than the till did: the till's --tz is not the
	// store's zone, and its day closes will not match the store's days.
	DatesApart *DatesApart `json:"dates_apart,omitempty"`
	// DiskFree is the room left on the outbox's file system, where the system says (a full
	// disk refuses every sale with storage_full: the till can warn before).
	DiskFree *int64 `json:"disk_free_bytes,omitempty"`
	// Held counts the acknowledged (and refused) events the outbox keeps to refill a store's
	// ledger lost with its disk; HeldSince is when the oldest of them was acknowledged;
	// HQThrough is the last business day HQ holds whole, as the store said (acknowledged
	// events of later days are kept: --retention, --retention-max).
	Held      int64      `json:"held_events"`
	HeldSince *time.Time `json:"held_since,omitempty"`
	HQThrough string     `json:"hq_through,omitempty"`
}

// Parked is an event the store rejected, kept with its reason for the manager.
type Parked struct {
	Seq     int64     `json:"seq"`
	Key     string    `json:"key"`
	Kind    wire.Kind `json:"kind"`
	At      time.Time `json:"at"`
	Status  string    `json:"status"`
	Code    string    `json:"code"`
	Message string    `json:"message"`
}

// ParkedAnswer lists parked events, oldest first.
type ParkedAnswer struct {
	Parked []Parked `json:"parked"`
}

// EventState is an event's delivery state: pending, acked, parked or refused, with the
// store's ack when it came.
type EventState struct {
	Seq     int64  `json:"seq"`
	Key     string `json:"key"`
	State   string `json:"state"` // pending, acked, parked, refused
	Offline bool   `json:"offline"`
	Status  string `json:"ack_status,omitempty"`
	Code    string `json:"code,omitempty"`
	Message string `json:"message,omitempty"`
	FlowNo  int64  `json:"flow_no,omitempty"`
}
