package ledger

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/posgate/posgate/internal/sqlitedb"
	"github.com/posgate/posgate/store-server/client"
)

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
func (l *Ledger) Terminals(ctx context.Context) ([]client.TerminalSeen, error) {
	tx, err := l.db.R.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("terminals: %w", err)
	}
	defer tx.Rollback()

	// The distinct terminals, one index seek each.
	var out []client.TerminalSeen
	err = sqlitedb.Each(ctx, tx, selTerminals, nil, func(rows *sql.Rows) error {
		var ts client.TerminalSeen
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
			var g client.SeqGap
			var ms int64
			if err := rows.Scan(&g.From, &g.To, &ms, &g.Reason); err != nil {
				return err
			}
			g.At = time.UnixMilli(ms).In(l.loc)
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

		var hb client.Heartbeat
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
