package client

import (
	"time"

	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/wire"
)

// Problem is the body of every error answer: an RFC 9457 problem (application/problem+json)
// with posgate's stable code. Detail is for the manager; Code is what a program switches on.
type Problem struct {
	Type   string `json:"type"` // https://posgate.dev/errors/<code>
	Title  string `json:"title"`
	Status int    `json:"status"`
	Code   string `json:"code"`
	Detail string `json:"detail"`
}

// Mode is the mode of the store's gate.
type Mode string

// The gate's modes.
const (
	ModeStarting   Mode = "starting"   // rebuilding the projection before the first event
	ModeRedis      Mode = "redis"      // the Redis gate decides live limits and stock
	ModeDegraded   Mode = "degraded"   // Redis unreachable: ledger-only stock, local limiter
	ModeRebuilding Mode = "rebuilding" // Redis back or failed over: rebuilding from the ledger
)

// HealthAnswer is the answer of GET /healthz, which needs no token: the store-server is up,
// and its gate's mode.
type HealthAnswer struct {
	OK   bool `json:"ok"`
	Mode Mode `json:"mode"`
}

// Stats counts what the store's ingest has done since the store-server started.
type Stats struct {
	Messages   int64 `json:"messages"`
	Bad        int64 `json:"bad_messages"`
	Events     int64 `json:"events"`
	Accepted   int64 `json:"accepted"`
	Replays    int64 `json:"replays"`
	Rejected   int64 `json:"rejected"`
	Refused    int64 `json:"refused_live"`
	OutOfOrder int64 `json:"out_of_order"`
	// PriceMismatch counts live scans and sales refused price_mismatch: a unit price that is
	// not the store's catalog's.
	PriceMismatch int64 `json:"price_mismatch"`
	SeqGaps       int64 `json:"seq_gaps"` // gaps recorded: a till's events the ledger lacks and the till no longer holds
	// Resends counts requests to a till to send events the ledger lacks again; Replayed the
	// events tills sent again on them and the store booked with their first answer.
	Resends  int64 `json:"resends"`
	Replayed int64 `json:"replayed"`
	// HeldBehindReplays counts new events sent back to their till to wait for the replays
	// of their group to reach Redis.
	HeldBehindReplays int64 `json:"held_behind_replays"`
	Groups            int64 `json:"groups"`
	Rebuilds          int64 `json:"rebuilds"`
	GateErrors        int64 `json:"gate_errors"`
	CommitError       int64 `json:"commit_errors"`
	// The last ledger commit that failed (a full disk, an I/O error): what SQLite said and
	// when. While commits fail nothing is acked; the terminals keep their events and resend.
	LastCommitError   string    `json:"last_commit_error,omitempty"`
	LastCommitErrorAt time.Time `json:"last_commit_error_at,omitzero"`
	// Drift: times Redis was found not to hold the ledger's projection (keys it dropped: an
	// eviction, a DEL or FLUSHALL, a restart without persistence), by reason, each followed
	// by a rebuild; the last one found, and when.
	Drift        int64            `json:"projection_drift"`
	DriftReasons map[string]int64 `json:"projection_drift_reasons,omitempty"`
	LastDrift    string           `json:"last_drift,omitempty"`
	LastDriftAt  time.Time        `json:"last_drift_at,omitzero"`
	// GateRefused says why the store does not run its gate on the Redis it reaches (an
	// allkeys-* maxmemory-policy) and sells on the ledger alone; empty otherwise.
	GateRefused string `json:"gate_refused,omitempty"`
}

// ModeAnswer is the answer of GET /v1/mode: the store, the gate's mode, ingest's counters and
// the ledger's disk.
type ModeAnswer struct {
	Store string      `json:"store"`
	Mode  Mode        `json:"mode"`
	Stats Stats       `json:"stats"`
	Disk  *DiskAnswer `json:"disk,omitempty"` // absent where the system gives no figure
}

// DiskAnswer is the room on the ledger's file system: when it is full, no commit succeeds
// and nothing is acknowledged.
type DiskAnswer struct {
	TotalBytes  int64 `json:"total_bytes"`
	FreeBytes   int64 `json:"free_bytes"`
	LedgerBytes int64 `json:"ledger_bytes"`
	Low         bool  `json:"low"` // under the store's warning level (--disk-warn-mb)
}

