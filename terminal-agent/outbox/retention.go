package outbox

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/posgate/posgate/internal/wire"
)

// Retention. An acknowledged event is what refills a store's ledger lost with its disk
// (wire.Resend), so the outbox keeps it until HQ holds its business day (the store says
// which days, wire.HQHeld) and its minimum retention has passed (Prune's before); an event
// whose day HQ never acknowledges goes once Config.KeepUnheld has passed, so that the outbox
// stays bounded when the store's uploader does not run.

// DefaultKeepUnheld bounds how long an acknowledged event whose day HQ does not hold is
// kept, unless Config.KeepUnheld says otherwise.
const DefaultKeepUnheld = 30 * 24 * time.Hour

// KVHQThrough is the last business day HQ holds whole, as the store last said (YYYYMMDD as
// a number; 0: none yet).
const KVHQThrough = "hq_through"

// SetHQThrough records the last business day HQ holds whole (wire.HQHeld) if it is later
// than the one held, and reports whether it was.
func (s *Store) SetHQThrough(ctx context.Context, day string) (bool, error) {
	t, err := time.Parse(wire.BusinessDate, day)
	if err != nil {
		return false, fmt.Errorf("hq day %q: %w", day, err)
	}
	n, _ := strconv.ParseInt(t.Format("20060102"), 10, 64)
	res, err := s.db.W.ExecContext(ctx, `INSERT INTO kv (k, v) VALUES (?, ?)
		ON CONFLICT (k) DO UPDATE SET v = excluded.v WHERE excluded.v > kv.v`, KVHQThrough, n)
	if err != nil {
		return false, fmt.Errorf("set hq day: %w", err)
	}
	changed, err := res.RowsAffected()
	return changed > 0, err
}

// HQThrough returns the last business day HQ holds whole, as the store last said ("" if
// it has not).
func (s *Store) HQThrough(ctx context.Context) (string, error) {
	n, err := s.KV(ctx, KVHQThrough)
	if err != nil || n == 0 {
		return "", err
	}
	d := strconv.FormatInt(n, 10)
	if len(d) != 8 {
		return "", fmt.Errorf("hq day %d is not YYYYMMDD", n)
	}
	return strings.Join([]string{d[:4], d[4:6], d[6:]}, "-"), nil
}

// Held is what the outbox keeps of events the store has acknowledged or refused.
type Held struct {
	Events int64
	Oldest time.Time // when the oldest of them was acknowledged (zero if none)
	// HQThrough is the last business day HQ holds whole ("" if the store has not said).
	HQThrough string
}

// Held returns the figures of the events the outbox keeps after their delivery.
func (s *Store) Held(ctx context.Context) (Held, error) {
	var h Held
	var oldest sql.NullInt64
	if err := s.readRow(ctx, `SELECT count(*), min(done_ms) FROM events WHERE state IN ('acked', 'refused')`).
		Scan(&h.Events, &oldest); err != nil {
		return h, fmt.Errorf("held events: %w", err)
	}
	if oldest.Valid {
		h.Oldest = time.UnixMilli(oldest.Int64)
	}
	var err error
	h.HQThrough, err = s.HQThrough(ctx)
	return h, err
}

// pruneEvents deletes the acknowledged and refused events delivered before before whose
// business day HQ holds, and those delivered before the bound for events HQ does not hold
// (Config.KeepUnheld), whatever their day.
func (s *Store) pruneEvents(ctx context.Context, before time.Time) (int64, error) {
	keep := s.cfg.KeepUnheld
	if keep <= 0 {
		keep = DefaultKeepUnheld
	}
	bound := min(before.UnixMilli(), s.now().Add(-keep).UnixMilli())
	through, err := s.HQThrough(ctx)
	if err != nil {
		return 0, err
	}
	res, err := s.db.W.ExecContext(ctx, `DELETE FROM events WHERE state IN ('acked', 'refused')
		AND ((done_ms < ? AND business_date <= ?) OR done_ms < ?)`, before.UnixMilli(), through, bound)
	if err != nil {
		return 0, fmt.Errorf("prune events: %w", err)
	}
	return res.RowsAffected()
}
