package ingest

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/posgate/posgate/store-server/client"
	"github.com/posgate/posgate/store-server/gate"
	"github.com/posgate/posgate/store-server/ledger"
)

// DefaultAuditEvery is how often the drift audit runs by default.
const DefaultAuditEvery = 10 * time.Second

// auditGap is the least time between two audits that a refusal for stock asks for: a SKU
// sold out that cashiers keep scanning would otherwise have the store read its stock and
// counters every second.
const auditGap = 5 * time.Second

// Reasons of a drift found by the audit (those of the gate's marker check are
// gate.LostReason's).
const (
	DriftAuditStock    = "audit_stock"    // Redis's stock differs from the ledger's
	DriftAuditCounters = "audit_counters" // Redis's counters of a date differ from the ledger's
)

// DriftReasons are every reason of a drift: the gate's marker check's, then the audit's.
var DriftReasons = []string{gate.LostMarkerMissing, gate.LostEpochMismatch, gate.LostStockMissing,
	gate.LostCountersMissing, gate.LostFlowMissing, DriftAuditStock, DriftAuditCounters}

// drift counts and logs a projection Redis no longer holds; a rebuild follows.
func (in *Ingest) drift(reason, detail string) {
	at := in.cfg.Now()
	in.count(func(s *client.Stats) {
		s.Drift++
		if s.DriftReasons == nil {
			s.DriftReasons = map[string]int64{}
		}
		s.DriftReasons[reason]++
		s.LastDrift, s.LastDriftAt = reason, at.UTC()
	})
	in.log.Warn("redis no longer holds the ledger's projection; rebuilding it", "reason", reason, "detail", detail)
}

// execGate runs the gate on ops. A call that finds the projection lost (gate.LostReason)
// changed nothing: the store rebuilds from the ledger at once and runs the same ops again,
// once. Only the group in hand waits; the ones before it reach the ledger first.
func (in *Ingest) execGate(ctx context.Context, ops []gate.Op) ([]gate.Verdict, time.Duration, error) {
	start := time.Now()
	verdicts, err := in.cfg.Gate.Exec(ctx, ops)
	reason, lost := gate.LostReason(err)
	if !lost {
		return verdicts, time.Since(start), err
	}
	in.drift(reason, err.Error())
	in.setMode(client.ModeRebuilding)
	in.tryRebuild(ctx)
	if in.Mode() != client.ModeRedis {
		return nil, time.Since(start), err
	}
	in.log.Warn("projection rebuilt; the group is decided again", "reason", reason, "took", time.Since(start))
	start = time.Now()
	verdicts, err = in.cfg.Gate.Exec(ctx, ops)
	return verdicts, time.Since(start), err
}

