package ingest

import (
	"context"
	"time"

	"github.com/posgate/posgate/internal/perr"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/client"
	"github.com/posgate/posgate/store-server/gate"
	"github.com/posgate/posgate/store-server/store"
)

// Mode returns the current gate mode.
func (in *Ingest) Mode() client.Mode {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.mode
}

func (in *Ingest) setMode(m client.Mode) {
	in.mu.Lock()
	old := in.mode
	in.mode = m
	in.mu.Unlock()
	if old != m {
		in.log.Warn("gate mode", "from", old, "to", m)
	}
}

// Rebuild asks ingest to pause, rebuild the Redis projection from the ledger, and resume
// (on +switch-master).
func (in *Ingest) Rebuild() {
	select {
	case in.kick <- struct{}{}:
	default:
	}
}

// tryRebuild rebuilds the Redis projection from the ledger and closes the breaker; if Redis
// is unreachable it leaves (or puts) the gate in degraded mode.
func (in *Ingest) tryRebuild(ctx context.Context) {
	// A group the gate decided must reach the ledger before the snapshot is taken, or the
	// rebuilt projection would miss it.
	in.committing.Wait()
	if err := in.rebuild(ctx); err != nil {
		if ctx.Err() == nil && perr.As(err).Code != gate.CodeEvictionPolicy { // checkEviction said it
			in.log.Warn("redis unavailable, selling on the ledger alone", "err", err)
		}
		return
	}
	in.failures = 0
	in.count(func(s *client.Stats) { s.Rebuilds++ })
}

// rebuild rebuilds the projection and sets the mode it leaves (redis, or degraded on
// failure) before any stock adjustment can follow it.
func (in *Ingest) rebuild(ctx context.Context) error {
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := in.cfg.Gate.Ping(rctx); err != nil { // unreachable: adjustments need not wait
		in.setMode(client.ModeDegraded)
		return err
	}
	if err := in.checkEviction(rctx); err != nil {
		in.setMode(client.ModeDegraded)
		return err
	}
	in.proj.Lock()
	defer in.proj.Unlock()
	snap, err := in.cfg.Ledger.Snapshot(rctx)
	if err == nil {
		err = in.cfg.Gate.Rebuild(rctx, snap)
	}
	if err == nil {
		err = in.restorePolicy(rctx)
	}
	if err != nil {
		in.setMode(client.ModeDegraded)
		return err
	}
	in.setMode(client.ModeRedis)
	return nil
}

// checkEviction refuses a Redis whose maxmemory-policy may evict any key (allkeys-*): the
// store sells on the ledger alone until it is changed, and says why in its stats and log.
// Every rebuild runs it (the start, a failover, a restart, a probe of degraded mode), as the
// master behind the address may now be another server. A policy it cannot read (CONFIG and
// INFO both denied) lets the store proceed, and the log says so; the marker check and the
// drift audit still catch what Redis drops.
func (in *Ingest) checkEviction(ctx context.Context) error {
	e, err := in.cfg.Gate.CheckEviction(ctx)
	if perr.KindOf(err) == perr.Unavailable {
		return err
	}
	said := e.Policy + "|" + e.Why
	if err != nil {
		said = err.Error()
	}
	if said != in.evictionSaid {
		in.evictionSaid = said
		switch {
		case err != nil:
			in.log.Error("the gate refuses this Redis", "err", err)
		case e.Policy == "":
			in.log.Warn("redis maxmemory-policy cannot be read; proceeding: the projection marker and the drift audit "+
				"catch keys Redis drops, but an allkeys-* policy is not ruled out", "why", e.Why)
		case e.Why != "":
			in.log.Info("redis maxmemory-policy", "policy", e.Policy, "note", e.Why)
		}
	}
	refused := ""
	if err != nil {
		refused = err.Error()
	}
	in.count(func(s *client.Stats) { s.GateRefused = refused })
	return err
}

// restorePolicy gives Redis the manager's live limits and promo from the ledger (the
// defaults if none was set), which an empty Redis has lost. The caller holds proj.
func (in *Ingest) restorePolicy(ctx context.Context) error {
	p, _, err := in.cfg.Ledger.Policy(ctx)
	if err != nil {
		return err
	}
	if err := in.cfg.Gate.SetPolicy(ctx, p, in.cfg.Now()); err != nil {
		return err
	}
	in.limiter.set(p)
	return nil
}

// gateFailed counts a gate failure; enough of them open the breaker.
func (in *Ingest) gateFailed(err error) {
	in.failures++
	in.count(func(s *client.Stats) { s.GateErrors++ })
	in.log.Warn("gate call failed", "err", err, "consecutive", in.failures)
	if in.failures >= in.cfg.BreakerErrors {
		in.setMode(client.ModeDegraded)
	}
}

// degraded decides an event without Redis: the local limiter for live events, and for a
// live sale a ledger-only stock check in the commit.
func (in *Ingest) degraded(x *item, op gate.Op, now time.Time) {
	if x.live {
		action := map[gate.Kind]string{gate.OpScan: store.ActionScan, gate.OpSale: store.ActionPay, gate.OpRefund: store.ActionRefund}[op.Kind]
		if retry, ok := in.limiter.allow(now, op.Terminal, action); !ok {
			x.rec.Status, x.rec.Code, x.rec.Final = wire.AckRateLimited, "rate_limited", false
			x.rec.Message = "the store is busy; try again shortly"
			x.ack.RetryAfterMs = max(1, retry.Milliseconds())
			return
		}
	}
	x.rec.CheckStock = x.live && op.Kind == gate.OpSale
	x.rec.FlowNo = 0 // allocated by the ledger
}
