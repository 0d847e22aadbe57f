package gate

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// CheckProjection reads what the scripts check before a call (lua/proj.lua) without a call:
// the marker and its epoch, the stock hash's field count, and for every business date the
// marker tracks (today, and the days Redis still holds that HQ has not acknowledged, within
// the rebuild's window) its counter index, each listed terminal's counter hash and its flow
// counter. It returns the reason of the first loss (LostReason's) and the date it was found
// on ("" for the marker and the stock), or "" when Redis holds the projection as the marker
// says. A store with no gate call for a while (a quiet hour, a paused load) finds a dropped
// key with it within one probe, not at its next sale; a past day's, not at the next late
// sale of that day. The caller keeps the gate's scripts from running meanwhile (ingest's
// loop runs both); the marker and the stock hash are read in one transaction, then the
// dates' keys. The day sweep may expire a past day meanwhile (ExpireDay: its keys and the
// marker's fields in one transaction), so a date's keys found missing count as lost only if
// the marker, read again, still tracks them.
func (g *Gate) CheckProjection(ctx context.Context) (reason, date string, err error) {
	tx := g.rdb.TxPipeline()
	mark := tx.HGetAll(ctx, g.k.marker())
	hlen := tx.HLen(ctx, g.k.stock())
	if _, err := tx.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return "", "", g.fail("check projection", err)
	}
	m := mark.Val()
	num := func(field string) (int64, bool) {
		s, ok := m[field]
		n, err := strconv.ParseInt(s, 10, 64)
		return n, ok && err == nil
	}
	epoch, ok := num("epoch")
	switch {
	case !ok:
		return LostMarkerMissing, "", nil
	case epoch != g.epoch.Load():
		return LostEpochMismatch, "", nil
	}
	if skus, ok := num("skus"); !ok || skus != hlen.Val() {
		return LostStockMissing, "", nil
	}
	dates := g.markerDates(m)
	if len(dates) == 0 {
		return "", "", nil
	}
	type day struct {
		members *redis.StringSliceCmd
		flow    *redis.IntCmd
	}
	days := make([]day, len(dates))
	pipe := g.rdb.Pipeline()
	for i, d := range dates {
		days[i] = day{members: pipe.SMembers(ctx, g.k.counterIndex(d)), flow: pipe.Exists(ctx, g.k.flow(d))}
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return "", "", g.fail("check projection", err)
	}
	// lost reports reason on date d unless the marker no longer tracks field (the day
	// expired since it was read).
	lost := func(reason, d, field string) (string, string, error) {
		tracked, err := g.rdb.HExists(ctx, g.k.marker(), field).Result()
		if err != nil {
			return "", "", g.fail("check projection", err)
		}
		if !tracked {
			return "", "", nil
		}
		return reason, d, nil
	}
	type counter struct {
		date   string
		exists *redis.IntCmd
	}
	var counters []counter
	pipe = g.rdb.Pipeline()
	for i, d := range dates {
		if _, tracked := m[g.k.flow(d)]; tracked && days[i].flow.Val() == 0 {
			return lost(LostFlowMissing, d, g.k.flow(d))
		}
		n, tracked := num(g.k.counterIndex(d))
		if !tracked {
			continue
		}
		terms := days[i].members.Val()
		if int64(len(terms)) != n {
			return lost(LostCountersMissing, d, g.k.counterIndex(d))
		}
		for _, t := range terms {
			counters = append(counters, counter{d, pipe.Exists(ctx, g.k.counters(d, t))})
		}
	}
	if len(counters) == 0 {
		return "", "", nil
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return "", "", g.fail("check projection", err)
	}
	for _, c := range counters {
		if c.exists.Val() == 0 {
			return lost(LostCountersMissing, c.date, g.k.counterIndex(c.date))
		}
	}
	return "", "", nil
}

// TrackedDates returns, in order, the business dates the projection marker tracks: those
// whose counter index or flow counter Redis must hold (CheckProjection checks them).
func (g *Gate) TrackedDates(ctx context.Context) ([]string, error) {
	m, err := g.rdb.HGetAll(ctx, g.k.marker()).Result()
	if err != nil {
		return nil, g.fail("read projection marker", err)
	}
	return g.markerDates(m), nil
}

// markerDates returns, in order, the dates the marker's fields m track: by their counter
// index (a count) or their flow counter.
func (g *Gate) markerDates(m map[string]string) []string {
	idxPrefix, flowPrefix := g.k.counterIndex(""), g.k.flow("")
	var dates []string
	for field := range m {
		if d, ok := strings.CutPrefix(field, idxPrefix); ok {
			dates = append(dates, d)
		} else if d, ok := strings.CutPrefix(field, flowPrefix); ok {
			dates = append(dates, d)
		}
	}
	slices.Sort(dates)
	return slices.Compact(dates)
}
