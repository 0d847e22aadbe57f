package ingest

import (
	"context"
	"time"

	"github.com/posgate/posgate/store-server/client"
	"github.com/posgate/posgate/store-server/gate"
	"github.com/posgate/posgate/store-server/store"
)

// Limits returns the store's live limits and promo: the ledger's, or the defaults if the
// manager never set any.
func (in *Ingest) Limits(ctx context.Context) (store.Policy, error) {
	if p, known := in.limiter.known(); known {
		return p, nil
	}
	p, _, err := in.cfg.Ledger.Policy(ctx)
	return p, err
}

// SetLimits records the manager's live limits (a zero field: the default's) in the ledger,
// then has the in-process limiter and Redis hold to them: Redis at once in Redis mode,
// otherwise through the rebuild to come.
func (in *Ingest) SetLimits(ctx context.Context, l store.Limits) (store.Policy, error) {
	if err := gate.CheckLimits(l); err != nil {
		return store.Policy{}, err
	}
	return in.setPolicy(ctx, func(p *store.Policy) { p.Limits = l })
}

// SetPromo records a promo of percent (100: none) for ttl in the ledger and has the
// in-process limiter and Redis hold to it, as SetLimits does.
func (in *Ingest) SetPromo(ctx context.Context, percent int64, ttl time.Duration) (store.Policy, error) {
	if ttl <= 0 {
		ttl = gate.DefaultPromoTTL
	}
	if err := gate.CheckPromo(percent, ttl); err != nil {
		return store.Policy{}, err
	}
	until := time.UnixMilli(in.cfg.Now().Add(ttl).UnixMilli()) // as the ledger keeps it
	return in.setPolicy(ctx, func(p *store.Policy) {
		p.PromoPercent, p.PromoUntil = percent, until
		if percent == 100 {
			p.PromoUntil = time.Time{}
		}
	})
}

// setPolicy changes the ledger's policy (the defaults if none was set) and has the
// projection follow, ordered with rebuilds as AdjustStock is: a rebuild reads the policy
// after this has written it.
func (in *Ingest) setPolicy(ctx context.Context, change func(*store.Policy)) (store.Policy, error) {
	in.proj.RLock()
	defer in.proj.RUnlock()
	in.policyMu.Lock() // one change at a time: each starts from the one before
	defer in.policyMu.Unlock()
	p, _, err := in.cfg.Ledger.Policy(ctx)
	if err != nil {
		return p, err
	}
	change(&p)
	if err := in.cfg.Ledger.SetPolicy(ctx, p); err != nil {
		return p, err
	}
	in.limiter.set(p)
	if in.Mode() == client.ModeRedis {
		if err := in.cfg.Gate.SetPolicy(ctx, p, in.cfg.Now()); err != nil {
			in.log.Warn("redis limits not set; rebuilding", "err", err)
			in.Rebuild()
		}
	}
	return p, nil
}

// AdjustStock books a stock adjustment of the manager's (ledger.Adjust: idempotent by id)
// and has Redis follow it: at once when the gate is in Redis mode, otherwise through the
// rebuild to come, whose snapshot is taken after this returns. It returns the ledger's new
// quantity and whether this call booked the adjustment (false: the id was booked before).
func (in *Ingest) AdjustStock(ctx context.Context, id, sku string, delta int64, reason string) (qty int64, applied bool, err error) {
	in.proj.RLock()
	defer in.proj.RUnlock()
	qty, applied, err = in.cfg.Ledger.Adjust(ctx, id, sku, delta, reason)
	if err == nil && applied {
		in.follow(ctx, id, sku, delta)
	}
	return qty, applied, err
}

// follow has Redis take a stock change the ledger booked under id, at once in Redis mode;
// otherwise, or if Redis fails it, the rebuild to come brings it. The caller holds proj
// from before its ledger write.
func (in *Ingest) follow(ctx context.Context, id, sku string, delta int64) {
	if in.Mode() != client.ModeRedis {
		return
	}
	if _, _, err := in.cfg.Gate.Adjust(ctx, id, sku, delta); err != nil {
		if reason, lost := gate.LostReason(err); lost {
			in.drift(reason, err.Error())
		} else {
			in.log.Warn("redis stock adjust failed; rebuilding", "id", id, "err", err)
		}
		in.Rebuild()
	}
}

// CountStock books a shelf count of the manager's (ledger.Count: the ledger books counted
// minus its own quantity, in the transaction that books it; idempotent by id) and has Redis
// follow it as AdjustStock does, by the delta the ledger booked: Redis's stock is a
// projection of the ledger's, so the difference is never worked out from it. It returns
// the delta booked, the ledger's new quantity and whether this call booked the count.
func (in *Ingest) CountStock(ctx context.Context, id, sku string, counted int64) (delta, qty int64, applied bool, err error) {
	in.proj.RLock()
	defer in.proj.RUnlock()
	delta, qty, applied, err = in.cfg.Ledger.Count(ctx, id, sku, counted)
	// A count of what the ledger holds (delta 0) moves nothing, in Redis either.
	if err == nil && applied && delta != 0 {
		in.follow(ctx, id, sku, delta)
	}
	return delta, qty, applied, err
}
