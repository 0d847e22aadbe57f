package gate

import (
	"context"
	"errors"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// CheckProjection reads what the scripts check before a call (lua/proj.lua) without a call:
// the marker and its epoch, the stock hash's field count, and for the business date date
// its counter index, each listed terminal's counter hash and its flow counter. It returns
// the reason of the first loss (LostReason's), or "" when Redis holds the projection as
// the marker says. A store with no gate call for a while (a quiet hour, a paused load)
// finds a dropped key with it within one probe, not at its next sale. The caller keeps
// the gate's scripts from running meanwhile (ingest's loop runs both); the first reads are
// one transaction.
func (g *Gate) CheckProjection(ctx context.Context, date string) (string, error) {
	if err := checkDate(date); err != nil {
		return "", err
	}
	idx, flow := g.k.counterIndex(date), g.k.flow(date)
	tx := g.rdb.TxPipeline()
	mark := tx.HMGet(ctx, g.k.marker(), "epoch", "skus", idx, flow)
	hlen := tx.HLen(ctx, g.k.stock())
	members := tx.SMembers(ctx, idx)
	flowN := tx.Exists(ctx, flow)
	if _, err := tx.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return "", g.fail("check projection", err)
	}
	m := mark.Val()
	str := func(i int) (string, bool) { s, ok := m[i].(string); return s, ok }
	num := func(i int) (int64, bool) {
		s, ok := str(i)
		n, err := strconv.ParseInt(s, 10, 64)
		return n, ok && err == nil
	}
	epoch, ok := num(0)
	switch {
	case !ok:
		return LostMarkerMissing, nil
	case epoch != g.epoch.Load():
		return LostEpochMismatch, nil
	}
	if skus, ok := num(1); !ok || skus != hlen.Val() {
		return LostStockMissing, nil
	}
	if _, ok := str(3); ok && flowN.Val() == 0 {
		return LostFlowMissing, nil
	}
	n, tracked := num(2)
	if !tracked {
		return "", nil
	}
	terms := members.Val()
	if int64(len(terms)) != n {
		return LostCountersMissing, nil
	}
	if len(terms) == 0 {
		return "", nil
	}
	pipe := g.rdb.Pipeline()
	exists := make([]*redis.IntCmd, len(terms))
	for i, t := range terms {
		exists[i] = pipe.Exists(ctx, g.k.counters(date, t))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return "", g.fail("check projection", err)
	}
	for _, e := range exists {
		if e.Val() == 0 {
			return LostCountersMissing, nil
		}
	}
	return "", nil
}
