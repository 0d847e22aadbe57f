package upload

import (
	"context"
	"fmt"
	"time"

	sclient "github.com/posgate/posgate/store-server/client"

	"github.com/posgate/posgate/store-server/ledger"
	"github.com/posgate/posgate/store-server/uploadstate"
)

// Status reads the uploader's progress; it may be called while Run runs.
func (u *Uploader) Status(ctx context.Context) (sclient.UploadStatus, error) {
	u.ledgerMu.RLock()
	defer u.ledgerMu.RUnlock()
	s, _, err := u.status(ctx)
	return s, err
}

// status is Status with ledgerMu held; it also returns the hq_outbox id the backlog counts
// after.
func (u *Uploader) status(ctx context.Context) (sclient.UploadStatus, int64, error) {
	kv, err := u.kv(ctx)
	if err != nil {
		return sclient.UploadStatus{}, 0, err
	}
	return uploadstate.Read(ctx, u.state.R, kv, u.ledger)
}

// progress prints catch-up lines: "sent 12000 rows, 88000 left, 9500 rows/s".
type progress struct {
	total     int64     // rows sent since the uploader started
	lastAt    time.Time // when the last line was printed (or counting started)
	lastTotal int64
	printed   bool
}

func (p *progress) sent(u *Uploader, ctx context.Context, b *batch) {
	if u.cfg.Progress == nil || b.rows == 0 {
		return
	}
	now := u.cfg.Now()
	if p.lastAt.IsZero() {
		p.lastAt = now
	}
	p.total += int64(b.rows)
	if now.Sub(p.lastAt) < time.Second {
		return
	}
	p.print(u, ctx, now)
}

// final prints the last line of a catch-up that printed any.
func (p *progress) final(u *Uploader) {
	if u.cfg.Progress == nil || !p.printed || p.total == p.lastTotal {
		return
	}
	now := u.cfg.Now()
	if now.Sub(p.lastAt) < time.Second {
		return
	}
	p.print(u, context.Background(), now)
}

func (p *progress) print(u *Uploader, ctx context.Context, now time.Time) {
	var left int64
	if kv, err := u.kv(ctx); err == nil {
		_ = u.ledger.ViewHQ(ctx, func(r *ledger.HQReader) error {
			left, _ = r.OutboxCountAfter(ctx, atoi(kv["sent_through"]))
			return nil
		})
	}
	rate := float64(p.total-p.lastTotal) / now.Sub(p.lastAt).Seconds()
	fmt.Fprintf(u.cfg.Progress, "sent %d rows, %d left, %.0f rows/s\n", p.total, left, rate)
	p.lastAt, p.lastTotal, p.printed = now, p.total, true
}
