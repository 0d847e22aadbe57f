package main

import (
	"context"
	"errors"
	"io/fs"
	"strconv"
	"strings"
	"time"

	"github.com/posgate/posgate/store-server/uploadstate"
)

// parseKeep reads --keep ("90d", "90" or "0") into keepDays, and reports whether it is one.
func (m *Main) parseKeep() bool {
	n, err := strconv.Atoi(strings.TrimSuffix(m.Keep, "d"))
	if err != nil || n < 0 || n > 100*366 {
		return false
	}
	m.keepDays = n
	return true
}

// archive moves the days older than keep business days that HQ holds whole and whose keys
// left Redis (the sweep's first part) to their month's archive (ledger.Archive): a day's
// HQ rows must all be at or below what HQ acknowledged, as the uploader's state says.
func (d *daySweep) archive(ctx context.Context) error {
	if d.keep <= 0 {
		return nil
	}
	before := d.led.BusinessDate(d.led.Now().AddDate(0, 0, -d.keep))
	acked, err := uploadstate.ReadAcked(ctx, d.state, d.led, nil)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // no uploader has run: HQ holds nothing
	}
	if err != nil {
		return err
	}
	if acked.Through == 0 {
		return nil
	}
	moved, err := d.led.Archive(ctx, before, acked.Through)
	for _, a := range moved {
		d.log.Info("days moved to the archive", "file", a.File, "days", strings.Join(a.Days, ","), "events", a.Events)
	}
	if err != nil {
		return err
	}
	return d.compact(ctx)
}

// quietFor is how long the store must have received no sale or refund for the ledger's
// VACUUM (ledger.Compact): commits wait while it runs.
const quietFor = time.Hour

// compact gives the ledger's free pages (the archived days' rows) back to the file system,
// once a catch-up freed a quarter of it and the store is quiet.
func (d *daySweep) compact(ctx context.Context) error {
	quiet, err := d.led.QuietSince(ctx, d.led.Now().Add(-quietFor))
	if err != nil {
		return err
	}
	start := time.Now()
	c, err := d.led.Compact(ctx, quiet)
	if c.Vacuumed {
		d.log.Info("the ledger gave pages back", "before_bytes", c.Before, "after_bytes", c.After,
			"took", time.Since(start).Round(time.Millisecond))
	}
	return err
}
