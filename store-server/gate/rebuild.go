package gate

import (
	"context"
	"maps"
	"slices"
	"strconv"

	"github.com/posgate/posgate/internal/perr"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/store"
	"github.com/redis/go-redis/v9"
)

// rebuildAttempts bounds how often Rebuild reads the counter indexes again when a
// terminal's first event of a day arrives while it runs (the store should be paused).
const rebuildAttempts = 5

// Rebuild sets the store's projection from a ledger snapshot in one script, atomically:
// stock exactly (SKUs not in snap are deleted); for every business date in snap.Counters,
// each terminal's counters exactly, and the counters of terminals not in snap deleted
// (other dates are left alone); every flow counter in snap.MaxFlow raised to
// max(current, snap.MaxFlow[date]), never lowered, so that flow numbers never repeat.
// It writes the projection marker with a new epoch, which the other scripts check
// (lua/proj.lua); idempotency records are kept under the epoch they were made in, so that
// an event whose effects the rebuild discarded is decided again. Idempotency records and
// limiter windows are left as they are. It then loads every
// script, so that the first ops after a failover do not pay for NOSCRIPT.
func (g *Gate) Rebuild(ctx context.Context, snap store.Snapshot) error {
	dates := slices.Sorted(maps.Keys(snap.Counters))
	for d := range snap.MaxFlow {
		if _, ok := snap.Counters[d]; !ok {
			dates = append(dates, d)
		}
	}
	for _, d := range dates {
		if err := checkDate(d); err != nil {
			return err
		}
		if snap.MaxFlow[d] < 0 {
			return perr.New(perr.Invalid, CodeInvalid, "snapshot flow number of %s is negative", d)
		}
		for t, c := range snap.Counters[d] {
			if !wire.ValidID(t) {
				return perr.New(perr.Invalid, CodeInvalid, "snapshot counters of %s name terminal %q", d, t)
			}
			for m := range c.ByMethod {
				if m == "" {
					return perr.New(perr.Invalid, CodeInvalid, "snapshot counters of %s/%s have an empty method", d, t)
				}
			}
			for m := range c.RefundByMethod {
				if m == "" {
					return perr.New(perr.Invalid, CodeInvalid, "snapshot counters of %s/%s have an empty method", d, t)
				}
			}
		}
	}
	for sku := range snap.Stock {
		if !validSKU(sku) {
			return perr.New(perr.Invalid, CodeInvalid, "snapshot stock names sku %q", sku)
		}
	}

	before, err := runID(g.rdb.Info(ctx, "server"))
	if err != nil {
		return g.fail("rebuild", err)
	}
	var epoch int64
	for range rebuildAttempts {
		var keys []string
		var args []any
		if keys, args, err = g.rebuildCall(ctx, snap, dates); err != nil {
			return err
		}
		epoch, err = rebuildScript.Run(ctx, g.rdb, keys, args...).Int64()
		if !redis.HasErrorPrefix(err, "STALE") {
			break
		}
	}
	if err != nil {
		return g.fail("rebuild", err)
	}
	g.epoch.Store(epoch)
	// The projection is the server's that took it: the one before the script and after it,
	// or none (it changed meanwhile: the next rebuild does it again).
	after, err := runID(g.rdb.Info(ctx, "server"))
	if err != nil {
		return g.fail("rebuild", err)
	}
	if after != before {
		return g.staleErr()
	}
	g.server.Store(&after)
	g.stale.Store(false)
	return g.loadScripts(ctx)
}

// rebuildCall reads the counter indexes of the snapshot's dates and builds the rebuild
// script's call (see lua/rebuild.lua for the layout).
func (g *Gate) rebuildCall(ctx context.Context, snap store.Snapshot, dates []string) ([]string, []any, error) {
	idx := map[string]*redis.StringSliceCmd{}
	if len(snap.Counters) > 0 {
		pipe := g.rdb.Pipeline()
		for d := range snap.Counters {
			idx[d] = pipe.SMembers(ctx, g.k.counterIndex(d))
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, nil, g.fail("read counter indexes", err)
		}
	}
	keys := []string{g.k.stock(), g.k.marker()}
	args := []any{len(snap.Stock)}
	for _, sku := range slices.Sorted(maps.Keys(snap.Stock)) {
		args = append(args, sku, strconv.FormatInt(snap.Stock[sku], 10))
	}
	args = append(args, len(dates))
	for _, d := range dates {
		terms, has := snap.Counters[d]
		var extra []string
		if has {
			for _, t := range idx[d].Val() {
				if _, ok := terms[t]; !ok {
					extra = append(extra, t)
				}
			}
		}
		hasArg := "0"
		if has {
			hasArg = "1"
		}
		keys = append(keys, g.k.flow(d), g.k.counterIndex(d))
		args = append(args, strconv.FormatInt(snap.MaxFlow[d], 10), hasArg, len(terms), len(extra))
		for _, t := range slices.Sorted(maps.Keys(terms)) {
			fields := counterFields(terms[t])
			keys = append(keys, g.k.counters(d, t))
			args = append(args, t, len(fields)/2)
			args = append(args, fields...)
		}
		for _, t := range extra {
			keys = append(keys, g.k.counters(d, t))
			args = append(args, t)
		}
	}
	return keys, args, nil
}
