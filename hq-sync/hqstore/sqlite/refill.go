package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/posgate/posgate/hq-sync/hqstore"
	"github.com/posgate/posgate/internal/hqwire"
)

var _ hqstore.Refiller = (*Store)(nil)

// PutMoves implements hqstore.Refiller, in one transaction on the writer connection.
func (s *Store) PutMoves(ctx context.Context, store, batchID string, moves []hqwire.StockMove, at time.Time) (int, int64, error) {
	tx, err := s.db.W.BeginTx(ctx, nil)
	if err != nil {
		return 0, 0, fmt.Errorf("put moves: %w", err)
	}
	defer tx.Rollback()
	fresh := 0
	for i := range moves {
		m := &moves[i]
		held, found, err := scanMove(tx.QueryRowContext(ctx, `SELECT `+hqstore.MoveColumns+`
			FROM stock_moves WHERE store = ? AND id = ?`, store, m.ID))
		switch {
		case err != nil:
			return 0, 0, fmt.Errorf("put moves: %w", err)
		case found && !hqstore.SameMove(&held, m):
			return 0, 0, hqstore.ErrMoveConflict(store, m.ID)
		case found:
			continue
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO stock_moves (store, id, n, sku, delta, reason, at, counted,
			batch_id, received_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, store, m.ID, m.N, m.SKU, m.Delta, m.Reason,
			hqstore.MoveTime(m.At), m.Counted, batchID, at.UnixMilli()); err != nil {
			return 0, 0, fmt.Errorf("put moves: %w", err)
		}
		fresh++
	}
	var maxN sql.NullInt64
	if err := tx.QueryRowContext(ctx, `SELECT max(n) FROM stock_moves WHERE store = ?`, store).Scan(&maxN); err != nil {
		return 0, 0, fmt.Errorf("put moves: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return 0, 0, fmt.Errorf("put moves: commit: %w", err)
	}
	return fresh, maxN.Int64, nil
}

// scanMove reads one move of row; found is false for no row.
func scanMove(row interface{ Scan(...any) error }) (m hqwire.StockMove, found bool, err error) {
	m, err = hqstore.ScanMove(row.Scan)
	if errors.Is(err, sql.ErrNoRows) {
		return m, false, nil
	}
	return m, err == nil, err
}

// ExportMoves implements hqstore.Refiller: a range of stock_moves_order.
func (s *Store) ExportMoves(ctx context.Context, store string, after int64, limit int) ([]hqwire.StockMove, error) {
	rows, err := s.db.R.QueryContext(ctx, `SELECT `+hqstore.MoveColumns+` FROM stock_moves
		WHERE store = ? AND n > ? ORDER BY n LIMIT ?`, store, after, limit)
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

// ExportRows implements hqstore.Refiller: a range of rows_key.
func (s *Store) ExportRows(ctx context.Context, store, afterTerminal string, afterSeq int64, limit int) ([]hqwire.Row, error) {
	rows, err := s.db.R.QueryContext(ctx, `SELECT `+hqstore.ExportColumns+` FROM rows WHERE store = ? AND (terminal, seq) > (?, ?)
		ORDER BY terminal, seq LIMIT ?`, store, afterTerminal, afterSeq, limit)
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

// ExportDays implements hqstore.Refiller. The SQLite engine drops no day.
func (s *Store) ExportDays(ctx context.Context, store string) ([]hqwire.ExportDay, []string, error) {
	rows, err := s.db.R.QueryContext(ctx, `SELECT d.business_date, d.revision, d.closed_at,
		(SELECT count(*) FROM day_txns t WHERE t.business_date = d.business_date AND t.store = d.store)
		FROM days d WHERE d.store = ? ORDER BY d.business_date`, store)
	if err != nil {
		return nil, nil, fmt.Errorf("export days: %w", err)
	}
	defer rows.Close()
	var out []hqwire.ExportDay
	for rows.Next() {
		var d hqwire.ExportDay
		var closed string
		if err := rows.Scan(&d.BusinessDate, &d.Revision, &closed, &d.Txns); err != nil {
			return nil, nil, fmt.Errorf("export days: %w", err)
		}
		if d.ClosedAt, err = time.Parse(time.RFC3339Nano, closed); err != nil {
			return nil, nil, fmt.Errorf("export days: %s: closed_at %q: %w", d.BusinessDate, closed, err)
		}
		out = append(out, d)
	}
	return out, nil, rows.Err()
}

// ExportExceptions implements hqstore.Refiller: a range of the exceptions' key.
func (s *Store) ExportExceptions(ctx context.Context, store string, after hqstore.ExceptionKey, limit int) ([]hqwire.Exception, error) {
	rows, err := s.db.R.QueryContext(ctx, `SELECT `+hqstore.ExportExceptionColumns+` FROM exceptions
		WHERE store = ? AND (kind, terminal, seq, sku) > (?, ?, ?, ?) ORDER BY kind, terminal, seq, sku LIMIT ?`,
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
	rows, err := s.db.R.QueryContext(ctx, `SELECT `+hqstore.FlowColumns+` FROM flow_exceptions
		WHERE store = ? AND (terminal, seq) > (?, ?) ORDER BY terminal, seq LIMIT ?`, store, afterTerminal, afterSeq, limit)
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
