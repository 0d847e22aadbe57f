package ledger

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/posgate/posgate/internal/sqlitedb"
)

// GapPruned is the reason of a seq gap: the ledger lacked the events (it was restored from
// a backup made before the till sent them, or started empty) and the till, asked for them
// again, no longer held them.
const GapPruned = "pruned"

// SeqGap is a gap in a terminal's seq order the store took: the events From..To were sent
// to a ledger this one is not (the till holds them, and HQ may), and the event To+1 was
// accepted without them.
type SeqGap struct {
	Terminal string    `json:"-"`
	From     int64     `json:"from_seq"`
	To       int64     `json:"to_seq"`
	At       time.Time `json:"at,omitzero"` // when the store recorded it
	Reason   string    `json:"reason"`
}

const insGap = `INSERT OR IGNORE INTO seq_gaps (terminal, from_seq, to_seq, at_ms, reason) VALUES (?, ?, ?, ?, ?)`

// gaps stores the Gap of each record the commit wrote, in its transaction.
func (w *writer) gaps(ctx context.Context, recs []Record, out []Outcome, nowMs int64) error {
	for i := range recs {
		g, o := recs[i].Gap, &out[i]
		if g == nil || o.Err != nil || o.Duplicate || o.Undecided {
			continue
		}
		s, err := w.stmt(ctx, insGap)
		if err != nil {
			return err
		}
		res, err := s.ExecContext(ctx, recs[i].Terminal, g.From, g.To, nowMs, g.Reason)
		if err != nil {
			return fmt.Errorf("seq gap of %s: %w", recs[i].Terminal, err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		o.GapRecorded = n == 1
	}
	return nil
}

// SeqGaps returns the seq gaps the ledger recorded, by terminal, oldest first.
func (l *Ledger) SeqGaps(ctx context.Context) (map[string][]SeqGap, error) {
	out := map[string][]SeqGap{}
	err := sqlitedb.Each(ctx, l.db.R, `SELECT terminal, from_seq, to_seq, at_ms, reason FROM seq_gaps ORDER BY at_ms, terminal, from_seq`, nil,
		func(rows *sql.Rows) error {
			var g SeqGap
			var ms int64
			if err := rows.Scan(&g.Terminal, &g.From, &g.To, &ms, &g.Reason); err != nil {
				return err
			}
			g.At = time.UnixMilli(ms).In(l.loc)
			out[g.Terminal] = append(out[g.Terminal], g)
			return nil
		})
	if err != nil {
		return nil, fmt.Errorf("seq gaps: %w", err)
	}
	return out, nil
}
