package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/posgate/posgate/hq-sync/hqstore"
	"github.com/posgate/posgate/internal/hqwire"
	"github.com/posgate/posgate/internal/perr"
)

var _ hqstore.Refiller = (*Store)(nil)

// PutMoves implements hqstore.Refiller: one transaction under the store's lock (lockStore),
// so that two serve processes given the same moves store them once.
func (s *Store) PutMoves(ctx context.Context, store, batchID string, moves []hqwire.StockMove, at time.Time) (int, int64, error) {
	fresh := 0
	var maxN *int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		fresh = 0
		if _, err := tx.Exec(ctx, lockStore, store); err != nil {
			return err
		}
		for i := range moves {
			m := &moves[i]
			held, found, err := scanMove(tx.QueryRow(ctx, `SELECT `+hqstore.MoveColumns+`
				FROM stock_moves WHERE store = $1 AND id = $2`, store, m.ID))
			switch {
			case err != nil:
				return err
			case found && !hqstore.SameMove(&held, m):
				return hqstore.ErrMoveConflict(store, m.ID)
			case found:
				continue
			}
			if _, err := tx.Exec(ctx, `INSERT INTO stock_moves (store, id, n, sku, delta, reason, at, counted,
				batch_id, received_ms) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`, store, m.ID, m.N, m.SKU,
				m.Delta, m.Reason, hqstore.MoveTime(m.At), m.Counted, batchID, at.UnixMilli()); err != nil {
				return err
			}
			fresh++
		}
		return tx.QueryRow(ctx, `SELECT max(n) FROM stock_moves WHERE store = $1`, store).Scan(&maxN)
	})
	if err != nil {
		var pe *perr.Error
		if errors.As(err, &pe) { // the move conflict
			return 0, 0, err
		}
		return 0, 0, fmt.Errorf("put moves: %w", err)
	}
	if maxN == nil {
		return fresh, 0, nil
	}
	return fresh, *maxN, nil
}

// scanMove reads one move of row; found is false for no row.
func scanMove(row pgx.Row) (m hqwire.StockMove, found bool, err error) {
	m, err = hqstore.ScanMove(row.Scan)
	if errors.Is(err, pgx.ErrNoRows) {
		return m, false, nil
	}
	return m, err == nil, err
}

// ExportMoves implements hqstore.Refiller: a range of stock_moves_order.
func (s *Store) ExportMoves(ctx context.Context, store string, after int64, limit int) ([]hqwire.StockMove, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+hqstore.MoveColumns+` FROM stock_moves
		WHERE store = $1 AND n > $2 ORDER BY n LIMIT $3`, store, after, limit)
	if err != nil {
		return nil, fmt.Errorf("export moves: %w", err)
	}
	defer rows.Close()
	var out []hqwire.StockMove
	for rows.Next() {
		m, _, err := scanMove(rows)
		if err != nil {
			return nil, fmt.Errorf("export moves: %w", err)
		}
		out = append(out, m)
	}
	return out, rows.Err()
}

// ExportRows implements hqstore.Refiller: the store's rows of every day's partition, merged
// in key order.
func (s *Store) ExportRows(ctx context.Context, store, afterTerminal string, afterSeq int64, limit int) ([]hqwire.Row, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+hqstore.ExportColumns+` FROM rows WHERE store = $1 AND (terminal, seq) > ($2, $3)
		ORDER BY terminal, seq LIMIT $4`, store, afterTerminal, afterSeq, limit)
	if err != nil {
		return nil, fmt.Errorf("export rows: %w", err)
	}
	defer rows.Close()
	var out []hqwire.Row
	for rows.Next() {
		r, err := hqstore.ScanExportRow(rows.Scan)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// ExportDays implements hqstore.Refiller: the store's declarations, and the days retention
// dropped (dropped_days).
func (s *Store) ExportDays(ctx context.Context, store string) ([]hqwire.ExportDay, []string, error) {
	rows, err := s.pool.Query(ctx, `SELECT d.business_date, d.revision, d.closed_at,
		(SELECT count(*) FROM day_txns t WHERE t.business_date = d.business_date AND t.store = d.store)
		FROM days d WHERE d.store = $1 ORDER BY d.business_date`, store)
	if err != nil {
		return nil, nil, fmt.Errorf("export days: %w", err)
	}
	var out []hqwire.ExportDay
	for rows.Next() {
		var d hqwire.ExportDay
		var closed string
		if err := rows.Scan(&d.BusinessDate, &d.Revision, &closed, &d.Txns); err != nil {
			rows.Close()
			return nil, nil, fmt.Errorf("export days: %w", err)
		}
		if d.ClosedAt, err = time.Parse(time.RFC3339Nano, closed); err != nil {
			rows.Close()
			return nil, nil, fmt.Errorf("export days: %s: closed_at %q: %w", d.BusinessDate, closed, err)
		}
		out = append(out, d)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("export days: %w", err)
	}
	dr, err := s.pool.Query(ctx, `SELECT business_date FROM dropped_days ORDER BY 1`)
	if err != nil {
		return nil, nil, fmt.Errorf("export days: dropped: %w", err)
	}
	dropped, err := pgx.CollectRows(dr, pgx.RowTo[string])
	if err != nil {
		return nil, nil, fmt.Errorf("export days: dropped: %w", err)
	}
	return out, dropped, nil
}

// ExportExceptions implements hqstore.Refiller: a range of the exceptions' key.
func (s *Store) ExportExceptions(ctx context.Context, store string, after hqstore.ExceptionKey, limit int) ([]hqwire.Exception, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+hqstore.ExportExceptionColumns+` FROM exceptions
		WHERE store = $1 AND (kind, terminal, seq, sku) > ($2, $3, $4, $5) ORDER BY kind, terminal, seq, sku LIMIT $6`,
		store, after.Kind, after.Terminal, after.Seq, after.SKU, limit)
	if err != nil {
		return nil, fmt.Errorf("export exceptions: %w", err)
	}
	defer rows.Close()
	var out []hqwire.Exception
	for rows.Next() {
		x, err := hqstore.ScanExportException(rows.Scan)
		if err != nil {
			return nil, err
		}
		out = append(out, x)
	}
	return out, rows.Err()
}

// ExportFlows implements hqstore.Refiller: a range of the flow exceptions' key.
func (s *Store) ExportFlows(ctx context.Context, store, afterTerminal string, afterSeq int64, limit int) ([]hqwire.FlowException, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+hqstore.FlowColumns+` FROM flow_exceptions
		WHERE store = $1 AND (terminal, seq) > ($2, $3) ORDER BY terminal, seq LIMIT $4`, store, afterTerminal, afterSeq, limit)
	if err != nil {
		return nil, fmt.Errorf("export flow exceptions: %w", err)
	}
	defer rows.Close()
	xs, err := hqstore.ScanFlowExceptions("export flow exceptions", rows)
	if err != nil {
		return nil, err
	}
	return hqstore.ExportedFlows(xs), nil
}
