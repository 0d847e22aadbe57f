package main

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"log/slog"
	"time"

	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/ledger"
	"github.com/posgate/posgate/store-server/settings"
	"github.com/posgate/posgate/store-server/uploadstate"
)

// hqHeld tells the store's tills the last business day HQ holds whole, with every earlier
// day the ledger holds (wire.HQHeld, retained): a till keeps its acknowledged events of
// later days, which refill the ledger should the store lose its disk. It reads HQ's
// acknowledgements from the uploader's state (uploadstate.ReadAcked) every pass and
// publishes when the day moves on (and on its first pass, so a reconnected broker that
// lost the retained message has it again within a pass).
type hqHeld struct {
	led   *ledger.Ledger
	state string // the uploader's state file
	store string
	pub   settings.Publisher
	log   *slog.Logger
	sent  string // the day last published
}

// hqHeldEvery is how often the store reads what HQ holds when its day sweep is off; else
// it reads it at the sweep's pace (--redis-sweep-every).
const hqHeldEvery = 30 * time.Second

func (h *hqHeld) run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if err := h.pass(ctx); err != nil && ctx.Err() == nil {
			h.log.Warn("telling the tills what hq holds", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (h *hqHeld) pass(ctx context.Context) error {
	days, err := h.led.OutboxDays(ctx, h.led.BusinessDate(h.led.Now()))
	if err != nil || len(days) == 0 {
		return err
	}
	acked, err := uploadstate.ReadAcked(ctx, h.state, h.led, days)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // no uploader has run: HQ holds nothing
	}
	if err != nil {
		return err
	}
	through := heldThrough(days, acked.Days)
	if through == "" || through == h.sent {
		return nil
	}
	body, err := json.Marshal(wire.HQHeld{V: wire.Version, Store: h.store, Through: through, At: time.Now()})
	if err != nil {
		return err
	}
	if err := h.pub.PublishRetained(wire.HQHeldTopic(h.store), body); err != nil {
		return err
	}
	h.sent = through
	h.log.Info("hq holds the store's days", "through", through)
	return nil
}

// heldThrough returns the last of days (oldest first) up to which every day is held ("":
// not the first).
func heldThrough(days []string, held map[string]bool) string {
	through := ""
	for _, d := range days {
		if !held[d] {
			break
		}
		through = d
	}
	return through
}
