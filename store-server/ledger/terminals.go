package ledger

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/posgate/posgate/internal/sqlitedb"
	"github.com/posgate/posgate/internal/wire"
)

// TerminalSeen is what the ledger last heard from one terminal.
type TerminalSeen struct {
	Terminal string `json:"terminal"`
	// The last event recorded (by seq, final or not), its business time and when the store
	// received it.
	LastSeq      int64          `json:"last_seq"`
	LastKind     wire.Kind      `json:"last_kind"`
	LastStatus   wire.AckStatus `json:"last_status"`
	LastAt       time.Time      `json:"last_at,omitzero"`
	LastReceived time.Time      `json:"last_received,omitzero"`
	// Heartbeat is the terminal's last accepted heartbeat, if any: its backlog as the
	// terminal counted it then.
	Heartbeat *Heartbeat `json:"heartbeat,omitempty"`
	// Parked counts the terminal's parked events no manager has resolved.
	Parked int64 `json:"parked"`
	// SeqGaps are the gaps in its seq order the store took (seq_gaps: after a restore from
	// a backup, or in a ledger that held none of its events), oldest first: events the till
	// sent to a ledger this one is not.
	SeqGaps []SeqGap `json:"seq_gaps,omitempty"`
}

// Heartbeat is a terminal's report of its own backlog.
type Heartbeat struct {
	Seq      int64     `json:"seq"`
	At       time.Time `json:"at"`       // when the terminal took the figures
	Received time.Time `json:"received"` // when the store received them
	wire.HeartbeatPayload
}

// Terminals' queries; each seeks in an index keyed by terminal (TestTerminalsSeek).
const (
	// selTerminals lists the distinct terminals, one seek each.
	selTerminals = `WITH RECURSIVE t(terminal) AS (
			SELECT min(terminal) FROM events
			UNION ALL
			SELECT (SELECT min(terminal) FROM events WHERE terminal > t.terminal) FROM t WHERE t.terminal IS NOT NULL)
		SELECT terminal FROM t WHERE terminal IS NOT NULL`
	selLastEvent = `SELECT seq, kind, status, at, received_ms FROM events
		WHERE terminal = ? ORDER BY seq DESC LIMIT 1`
	selLastHeartbeat = `SELECT seq, at, received_ms, payload FROM events INDEXED BY events_heartbeats
		WHERE terminal = ? AND kind = 'heartbeat' AND status = 'accepted' ORDER BY seq DESC LIMIT 1`
	selParked = `SELECT count(*) FROM parked WHERE terminal = ? AND resolved = 0`
	selGaps   = `SELECT from_seq, to_seq, at_ms, reason FROM seq_gaps WHERE terminal = ? ORDER BY from_seq`
)

// Terminals returns, for every terminal the ledger holds an event of, the last event, the
// last heartbeat and the parked count, by terminal id. Each is one seek per terminal, so
// the cost grows with the number of terminals, not of events.
func (l *Ledger) Terminals(ctx context.Context) ([]TerminalSeen, error) {
	tx, err := l.db.R.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("terminals: %w", err)
	}
	defer tx.Rollback()

	// The distinct terminals, one index seek each.
	var out []TerminalSeen
	err = sqlitedb.Each(ctx, tx, selTerminals, nil, func(rows *sql.Rows) error {
		var ts TerminalSeen
		if err := rows.Scan(&ts.Terminal); err != nil {
			return err
		}
		out = append(out, ts)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("terminals: %w", err)
	}
	for i := range out {
		ts := &out[i]
		if err := tx.QueryRowContext(ctx, selParked, ts.Terminal).Scan(&ts.Parked); err != nil {
			return nil, fmt.Errorf("terminal %s parked: %w", ts.Terminal, err)
		}
		err = sqlitedb.Each(ctx, tx, selGaps, []any{ts.Terminal}, func(rows *sql.Rows) error {
			var g SeqGap
			var ms int64
			if err := rows.Scan(&g.From, &g.To, &ms, &g.Reason); err != nil {
				return err
			}
			g.Terminal, g.At = ts.Terminal, time.UnixMilli(ms).In(l.loc)
			ts.SeqGaps = append(ts.SeqGaps, g)
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("terminal %s seq gaps: %w", ts.Terminal, err)
		}
		var at string
		var recv int64
		err := tx.QueryRowContext(ctx, selLastEvent, ts.Terminal).
			Scan(&ts.LastSeq, &ts.LastKind, &ts.LastStatus, &at, &recv)
		if err != nil {
			return nil, fmt.Errorf("terminal %s: %w", ts.Terminal, err)
		}
		ts.LastAt, ts.LastReceived = l.parseTime(at), time.UnixMilli(recv).In(l.loc)

		var hb Heartbeat
		var payload []byte
		err = tx.QueryRowContext(ctx, selLastHeartbeat, ts.Terminal).
			Scan(&hb.Seq, &at, &recv, &payload)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			continue
		case err != nil:
			return nil, fmt.Errorf("terminal %s heartbeat: %w", ts.Terminal, err)
		}
		if json.Unmarshal(payload, &hb.HeartbeatPayload) != nil {
			continue // accepted heartbeats were decoded strictly; this cannot be one
		}
		hb.At, hb.Received = l.parseTime(at), time.UnixMilli(recv).In(l.loc)
		ts.Heartbeat = &hb
	}
	return out, nil
}

// CatalogVersionHeld returns the highest catalog version a terminal's last heartbeat reports
// (0 if none does).
func (l *Ledger) CatalogVersionHeld(ctx context.Context) (int64, error) {
	seen, err := l.Terminals(ctx)
	if err != nil {
		return 0, err
	}
	var v int64
	for _, ts := range seen {
		if ts.Heartbeat != nil {
			v = max(v, ts.Heartbeat.CatalogVersion)
		}
	}
	return v, nil
}