// StockRow is one SKU's stock in the ledger (the truth) and in Redis.
type StockRow struct {
	SKU    string `json:"sku"`
	Ledger int64  `json:"ledger"`
	// Proven is opening + adjustments − sold + restocked, from every stock move the ledger
	// holds (absent when asked without the proof: it reads the store's whole history).
	Proven *int64 `json:"proven,omitempty"`
	Redis  *int64 `json:"redis,omitempty"` // absent while the gate is not in Redis mode
	Diff   int64  `json:"diff"`            // redis − ledger
	// Unknown says the ledger cannot prove the SKU's stock (a ledger refilled from HQ that
	// held no opening stock or count of it, or not the store's whole history: no_opening,
	// incomplete): Ledger is what the moves it holds add up to. A count clears it.
	Unknown string `json:"unknown,omitempty"`
}

// StockAnswer is the answer of GET /v1/stock: every SKU's stock, by SKU.
type StockAnswer struct {
	Mode  Mode       `json:"mode"`
	Stock []StockRow `json:"stock"`
}

// Reasons of a stock adjustment (AdjustRequest.Reason).
const (
	ReasonAdjust  = "adjust"  // a change of stock: goods found, damaged, delivered
	ReasonOpening = "opening" // a SKU's opening stock
)

// AdjustRequest changes a SKU's stock by Delta (POST /v1/stock/adjust). ID makes it
// idempotent: the same ID with the same content is answered again and applied once.
type AdjustRequest struct {
	ID     string `json:"id"`
	SKU    string `json:"sku"`
	Delta  int64  `json:"delta"`
	Reason string `json:"reason,omitempty"` // ReasonAdjust (default) or ReasonOpening
}

// AdjustAnswer is the answer to an adjustment: the SKU's stock after it, and whether this
// request applied it (false: an earlier request of the same ID did).
type AdjustAnswer struct {
	SKU     string `json:"sku"`
	Qty     int64  `json:"qty"`
	Applied bool   `json:"applied"`
}

// CountRequest books a shelf count (POST /v1/stock/count): Counted units of SKU are on the
// shelf. The ledger books the difference from its own quantity when it books it, so sales
// and refunds during the count are not counted twice. ID makes it idempotent.
type CountRequest struct {
	ID      string `json:"id"`
	SKU     string `json:"sku"`
	Counted *int64 `json:"counted"` // required: 0 is a count (an empty shelf)
}

// CountAnswer is the answer to a shelf count: the SKU's stock after it, the change the
// ledger booked, and whether this request applied it (a retry answers the first Delta).
type CountAnswer struct {
	SKU     string `json:"sku"`
	Qty     int64  `json:"qty"`
	Applied bool   `json:"applied"`
	Delta   int64  `json:"delta"`
}

// ImportAnswer is the answer to a catalog import (POST /v1/catalog): the version it became
// and its number of items. Published is false when the catalog is installed and the broker
// has not taken it yet (Detail says so): the terminals get it once it does, and the import
// must not be sent again, which would make another version.
type ImportAnswer struct {
	Version   int64  `json:"version"`
	Items     int    `json:"items"`
	Published bool   `json:"published"`
	Detail    string `json:"detail,omitempty"`
}

// SettingsAnswer is the store's settings for its terminals as the manager sees them: the
// supervisors by name (their PINs' hashes are the terminals' alone), the refund rules, and
// the version published (0: none set yet). Published is false when the settings are saved
// and the broker has not taken them yet: they go out when it does.
type SettingsAnswer struct {
	Version     int64    `json:"version"`
	Supervisors []string `json:"supervisors"`
	RefundRules
	Published bool `json:"published"`
}

// RefundRules are the store's refund rules: SupervisorAbove, if set, is the amount over
// which a refund needs a supervisor's PIN (absent: none for its amount); Offline allows
// refunds while a terminal cannot reach the store, each approved by a supervisor.
type RefundRules struct {
	SupervisorAbove *money.Fen `json:"supervisor_above,omitempty"`
	Offline         bool       `json:"offline"`
}

// SupervisorRequest sets a supervisor's PIN: 6 to 12 digits.
type SupervisorRequest struct {
	PIN string `json:"pin"`
}

