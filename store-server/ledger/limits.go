package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/posgate/posgate/store-server/store"
)

// Policy returns the live limits and promo the manager last set, and false if none was ever
// set (then the defaults).
func (l *Ledger) Policy(ctx context.Context) (store.Policy, bool, error) {
	var p store.Policy
	var until int64
	err := l.db.R.QueryRowContext(ctx, `SELECT window_ms, store, terminal, scan, pay, refund,
		promo_percent, promo_until_ms FROM live_limits WHERE id = 1`).Scan(&p.Limits.WindowMs,
		&p.Limits.Store, &p.Limits.Terminal, &p.Limits.Scan, &p.Limits.Pay, &p.Limits.Refund,
		&p.PromoPercent, &until)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return store.Policy{PromoPercent: 100}, false, nil
	case err != nil:
		return p, false, fmt.Errorf("read live limits: %w", err)
	}
	p.PromoUntil = time.UnixMilli(until)
	return p, true, nil
}

// SetPolicy records the live limits and promo; the caller has checked them.
func (l *Ledger) SetPolicy(ctx context.Context, p store.Policy) error {
	if p.PromoPercent <= 0 {
		p.PromoPercent = 100
	}
	err := l.write(ctx, func(w *writer) error {
		return w.exec(ctx, `INSERT INTO live_limits (id, window_ms, store, terminal, scan, pay, refund,
				promo_percent, promo_until_ms, set_at) VALUES (1, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (id) DO UPDATE SET window_ms = excluded.window_ms, store = excluded.store,
				terminal = excluded.terminal, scan = excluded.scan, pay = excluded.pay,
				refund = excluded.refund, promo_percent = excluded.promo_percent,
				promo_until_ms = excluded.promo_until_ms, set_at = excluded.set_at`,
			p.Limits.WindowMs, p.Limits.Store, p.Limits.Terminal, p.Limits.Scan, p.Limits.Pay, p.Limits.Refund,
			p.PromoPercent, p.PromoUntil.UnixMilli(), l.now().UTC().Format(time.RFC3339Nano))
	})
	if err != nil {
		return fmt.Errorf("record live limits: %w", err)
	}
	return nil
}
