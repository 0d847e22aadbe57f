package uplink

import (
	"context"

	"github.com/posgate/posgate/internal/wire"
)

// onHQHeld records the last business day HQ holds whole, as the store says (wire.HQHeld):
// the outbox keeps acknowledged events of later days (outbox.Store.Prune).
func (u *Uplink) onHQHeld(ctx context.Context, payload []byte) {
	if len(payload) == 0 {
		return // the retained message cleared
	}
	h, err := wire.DecodeHQHeld(payload)
	if err != nil {
		u.log.Warn("bad hq message", "err", err)
		return
	}
	if h.Store != u.cfg.Store {
		u.log.Warn("hq message for another store", "store", h.Store)
		return
	}
	changed, err := u.store.SetHQThrough(context.WithoutCancel(ctx), h.Through)
	if err != nil {
		u.log.Error("record the days hq holds", "err", err)
		return
	}
	if changed {
		u.log.Info("hq holds the store's days", "through", h.Through)
	}
}
