package postgres

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/posgate/posgate/hq-sync/hqstore"
	"github.com/posgate/posgate/internal/hqwire"
)

// putFlow stores a flow exception's state unless HQ holds it at the same or a higher change
// number, or dropped its day (dropped_days: serve --retain): $1 store, $2 batch id,
// $3 received_ms, then the state's columns.
const putFlow = `INSERT INTO flow_exceptions (store, terminal, seq, change, kind, flow_given, flow_booked, held_by, at,
		business_date, resolved, resolved_at, resolution, batch_id, received_ms)
	SELECT $1::text, $4::text, $5::bigint, $6::bigint, $7::text, $8::bigint, $9::bigint, $10::text, $11::text,
		$12::text, $13::boolean, $14::text, $15::text, $2::text, $3::bigint
	WHERE NOT EXISTS (SELECT 1 FROM dropped_days WHERE business_date = $12::text)
	ON CONFLICT (store, terminal, seq) DO UPDATE SET change = EXCLUDED.change, kind = EXCLUDED.kind,
		flow_given = EXCLUDED.flow_given, flow_booked = EXCLUDED.flow_booked, held_by = EXCLUDED.held_by,
		at = EXCLUDED.at, business_date = EXCLUDED.business_date, resolved = EXCLUDED.resolved,
		resolved_at = EXCLUDED.resolved_at, resolution = EXCLUDED.resolution, batch_id = EXCLUDED.batch_id,
		received_ms = EXCLUDED.received_ms
	WHERE flow_exceptions.change < EXCLUDED.change`

// PutFlowExceptions implements hqstore.Storage, with the semantics of the SQLite engine. The
// upserts go in one round trip, in key order, so that two serve processes given states of
// the same flow exceptions lock them in the same order; each compares change numbers with
// the state a concurrent one committed.
func (s *Store) PutFlowExceptions(ctx context.Context, store, batchID string, xs []hqwire.FlowException, at time.Time) (int, error) {
	order := make([]*hqwire.FlowException, len(xs))
	for i := range xs {
		order[i] = &xs[i]
	}
	slices.SortFunc(order, func(x, y *hqwire.FlowException) int {
		return cmp.Or(cmp.Compare(x.Terminal, y.Terminal), cmp.Compare(x.Seq, y.Seq))
	})
	stored := 0
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		stored = 0
		var batch pgx.Batch
		for _, x := range order {
			batch.Queue(putFlow, store, batchID, at.UnixMilli(), x.Terminal, x.Seq, x.Change, x.Kind, x.FlowGiven,
				x.FlowBooked, x.HeldBy, hqstore.TimeText(x.At), x.BusinessDate, x.Resolved,
				hqstore.TimeText(x.ResolvedAt), x.Resolution)
		}
		res := tx.SendBatch(ctx, &batch)
		for _, x := range order {
			tag, err := res.Exec()
			if err != nil {
				res.Close()
				return fmt.Errorf("flow exception %s:%d: %w", x.Terminal, x.Seq, err)
			}
			stored += int(tag.RowsAffected())
		}
		return res.Close()
	})
	if err != nil {
		return 0, fmt.Errorf("put flow exceptions: %w", err)
	}
	return stored, nil
}

// FlowExceptions implements hqstore.Storage.
func (s *Store) FlowExceptions(ctx context.Context, date, store string, open bool) ([]hqstore.StoredFlowException, error) {
	q := `SELECT ` + hqstore.FlowColumns + ` FROM flow_exceptions WHERE true`
	var args []any
	if date != "" {
		args = append(args, date)
		q += ` AND business_date = $` + strconv.Itoa(len(args))
	}
	if store != "" {
		args = append(args, store)
		q += ` AND store = $` + strconv.Itoa(len(args))
	}
	if open {
		q += ` AND NOT resolved`
	}
	rows, err := s.pool.Query(ctx, q+` ORDER BY business_date, store, terminal, seq`, args...)
	if err != nil {
		return nil, fmt.Errorf("flow exceptions: %w", err)
	}
	defer rows.Close()
	return hqstore.ScanFlowExceptions("flow exceptions", rows)
}