// Counters are one terminal's figures for one business date (or, summed with Add, a
// store's), as Redis keeps them, as the ledger computes them and as a terminal declares
// them. Sale amounts by method are net of change (cash); Amount is the sum of sale totals.
type Counters struct {
	Sales          int64                `json:"sales"`
	Amount         money.Fen            `json:"amount"`
	ByMethod       map[string]money.Fen `json:"by_method"`
	Refunds        int64                `json:"refunds"`
	RefundAmount   money.Fen            `json:"refund_amount"`
	RefundByMethod map[string]money.Fen `json:"refund_by_method"`
}

// Equal reports whether two Counters hold the same figures (a nil map equals an empty one,
// and zero entries are ignored).
func (c Counters) Equal(o Counters) bool {
	return c.Sales == o.Sales && c.Amount == o.Amount && c.Refunds == o.Refunds &&
		c.RefundAmount == o.RefundAmount && sameAmounts(c.ByMethod, o.ByMethod) &&
		sameAmounts(c.RefundByMethod, o.RefundByMethod)
}

// Add adds o's figures to c.
func (c *Counters) Add(o Counters) {
	c.Sales += o.Sales
	c.Amount += o.Amount
	c.Refunds += o.Refunds
	c.RefundAmount += o.RefundAmount
	for _, a := range []struct {
		to   *map[string]money.Fen
		from map[string]money.Fen
	}{
		{&c.ByMethod, o.ByMethod}, {&c.RefundByMethod, o.RefundByMethod}} {
		for m, f := range a.from {
			if *a.to == nil {
				*a.to = map[string]money.Fen{}
			}
			(*a.to)[m] += f
		}
	}
}

func sameAmounts(a, b map[string]money.Fen) bool {
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	for k, v := range b {
		if a[k] != v {
			return false
		}
	}
	return true
}

// DeclaredCounters turns a terminal's day close (or its day totals) into Counters, as the
// store compares them with the ledger's.
func DeclaredCounters(p wire.DayClosePayload) Counters {
	c := Counters{Sales: p.SaleCount, Amount: p.SaleAmount, Refunds: p.RefundCount, RefundAmount: p.RefundAmount,
		ByMethod: map[string]money.Fen{}, RefundByMethod: map[string]money.Fen{}}
	for _, m := range p.Methods {
		c.ByMethod[m.Method] = m.SaleAmount
		c.RefundByMethod[m.Method] = m.RefundAmount
	}
	return c
}

// TerminalTotals compares one terminal's day in the ledger, in Redis and as declared.
type TerminalTotals struct {
	Terminal string   `json:"terminal"`
	Ledger   Counters `json:"ledger"`
	// Redis is absent when the day is not compared with Redis (TotalsAnswer.RedisNotCompared
	// says why).
	Redis     *Counters `json:"redis,omitempty"`
	Declared  *Counters `json:"declared,omitempty"` // the terminal's day close, if it closed the day
	RedisDiff bool      `json:"redis_differs"`
	// DeclaredOK says whether the day close matches the ledger (absent without a close).
	DeclaredOK *bool `json:"declared_matches,omitempty"`
}

// TotalsAnswer is the answer of GET /v1/totals: a business day of the store (Store, from
// the ledger) and of each terminal, by terminal.
type TotalsAnswer struct {
	BusinessDate string           `json:"business_date"`
	Mode         Mode             `json:"mode"`
	Store        Counters         `json:"store"`
	Terminals    []TerminalTotals `json:"terminals"`
	// RedisNotCompared says why the terminals' Redis counters are absent (one of the
	// NotCompared* values), or is empty when they are there.
	RedisNotCompared string `json:"redis_not_compared,omitempty"`
}

// Why a day's totals are not compared with Redis's counters (TotalsAnswer.RedisNotCompared).
const (
	NotComparedMode       = "gate_not_on_redis" // the gate is not in Redis mode (degraded, rebuilding)
	NotComparedOld        = "before_window"     // older than the dates a rebuild keeps exact
	NotComparedLeftRedis  = "left_redis"        // HQ holds the day and its keys left Redis (the day sweep)
	NotComparedUnreadable = "redis_unreadable"  // Redis did not answer within a second
)

// Oversell is a sale that took a SKU below zero: Short of its units were not in stock.
type Oversell struct {
	Terminal     string    `json:"terminal"`
	Seq          int64     `json:"seq"`
	SKU          string    `json:"sku"`
	Short        int64     `json:"short"`
	At           time.Time `json:"at"`
	BusinessDate string    `json:"business_date"`
	// Resolved says a manager explained the shortfall: when, and how.
	Resolved   bool      `json:"resolved"`
	ResolvedAt time.Time `json:"resolved_at,omitzero"`
	Resolution string    `json:"resolution,omitempty"`
}

