package ledger

import (
	"context"
	"database/sql"
	"fmt"
	"sort"

	"github.com/posgate/posgate/internal/hqwire"
	"github.com/posgate/posgate/internal/sqlitedb"
	"github.com/posgate/posgate/internal/wire"
)

// Flow exceptions as hq-sync upload sends them to HQ: every change of one (booked, resolved)
// is a row of flow_exception_changes (schema/store/005_flow_exception_changes.sql, kept by
// triggers), and the uploader sends the state each changed one holds now.

// FlowExceptionsAfter reads up to limit changes of the ledger's flow exceptions after change
// number afterID, in order, and returns the state each flow exception they name holds now,
// with Change its last change read, ordered by Change, and the last change number read
// (afterID when there is none).
func (r *HQReader) FlowExceptionsAfter(ctx context.Context, afterID int64, limit int) (
	xs []hqwire.FlowException, last int64, err error) {
	last = afterID
	byKey := map[string]int{}
	err = sqlitedb.Each(ctx, r.tx, `SELECT id, terminal, seq FROM flow_exception_changes WHERE id > ?
		ORDER BY id LIMIT ?`, []any{afterID, limit}, func(rows *sql.Rows) error {
		var x hqwire.FlowException
		if err := rows.Scan(&x.Change, &x.Terminal, &x.Seq); err != nil {
			return err
		}
		last = x.Change
		k := wire.Key(x.Terminal, x.Seq)
		if i, ok := byKey[k]; ok {
			xs[i].Change = x.Change // changed again: one state, sent under its last change
			return nil
		}
		byKey[k] = len(xs)
		xs = append(xs, x)
		return nil
	})
	if err != nil {
		return nil, 0, fmt.Errorf("flow exception changes: %w", err)
	}
	for i := range xs {
		x := &xs[i]
		f, err := r.l.scanFlow(r.tx.QueryRowContext(ctx, selFlowExceptions+` WHERE terminal = ? AND seq = ?`, x.Terminal, x.Seq))
		if err != nil {
			return nil, 0, fmt.Errorf("flow exception %s: %w", wire.Key(x.Terminal, x.Seq), err)
		}
		*x = hqwire.FlowException{Change: x.Change, Terminal: f.Terminal, Seq: f.Seq, Kind: f.Kind, FlowGiven: f.FlowGiven,
			FlowBooked: f.FlowBooked, HeldBy: f.HeldBy, At: f.At, BusinessDate: f.BusinessDate, Resolved: f.Resolved,
			ResolvedAt: f.ResolvedAt, Resolution: f.Resolution}
	}
	sort.Slice(xs, func(i, j int) bool { return xs[i].Change < xs[j].Change })
	return xs, last, nil
}

// FlowExceptionsAfter is HQReader.FlowExceptionsAfter over one snapshot of the ledger.
func (l *Ledger) FlowExceptionsAfter(ctx context.Context, afterID int64, limit int) (
	xs []hqwire.FlowException, last int64, err error) {
	err = l.ViewHQ(ctx, func(r *HQReader) error {
		var err error
		xs, last, err = r.FlowExceptionsAfter(ctx, afterID, limit)
		return err
	})
	return xs, last, err
}

// MaxFlowChange returns the ledger's last flow exception change number, 0 if none. A
// ledger the store-server has not migrated to flow_exception_changes and the flow
// exceptions' held_by yet (an uploader upgraded before its store-server: OpenReader runs no
// migration) has none: its flow exceptions wait for the store-server's migration.
func (l *Ledger) MaxFlowChange(ctx context.Context) (int64, error) {
	if ok, err := flowsReady(ctx, l.db.R); err != nil || !ok {
		return 0, err
	}
	var n sql.NullInt64
	if err := l.db.R.QueryRowContext(ctx, `SELECT max(id) FROM flow_exception_changes`).Scan(&n); err != nil {
		return 0, fmt.Errorf("flow exception changes: %w", err)
	}
	return n.Int64, nil
}

// FlowChangesWaiting counts the flow exception changes an uploader that HQ acknowledged
// through through has still to send, as AdjustmentsWaiting counts adjustments; 0 in a ledger
// the store-server has not migrated to them yet (MaxFlowChange).
func (r *HQReader) FlowChangesWaiting(ctx context.Context, through int64) (int64, error) {
	if ok, err := flowsReady(ctx, r.tx); err != nil || !ok {
		return 0, err
	}
	return countWaiting(ctx, r.tx, "flow_exception_changes", "id", through)
}

// flowsReady reports whether the store-server has migrated the ledger to 006's held_by of
// the flow exceptions (and so to 005's flow_exception_changes): OpenReader runs no
// migration, and an uploader may be upgraded before its store-server.
func flowsReady(ctx context.Context, q interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}) (bool, error) {
	return sqlitedb.Migrated(ctx, q, "006_flow_exception_holder.sql")
}
