package outbox

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/posgate/posgate/internal/wire"
)

// Sendable returns up to limit events to publish after seq after, in seq order: the pending
// ones, and, inside the window from..to that the store asked for again (wire.Resend; to 0:
// none), every event the outbox still holds, each marked as a replay of what the store
// answered it (Event.Replay). An event of the window that follows seqs the outbox no longer
// holds (pruned) says from which one (Event.LostFrom); so does the first event after the
// window when the window's end is gone.
func (s *Store) Sendable(ctx context.Context, after, from, to int64, limit int) ([]Event, error) {
	if to <= 0 || after >= to {
		return s.Pending(ctx, after, limit)
	}
	rows, err := s.readRows(ctx, `SELECT seq, kind, at, payload, hash, offline, created_ms, state,
		coalesce(ack_status, ''), coalesce(code, ''), flow_no, coalesce(store_date, '') FROM events
		WHERE seq > ? AND (state = 'pending' OR seq BETWEEN ? AND ?) ORDER BY seq LIMIT ?`, after, from, to, limit)
	if err != nil {
		return nil, fmt.Errorf("events to replay: %w", err)
	}
	defer rows.Close()
	var out []Event
	prev := after // the last seq accounted for
	for rows.Next() {
		var e Event
		var at, state, status, code, date string
		var created int64
		var flow sql.NullInt64
		if err := rows.Scan(&e.Seq, &e.Kind, &at, &e.Payload, &e.Hash, &e.Offline, &created, &state,
			&status, &code, &flow, &date); err != nil {
			return nil, fmt.Errorf("events to replay: %w", err)
		}
		e.Created = time.UnixMilli(created)
		if e.At, err = time.Parse(time.RFC3339Nano, at); err != nil {
			return nil, fmt.Errorf("event %d: bad time %q: %w", e.Seq, at, err)
		}
		// Seqs of the window between the last one accounted for and this one are gone.
		if lost := max(prev+1, from); lost < e.Seq && lost <= to {
			e.LostFrom = lost
		}
		prev = e.Seq
		switch state {
		case "acked":
			e.Replay = &wire.Replay{Status: wire.ReplayAccepted, FlowNo: flow.Int64, BusinessDate: date}
		case "parked":
			e.Replay = &wire.Replay{Status: wire.ReplayParked, Code: code}
		case "refused":
			e.Replay = &wire.Replay{Status: wire.ReplayRefused, Code: code}
		}
		if e.Replay != nil {
			e.Offline = true
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return out, nil
}