// OversellsAnswer is the answer of GET /v1/oversells, by date, terminal, seq and SKU.
type OversellsAnswer struct {
	Oversells []Oversell `json:"oversells"`
}

// ResolveOversellRequest resolves one oversell exception with what explained it (POST
// /v1/oversells/resolve). Stock itself is corrected with an adjustment, never here.
type ResolveOversellRequest struct {
	Terminal string `json:"terminal"`
	Seq      int64  `json:"seq"`
	SKU      string `json:"sku"`
	Note     string `json:"note"`
}

// ResolveOversellAnswer is the exception as resolved, and whether this request resolved it
// (false: an earlier one did, and its resolution stands).
type ResolveOversellAnswer struct {
	Oversell Oversell `json:"oversell"`
	Applied  bool     `json:"applied"`
}

// RefundException is an accepted refund the ledger's records do not cover: Code is
// refund_sale_unknown or refund_exceeds_sale, Detail says what was found (the refund's first
// problem).
type RefundException struct {
	Terminal     string    `json:"terminal"`
	Seq          int64     `json:"seq"` // the refund's event
	Code         string    `json:"code"`
	Detail       string    `json:"detail"`
	At           time.Time `json:"at"`
	BusinessDate string    `json:"business_date"`
	// Resolved says a manager explained the refund: when, and how.
	Resolved   bool      `json:"resolved"`
	ResolvedAt time.Time `json:"resolved_at,omitzero"`
	Resolution string    `json:"resolution,omitempty"`
}

// RefundExceptionsAnswer is the answer of GET /v1/refund-exceptions, by date, terminal and
// seq.
type RefundExceptionsAnswer struct {
	RefundExceptions []RefundException `json:"refund_exceptions"`
}

// ResolveRefundRequest resolves the refund exception of one refund (its event) with what
// explained it (POST /v1/refund-exceptions/resolve). The refund itself stands.
type ResolveRefundRequest struct {
	Terminal string `json:"terminal"`
	Seq      int64  `json:"seq"`
	Note     string `json:"note"`
}

// ResolveRefundAnswer is the exception as resolved, and whether this request resolved it.
type ResolveRefundAnswer struct {
	RefundException RefundException `json:"refund_exception"`
	Applied         bool            `json:"applied"`
}

// Parked is an event the store refused for good (a final rejection, or a key used again
// with other content). The till kept its sale or refund: a parked event is an exception the
// manager resolves with what explained it, and HQ gets each of its changes.
//
// A key can be parked with several contents (a till restored from a backup twice, devices
// sharing a terminal id): each distinct content (Hash) is a parked event of its own.
type Parked struct {
	ID       int64  `json:"id"` // the ledger's number of the parked content
	Terminal string `json:"terminal"`
	Seq      int64  `json:"seq"`
	// Hash is the content's hash, which tells a key's parked contents apart; "" for the
	// first content of a key restored from HQ (store-server restore --from-hq), whose hash
	// HQ never held, until its till sends it again.
	Hash    string    `json:"hash"`
	Kind    wire.Kind `json:"kind"`
	Code    string    `json:"code"`
	Message string    `json:"message"`
	At      time.Time `json:"at"` // the event's business time (zero if it could not be read)
	// BusinessDate is the event's, or the store's when it was parked if its time could not
	// be read or is outside the years 1970-9998.
	BusinessDate string `json:"business_date"`
	// Resolved says a manager explained it: when, and how.
	Resolved   bool      `json:"resolved"`
	ResolvedAt time.Time `json:"resolved_at,omitzero"`
	Resolution string    `json:"resolution,omitempty"`
}

// ParkedAnswer is the answer of GET /v1/parked: the most recently parked events (at most
// 1,000), and how many are open in all, so that a list cut short says so.
type ParkedAnswer struct {
	Parked []Parked `json:"parked"`
	Open   int64    `json:"open"`
}

// ResolveParkedRequest resolves one parked event with what explained it (POST
// /v1/parked/resolve). The event stays refused; the resolution goes to HQ.
type ResolveParkedRequest struct {
	Terminal string `json:"terminal"`
	Seq      int64  `json:"seq"`
	// Hash names the parked content (Parked.Hash). Left out, it names the key's only
	// content, or its content restored from HQ without a hash (Parked.Hash "").
	Hash string `json:"hash,omitempty"`
	Note string `json:"note"`
}

