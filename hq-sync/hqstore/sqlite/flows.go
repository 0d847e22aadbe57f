package sqlite

import (
	"context"
	"fmt"
	"time"

	"github.com/posgate/posgate/hq-sync/hqstore"
	"github.com/posgate/posgate/internal/hqwire"
)

// putFlow stores a flow exception's state unless HQ holds it at the same or a higher change
// number: ?1 store, ?2 batch id, ?3 received_ms, then the state's columns.
const putFlow = `INSERT INTO flow_exceptions (store, terminal, seq, change, kind, flow_given, flow_booked, held_by, at,
		business_date, resolved, resolved_at, resolution, batch_id, received_ms)
	VALUES (?1, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?2, ?3)
	ON CONFLICT (store, terminal, seq) DO UPDATE SET change = excluded.change, kind = excluded.kind,
		flow_given = excluded.flow_given, flow_booked = excluded.flow_booked, held_by = excluded.held_by,
		at = excluded.at, business_date = excluded.business_date, resolved = excluded.resolved,
		resolved_at = excluded.resolved_at, resolution = excluded.resolution, batch_id = excluded.batch_id,
		received_ms = excluded.received_ms
	WHERE flow_exceptions.change < excluded.change`

// PutFlowExceptions implements hqstore.Storage.
func (s *Store) PutFlowExceptions(ctx context.Context, store, batchID string, xs []hqwire.FlowException, at time.Time) (int, error) {
	tx, err := s.db.W.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("put flow exceptions: %w", err)
	}
	defer tx.Rollback()
	st, err := tx.PrepareContext(ctx, putFlow)
	if err != nil {
		return 0, fmt.Errorf("put flow exceptions: %w", err)
	}
	defer st.Close()
	stored := 0
	for i := range xs {
		x := &xs[i]
		res, err := st.ExecContext(ctx, store, batchID, at.UnixMilli(), x.Terminal, x.Seq, x.Change, x.Kind,
			x.FlowGiven, x.FlowBooked, x.HeldBy, hqstore.TimeText(x.At), x.BusinessDate, x.Resolved,
			hqstore.TimeText(x.ResolvedAt), x.Resolution)
		if err != nil {
			return 0, fmt.Errorf("put flow exception %s:%d: %w", x.Terminal, x.Seq, err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return 0, fmt.Errorf("put flow exception %s:%d: %w", x.Terminal, x.Seq, err)
		}
		stored += int(n)
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("put flow exceptions: %w", err)
	}
	return stored, nil
}

// FlowExceptions implements hqstore.Storage.
func (s *Store) FlowExceptions(ctx context.Context, date, store string, open bool) ([]hqstore.StoredFlowException, error) {
	q := `SELECT ` + hqstore.FlowColumns + ` FROM flow_exceptions WHERE 1`
	var args []any
	if date != "" {
		q += ` AND business_date = ?`
		args = append(args, date)
	}
	if store != "" {
		q += ` AND store = ?`
		args = append(args, store)
	}
	if open {
		q += ` AND NOT resolved`
	}
	rows, err := s.db.R.QueryContext(ctx, q+` ORDER BY business_date, store, terminal, seq`, args...)
	if err != nil {
		return nil, fmt.Errorf("flow exceptions: %w", err)
	}
	defer rows.Close()
	return hqstore.ScanFlowExceptions("flow exceptions", rows)
}
