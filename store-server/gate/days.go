package gate

import (
	"context"
	"slices"
)

// ExpireDay deletes the store's keys of a business date in one transaction: the counters
// of every terminal of terminals and of the date's counter index, the index and the flow
// counter. The store calls it for a day HQ has acknowledged, once the ledger records the
// day out of Redis (an event of the day arriving later takes its flow number from the
// ledger): Redis then holds the days not yet at HQ, not the store's years. terminals are
// those the ledger holds sales or refunds of on the date: a terminal whose first event of
// the day the gate took after the index was read is deleted all the same.
func (g *Gate) ExpireDay(ctx context.Context, date string, terminals []string) error {
	if err := checkDate(date); err != nil {
		return err
	}
	indexed, err := g.rdb.SMembers(ctx, g.k.counterIndex(date)).Result()
	if err != nil {
		return g.fail("read counter index", err)
	}
	all := slices.Compact(slices.Sorted(slices.Values(slices.Concat(indexed, terminals))))
	keys := make([]string, 0, len(all)+2)
	for _, t := range all {
		keys = append(keys, g.k.counters(date, t))
	}
	keys = append(keys, g.k.counterIndex(date), g.k.flow(date))
	pipe := g.rdb.TxPipeline()
	for i := 0; i < len(keys); i += 500 {
		pipe.Del(ctx, keys[i:min(i+500, len(keys))]...)
	}
	// The marker no longer tracks the date: its keys' absence is what it should be.
	pipe.HDel(ctx, g.k.marker(), g.k.counterIndex(date), g.k.flow(date))
	_, err = pipe.Exec(ctx)
	return g.fail("expire day "+date, err)
}