// ResolveParkedAnswer is the parked event as resolved, and whether this request resolved it.
type ResolveParkedAnswer struct {
	Parked  Parked `json:"parked"`
	Applied bool   `json:"applied"`
}

// TerminalSeen is what the store's ledger last recorded from one terminal.
type TerminalSeen struct {
	Terminal string `json:"terminal"`
	// The last event recorded (by seq, final or not), its business time and when the store
	// received it.
	LastSeq      int64          `json:"last_seq"`
	LastKind     wire.Kind      `json:"last_kind"`
	LastStatus   wire.AckStatus `json:"last_status"`
	LastAt       time.Time      `json:"last_at,omitzero"`
	LastReceived time.Time      `json:"last_received,omitzero"`
	// Heartbeat is the terminal's last accepted heartbeat, if any: its backlog as the
	// terminal counted it then.
	Heartbeat *Heartbeat `json:"heartbeat,omitempty"`
	// Parked counts the terminal's parked events no manager has resolved.
	Parked int64 `json:"parked"`
	// SeqGaps are the gaps in its seq order the store took, oldest first: events the till
	// sent to a ledger this one is not (restored from a backup, or started empty) and no
	// longer held when the store asked for them again.
	SeqGaps []SeqGap `json:"seq_gaps,omitempty"`
}

// Heartbeat is a terminal's report of its own backlog.
type Heartbeat struct {
	Seq      int64     `json:"seq"`
	At       time.Time `json:"at"`       // when the terminal took the figures
	Received time.Time `json:"received"` // when the store received them
	wire.HeartbeatPayload
}

// SeqGap is a gap in a terminal's seq order the store took: the events From..To were sent
// to a ledger this one is not (the till holds them, and HQ may), and the event To+1 was
// accepted without them. Reason is pruned: the till no longer held them when asked.
type SeqGap struct {
	From   int64     `json:"from_seq"`
	To     int64     `json:"to_seq"`
	At     time.Time `json:"at,omitzero"` // when the store recorded it
	Reason string    `json:"reason"`
}

// TerminalRow is one terminal as the store knows it: connected or not (its status topic),
// what the ledger last recorded from it and the backlog it last reported.
type TerminalRow struct {
	TerminalSeen
	// Online is nil when no status message was heard since the store-server started.
	Online      *bool     `json:"online,omitempty"`
	OnlineSince time.Time `json:"online_since,omitzero"`
	StatusHeard time.Time `json:"status_heard,omitzero"`
	// Backlog is the backlog report the terminal last published beside its events (nil
	// when none was heard since the store-server started, or when its heartbeats say it
	// stopped reporting: an agent with reports turned off reports its backlog only in its
	// heartbeats).
	Backlog *BacklogRow `json:"backlog,omitempty"`
	// BacklogUnknownSince is set while the terminal is not known to be online (its status
	// says offline, or none was heard since the store-server started): what it holds now is
	// unknown since then, and Backlog (or Heartbeat) is only its last report. It is when the
	// store heard it go offline, or, with no status heard, when the report was heard.
	BacklogUnknownSince *time.Time `json:"backlog_unknown_since,omitempty"`
	// CatalogVersion is the version of the store's catalog the terminal last said it holds,
	// in its backlog report or its heartbeat, whichever is newer (nil: it said nothing yet).
	CatalogVersion *int64 `json:"catalog_version,omitempty"`
	// CatalogBehind: that catalog is older than the store's.
	CatalogBehind bool `json:"catalog_behind"`
	// CatalogAhead: that catalog is newer than the store's (its data directory was restored
	// or made anew): the terminal ignores the store's until the next import, which takes a
	// version above it.
	CatalogAhead bool `json:"catalog_ahead,omitempty"`
	// ClockSkewMs is the till's clock minus the store's, in ms (positive: the till is
	// ahead), as the store measured it from the messages it heard from the till in the last
	// 5 minutes; nil while the store has heard none (the till quiet, or the store just
	// started), and while ClockUnconfirmed.
	ClockSkewMs *int64 `json:"clock_skew_ms,omitempty"`
	// ClockOff: |ClockSkewMs| is over the store's limit (TerminalsAnswer.ClockSkewLimitMs):
	// the till dates its sales by a clock the store does not agree with, and they may go
	// to the wrong business day.
	ClockOff bool `json:"clock_off"`
	// ClockUnconfirmed: what the store heard says the till is behind by more than the limit,
	// but over less than --clock-behind-confirm: they may be messages held on their way (a
	// broker handing over what it kept while the store was away). The store says nothing of
	// the clock until its readings span that long.
	ClockUnconfirmed bool `json:"clock_unconfirmed,omitempty"`
	// ClockChecked is when the store last heard a message it measured the clock by, while
	// it has a figure or ClockUnconfirmed.
	ClockChecked time.Time `json:"clock_checked,omitzero"`
}

