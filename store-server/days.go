package main

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/posgate/posgate/store-server/gate"
	"github.com/posgate/posgate/store-server/ledger"
	"github.com/posgate/posgate/store-server/uploadstate"
)

// daySweep lets go from Redis the keys of the business days HQ holds whole (a store trades
// for years on one Redis: its days must not pile up there). Every pass it
//
//  1. deletes the keys of the days the ledger counts as touched (ledger.TouchedDays): those
//     marked out of Redis at an earlier pass, and those an event arrived for since their
//     keys went (the gate made them again), and confirms each (ledger.KeysGone);
//  2. marks out of Redis (ledger.ExpireFromRedis) each closed day whose keys are there and
//     that HQ holds whole, as the uploader's state records it (uploadstate.ReadAcked);
//  3. moves the days out of Redis older than keep to their month's archive (archive).
//
// A day is marked at one pass and its keys deleted at the next: a rebuild that read its
// snapshot before the mark, and set the day's keys after the deletion, would otherwise
// leave them for good. Once marked, an event of the day takes its flow number from the
// ledger and touches the day.
type daySweep struct {
	led   *ledger.Ledger
	gate  *gate.Gate
	state string // the uploader's state file
	keep  int    // business days the ledger keeps at hand (archive); 0: every day
	log   *slog.Logger
}

// run sweeps now and then every until ctx is done.
func (d *daySweep) run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if err := d.pass(ctx); err != nil && ctx.Err() == nil {
			d.log.Warn("letting closed days go from redis", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// pass is one sweep.
func (d *daySweep) pass(ctx context.Context) error {
	if err := d.redis(ctx); err != nil {
		return err
	}
	return d.archive(ctx)
}

// redis lets the keys of the days HQ holds whole go from Redis.
func (d *daySweep) redis(ctx context.Context) error {
	touched, err := d.led.TouchedDays(ctx)
	if err != nil {
		return err
	}
	for _, date := range slices.Sorted(maps.Keys(touched)) {
		totals, err := d.led.Totals(ctx, date)
		if err != nil {
			return err
		}
		if err := d.gate.ExpireDay(ctx, date, slices.Collect(maps.Keys(totals))); err != nil {
			return err // Redis away: the day stays touched, the next pass tries again
		}
		if err := d.led.KeysGone(ctx, date, touched[date]); err != nil {
			return err
		}
		d.log.Info("a closed day's keys left redis", "business_date", date)
	}
	today := d.led.BusinessDate(d.led.Now())
	days, err := d.led.DaysInRedis(ctx, today)
	if err != nil || len(days) == 0 {
		return err
	}
	acked, err := uploadstate.ReadAcked(ctx, d.state, d.led, days)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // no uploader has run: HQ holds nothing
	}
	if err != nil {
		return err
	}
	for _, date := range days {
		if !acked.Days[date] {
			continue
		}
		if _, err := d.led.ExpireFromRedis(ctx, date); err != nil {
			return err
		}
	}
	return nil
}
