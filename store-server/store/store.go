// Package store holds the store-server's domain types shared by its adapters: the Redis gate
// (package gate), the SQLite ledger (package ledger), ingest and the manager API. It has no
// I/O and must not import any adapter. The counters of a day, which the manager API answers,
// are store-server/client's Counters.
package store

import (
	"time"

	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/client"
)

// Actions of the layered rate limiter (the third layer, after store and terminal).
const (
	ActionScan   = "scan"
	ActionPay    = "pay"
	ActionRefund = "refund"
)

// Limits are the live rate limits of a store: accepted live events per Window, per layer.
// The promo coefficient (percent, 100 = ×1) multiplies every limit while it lasts. The
// manager API takes and answers them as client.Limits, of the same fields; these carry the
// defaults and the lookup by action.
type Limits struct {
	WindowMs int64 `json:"window_ms"`
	Store    int64 `json:"store"`
	Terminal int64 `json:"terminal"`
	Scan     int64 `json:"scan"`
	Pay      int64 `json:"pay"`
	Refund   int64 `json:"refund"`
}

// DefaultLimits is the policy of a store that set none: per second, store 1000, terminal 100,
// scan 20, pay 5, refund 3.
var DefaultLimits = Limits{WindowMs: 1000, Store: 1000, Terminal: 100, Scan: 20, Pay: 5, Refund: 3}

// Policy is what the manager set for the store's live limits: the limits (a zero field is
// the default's) and a promo of PromoPercent until PromoUntil. The ledger keeps it, and every
// rebuild gives it to Redis, whose copy is lost with its data.
type Policy struct {
	Limits       Limits
	PromoPercent int64     // 100: no promo
	PromoUntil   time.Time // when the promo ends by itself
}

// Promo returns the promo percent at now (100 once it has ended) and how long it has left.
func (p Policy) Promo(now time.Time) (percent int64, left time.Duration) {
	if p.PromoPercent <= 0 || p.PromoPercent == 100 || !now.Before(p.PromoUntil) {
		return 100, 0
	}
	return p.PromoPercent, p.PromoUntil.Sub(now)
}

// Effective returns the limits in force at now, as the gate script computes them: every
// limit times the promo, rounded down; a zero field takes the default's.
func (p Policy) Effective(now time.Time) Limits {
	l := p.Limits.OrDefault()
	pct, _ := p.Promo(now)
	for _, f := range []*int64{&l.Store, &l.Terminal, &l.Scan, &l.Pay, &l.Refund} {
		*f = *f * pct / 100 // each at most 1e9 (gate.MaxLimit), pct at most 1e4
	}
	return l
}

// Degraded returns the limits of the in-process limiter that stands in for Redis's at now:
// half of Effective, rounded up, in the same window.
func (p Policy) Degraded(now time.Time) Limits {
	l := p.Effective(now)
	for _, f := range []*int64{&l.Store, &l.Terminal, &l.Scan, &l.Pay, &l.Refund} {
		*f = (*f + 1) / 2
	}
	return l
}

// OrDefault returns l with every zero field taken from DefaultLimits.
func (l Limits) OrDefault() Limits {
	d := DefaultLimits
	for _, f := range []struct{ v, d *int64 }{
		{&l.WindowMs, &d.WindowMs}, {&l.Store, &d.Store}, {&l.Terminal, &d.Terminal},
		{&l.Scan, &d.Scan}, {&l.Pay, &d.Pay}, {&l.Refund, &d.Refund},
	} {
		if *f.v <= 0 {
			*f.v = *f.d
		}
	}
	return l
}

// Action returns the limit of an action.
func (l Limits) Action(a string) int64 {
	switch a {
	case ActionScan:
		return l.Scan
	case ActionPay:
		return l.Pay
	case ActionRefund:
		return l.Refund
	}
	return 0
}

// Snapshot is what the ledger computes for rebuilding the Redis projection: stock per SKU,
// counters per business date and terminal, and the highest flow number per business date.
type Snapshot struct {
	Stock    map[string]int64
	Counters map[string]map[string]client.Counters // date → terminal → counters
	MaxFlow  map[string]int64                      // date → highest flow number in the ledger
}

// Line is a quantity of a SKU.
type Line struct {
	SKU string
	Qty int64
}

// SaleByMethod returns what a sale took per payment method, cash net of change, in fen; the
// amounts add up to the sale's total. Redis counters, the ledger and the terminal's own day
// totals all count money this way.
func SaleByMethod(p *wire.SalePayload) map[string]money.Fen {
	out := make(map[string]money.Fen, len(p.Payments))
	for _, pm := range p.Payments {
		out[pm.Method] += pm.Amount
	}
	if p.Change > 0 {
		out[wire.MethodCash] -= p.Change
	}
	return out
}