// Backlog is a terminal's backlog as it last reported it.
type Backlog struct {
	Events int64 `json:"events"`
	// Seq is the highest seq the terminal had given an event when it counted.
	Seq int64 `json:"seq"`
	// OldestMs is the age of the oldest event it holds, when it counted (At, its clock).
	OldestMs int64     `json:"oldest_age_ms"`
	At       time.Time `json:"at"`
	// Heard is when the store received the report; for a retained report the broker sent
	// again, when it first received it, or, new to it, the report's At.
	Heard time.Time `json:"heard"`
	// CatalogVersion is the version of the store's catalog the terminal held.
	CatalogVersion int64 `json:"catalog_version,omitempty"`
}

// BacklogRow is a terminal's last backlog report, with its oldest event's age now.
type BacklogRow struct {
	Backlog
	// OldestNowMs is the age of the oldest event the report counted at the answer's time: it
	// keeps growing from when the report was heard while the terminal reported a backlog.
	OldestNowMs int64 `json:"oldest_now_ms"`
}

// TerminalsAnswer is the answer of GET /v1/terminals, by terminal. Its times are in the
// store's zone.
type TerminalsAnswer struct {
	Now            time.Time `json:"now"`
	CatalogVersion int64     `json:"catalog_version"`
	// ClockSkewLimitMs is how far a till's clock may be from the store's before its row says
	// clock_off (--clock-skew-warn; 0: never).
	ClockSkewLimitMs int64 `json:"clock_skew_limit_ms"`
	// ClockBehindConfirmMs is how long a till's readings must span before its row says
	// clock_off for a clock behind (--clock-behind-confirm): until then, clock_unconfirmed.
	ClockBehindConfirmMs int64         `json:"clock_behind_confirm_ms"`
	Terminals            []TerminalRow `json:"terminals"`
}

// Limits are the store's live rate limits: accepted live events per window, per layer (the
// store, each terminal, and each terminal's scans, payments and refunds). PUT /v1/limits
// takes every field, each positive.
type Limits struct {
	WindowMs int64 `json:"window_ms"`
	Store    int64 `json:"store"`
	Terminal int64 `json:"terminal"`
	Scan     int64 `json:"scan"`
	Pay      int64 `json:"pay"`
	Refund   int64 `json:"refund"`
}

// LimitsAnswer is the answer of GET and PUT /v1/limits and POST /v1/promo: the limits the
// manager set (the defaults for those never set) and the promo running now (100: none).
type LimitsAnswer struct {
	Limits           Limits `json:"limits"`
	PromoPercent     int64  `json:"promo_percent"`
	PromoExpiresInMs int64  `json:"promo_expires_in_ms"`
}

// PromoRequest multiplies every limit by Percent/100 for a while (POST /v1/promo); it falls
// back to 100% by itself.
type PromoRequest struct {
	Percent int64  `json:"percent"`       // 100 (no promo) to 1000
	For     string `json:"for,omitempty"` // a Go duration up to 168h, default 2h
}