// checkMarker reads, at each probe in Redis mode, whether Redis still holds the projection
// as its marker says (gate.CheckProjection), on every date the marker tracks: a store with
// no sale for a while finds a dropped key within a probe (a second), not at its next sale,
// and a dropped key of a past day not at that day's next late sale. It runs on the loop, so no
// gate call runs meanwhile; proj keeps stock adjustments out.
func (in *Ingest) checkMarker(ctx context.Context) {
	if in.Mode() != client.ModeRedis {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	in.proj.Lock()
	reason, date, err := in.cfg.Gate.CheckProjection(cctx)
	in.proj.Unlock()
	if err != nil || reason == "" {
		return // a Redis that does not answer is found by the next gate call
	}
	detail := "found by the marker check while no gate call ran"
	if date != "" {
		detail += ", on business date " + date
	}
	in.drift(reason, detail)
	start := time.Now()
	in.setMode(client.ModeRebuilding)
	in.tryRebuild(ctx)
	if in.Mode() == client.ModeRedis {
		in.log.Warn("projection rebuilt", "reason", reason, "took", time.Since(start))
	}
}

// audit compares Redis's stock and counters with the ledger's, figure by figure (not their
// history), while no group is between the gate and the ledger and no adjustment is on its
// way; a difference is counted, logged and rebuilt. It runs in Redis mode only.
func (in *Ingest) audit(ctx context.Context) {
	in.auditDue, in.auditedAt = false, time.Now()
	if in.Mode() != client.ModeRedis {
		return
	}
	in.committing.Wait()
	reason, detail, err := in.compare(ctx)
	if err != nil {
		in.log.Warn("drift audit could not read", "err", err)
		return
	}
	if reason == "" {
		return
	}
	in.drift(reason, detail)
	start := time.Now()
	in.setMode(client.ModeRebuilding)
	in.tryRebuild(ctx)
	if in.Mode() == client.ModeRedis {
		in.log.Warn("projection rebuilt", "reason", reason, "took", time.Since(start))
	}
}

// compare returns the first difference between Redis and the ledger, if any: in the stock,
// today's counters, and the counters of one other date the projection marker tracks within
// the rebuild's window, the next one after the last audit's, in turn. Late offline sales
// keep changing the days before today (and a till's clock ahead, the days after), so each
// of them is compared every few audits, at the cost of one date's read more per audit, not
// of the whole window's. A day whose keys left Redis (the day sweep) is not compared: its
// counters there are not the ledger's (ledger.LeftRedis).
func (in *Ingest) compare(ctx context.Context) (reason, detail string, err error) {
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	in.proj.Lock()
	defer in.proj.Unlock()
	red, err := in.cfg.Gate.Stock(actx)
	if err != nil {
		return "", "", err
	}
	led, err := in.cfg.Ledger.Stock(actx)
	if err != nil {
		return "", "", err
	}
	if d := stockDiff(led, red); d != "" {
		return DriftAuditStock, d, nil
	}
	now := in.cfg.Now()
	today := in.cfg.Ledger.BusinessDate(now)
	if reason, detail, err := in.compareCounters(actx, today); err != nil || reason != "" {
		return reason, detail, err
	}
	dates, err := in.cfg.Gate.TrackedDates(actx)
	if err != nil {
		return "", "", err
	}
	oldest := in.cfg.Ledger.BusinessDate(now.AddDate(0, 0, -ledger.SnapshotDays))
	dates = slices.DeleteFunc(dates, func(d string) bool {
		return d == today || d < oldest || in.cfg.Ledger.LeftRedis(d)
	})
	if len(dates) == 0 {
		return "", "", nil
	}
	next := dates[0]
	if i := slices.IndexFunc(dates, func(d string) bool { return d > in.auditedDate }); i >= 0 {
		next = dates[i]
	}
	in.auditedDate = next
	return in.compareCounters(actx, next)
}

// compareCounters compares the counters of date in Redis and in the ledger.
func (in *Ingest) compareCounters(ctx context.Context, date string) (reason, detail string, err error) {
	rc, err := in.cfg.Gate.Counters(ctx, date)
	if err != nil {
		return "", "", err
	}
	lc, err := in.cfg.Ledger.Totals(ctx, date)
	if err != nil {
		return "", "", err
	}
	// The day sweep may have let the date go from Redis since it was chosen: its keys are
	// deleted only after the ledger records so.
	if d := countersDiff(lc, rc); d != "" && !in.cfg.Ledger.LeftRedis(date) {
		return DriftAuditCounters, date + ": " + d, nil
	}
	return "", "", nil
}

// stockDiff names the SKUs whose stock differs (at most five), or returns "".
func stockDiff(led, red map[string]int64) string {
	var out []string
	for _, sku := range slices.Sorted(maps.Keys(led)) {
		if r, ok := red[sku]; !ok || r != led[sku] {
			out = append(out, fmt.Sprintf("%s ledger %d redis %s", sku, led[sku], present(r, ok)))
		}
	}
	for _, sku := range slices.Sorted(maps.Keys(red)) {
		if _, ok := led[sku]; !ok {
			out = append(out, fmt.Sprintf("%s ledger none redis %d", sku, red[sku]))
		}
	}
	return firstFive(out)
}

// countersDiff names the terminals whose counters differ (at most five), or returns "".
func countersDiff(led, red map[string]client.Counters) string {
	var out []string
	terms := slices.Sorted(maps.Keys(led))
	for t := range red {
		if _, ok := led[t]; !ok {
			terms = append(terms, t)
		}
	}
	for _, t := range terms {
		l, r := led[t], red[t]
		if !l.Equal(r) {
			out = append(out, fmt.Sprintf("%s ledger %d sales %s, redis %d sales %s", t, l.Sales, l.Amount, r.Sales, r.Amount))
		}
	}
	return firstFive(out)
}

func present(n int64, ok bool) string {
	if !ok {
		return "missing"
	}
	return fmt.Sprint(n)
}

func firstFive(s []string) string {
	if len(s) > 5 {
		s = append(s[:5], fmt.Sprintf("and %d more", len(s)-5))
	}
	return strings.Join(s, "; ")
}