// UploadStatus is what the state of the store's uploader (hq-sync upload) says: how far HQ
// has the store's rows, for operators.
type UploadStatus struct {
	SentThrough int64 `json:"sent_through"` // highest hq_outbox id HQ acknowledged
	// Backlog is the ledger rows not yet acknowledged: those after SentThrough; while
	// LedgerBehindHQ, those after the last row of a sent batch the ledger still holds, all
	// of its rows when there is none (see backlogFrom).
	Backlog int64 `json:"backlog"`
	// LedgerBehindHQ: the ledger does not hold the last row HQ acknowledged (restored from an
	// older backup, or another ledger; hq-sync upload's ledger_behind_hq): nothing is sent from
	// it with this state.
	LedgerBehindHQ bool      `json:"ledger_behind_hq,omitempty"`
	Pending        string    `json:"pending,omitempty"`
	Attempts       int       `json:"attempts,omitempty"` // failed sends of the pending batch
	LastError      string    `json:"last_error,omitempty"`
	LastSentAt     time.Time `json:"last_sent_at,omitzero"`
	// Batches is how many batches HQ acknowledged to this state, across its batch series
	// (kv batches_sent).
	Batches int64 `json:"batches"`
	// ExceptionsWaiting is how many of the ledger's exception changes HQ has not
	// acknowledged (after kv exceptions_through).
	ExceptionsWaiting int64 `json:"exception_changes_waiting"`
	// MovesWaiting is how many of the ledger's stock adjustments HQ has not acknowledged
	// (after kv moves_through; all of them when the ledger's last is below it). They go
	// beside the batches, when none waits; an HQ without their route keeps them waiting.
	MovesWaiting int64 `json:"stock_moves_waiting"`
	// FlowsWaiting is how many of the ledger's flow exception changes HQ has not
	// acknowledged (after kv flows_through, as MovesWaiting).
	FlowsWaiting int64 `json:"flow_exception_changes_waiting"`
	// Declared is the last revision HQ acknowledged per business date.
	Declared map[string]int64 `json:"declared"`
	// TooLarge lists the business dates left undeclared because their declaration would
	// take more than hqwire.MaxDayParts parts.
	TooLarge []string `json:"too_large_to_declare,omitempty"`
	// InParts lists the days being declared in parts, by business date: HQ takes the
	// revision only once it has every part.
	InParts map[string]UploadParts `json:"declaring_in_parts,omitempty"`
}

// UploadParts is how far a declaration in parts has gone.
type UploadParts struct {
	Revision int64 `json:"revision"`
	Sent     int   `json:"sent"` // parts HQ acknowledged
	Parts    int   `json:"parts"`
}

// HQAnswer is the answer of GET /v1/hq: how far headquarters has the store's rows, from the
// state of the store's uploader.
type HQAnswer struct {
	State string `json:"state"` // the uploader's state file
	// Found is false while no uploader has run with State: nothing has gone to HQ.
	Found  bool          `json:"found"`
	Upload *UploadStatus `json:"upload,omitempty"`
}

// HistoryAnswer is the answer of GET /v1/charts/history: the store's samples of the last
// hour, oldest first, taken every EveryMs since the store-server started, as columns of
// one value per sample. A till's figure is null at a sample where it was not known to be
// online (what it held was unknown), or before the store heard of it.
type HistoryAnswer struct {
	EveryMs int64       `json:"every_ms"`
	Times   []time.Time `json:"times"` // in the store's zone
	Modes   []Mode      `json:"modes"`
	// Acks counts the up messages answered in the interval before each sample; the
	// quantiles of their times are null where there was none.
	Acks     []int64       `json:"acks"`
	AckP50Ms []*float64    `json:"ack_p50_ms"`
	AckP99Ms []*float64    `json:"ack_p99_ms"`
	Tills    []TillHistory `json:"tills"`
}

// TillHistory is one till's backlog at each sample of a HistoryAnswer: the events it held
// that the store had not acknowledged, and the age of the oldest of them (ms).
type TillHistory struct {
	Terminal string   `json:"terminal"`
	Events   []*int64 `json:"events"`
	OldestMs []*int64 `json:"oldest_ms"`
}

// SalesChart is the answer of GET /v1/charts/sales: the store's sales and takings (the
// sales' totals) per minute of a business date's store time, from the ledger, beside the
// same minutes of the last business date before it with a sale. Minutes run from the first
// minute of the date with a sale (or of the compared date, if it started earlier) to the
// current minute for today, or the last minute with a sale for an earlier date; every
// minute of them is listed, with zeros.
type SalesChart struct {
	BusinessDate string        `json:"business_date"`
	CompareDate  string        `json:"compare_date,omitempty"` // "" when no earlier date had a sale
	Minutes      []SalesMinute `json:"minutes"`
}

// SalesMinute is one minute of a SalesChart.
type SalesMinute struct {
	Minute         string    `json:"minute"` // HH:MM, store time
	Sales          int64     `json:"sales"`
	Takings        money.Fen `json:"takings"`
	CompareSales   int64     `json:"compare_sales"`
	CompareTakings money.Fen `json:"compare_takings"`
}
