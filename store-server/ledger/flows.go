package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/posgate/posgate/internal/perr"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/client"
)

// A flow exception: a replayed sale or refund whose flow number the store had given again
// since it lost the event (takeFlow books the replay under the date's next number). The
// customer's receipt prints the number another sale or refund now holds: the manager sees
// both and resolves it with a note (schema/store/004_flow_exceptions.sql). The row names
// that other transaction as it was when the replay was booked (held_by,
// schema/store/006_flow_exception_holder.sql): its event may move to an archive later.

const insFlowException = `INSERT INTO flow_exceptions (terminal, seq, kind, flow_given, flow_booked, at, business_date,
	held_by) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (terminal, seq) DO NOTHING`

// flowException puts the flow exception of replay r, booked under flow though it brought
// given, which heldBy holds.
func flowException(st state, r *Record, d *decision, given, flow int64, heldBy string) {
	st.rows().one(insFlowException, r.Terminal, r.Seq, string(r.Kind), given, flow, d.at, d.date, heldBy)
}

// selFlowExceptions reads flow exceptions.
const selFlowExceptions = `SELECT terminal, seq, kind, flow_given, flow_booked, held_by,
	at, business_date, resolved, resolved_at, resolution FROM flow_exceptions f`

func (l *Ledger) scanFlow(sc interface{ Scan(...any) error }) (client.FlowException, error) {
	var x client.FlowException
	var at, resolvedAt string
	err := sc.Scan(&x.Terminal, &x.Seq, &x.Kind, &x.FlowGiven, &x.FlowBooked, &x.HeldBy, &at, &x.BusinessDate,
		&x.Resolved, &resolvedAt, &x.Resolution)
	x.At, x.ResolvedAt = l.parseTime(at), l.parseTime(resolvedAt)
	return x, err
}

// FlowExceptions returns the flow exceptions of a business date ("" for every date), by
// date, terminal and seq: the open ones, or with resolved also those a manager resolved.
func (l *Ledger) FlowExceptions(ctx context.Context, date string, resolved bool) ([]client.FlowException, error) {
	out, err := exceptions(ctx, l, selFlowExceptions, "terminal, seq", date, resolved, l.scanFlow)
	if err != nil {
		return nil, fmt.Errorf("flow exceptions: %w", err)
	}
	return out, nil
}

// OpenFlowExceptions counts the flow exceptions no manager has resolved yet.
func (l *Ledger) OpenFlowExceptions(ctx context.Context) (int64, error) {
	var n int64
	if err := l.db.R.QueryRowContext(ctx, `SELECT count(*) FROM flow_exceptions WHERE resolved = 0`).Scan(&n); err != nil {
		return 0, fmt.Errorf("open flow exceptions: %w", err)
	}
	return n, nil
}

// Codes of ResolveFlow's errors.
const (
	CodeFlowNotFound           = "flow_exception_not_found"
	CodeFlowResolutionRequired = "flow_resolution_required"
)

// ResolveFlow marks the flow exception of (terminal, seq) resolved with the manager's note,
// as ResolveOversell does an oversell: resolving a resolved one changes nothing and returns
// it with its first resolution (applied false).
func (l *Ledger) ResolveFlow(ctx context.Context, terminal string, seq int64, note string) (client.FlowException, bool, error) {
	x, applied, err := resolve(ctx, l, "flow_exceptions", selFlowExceptions, "terminal = ? AND seq = ?",
		[]any{terminal, seq}, note, l.scanFlow)
	switch {
	case errors.Is(err, errNoNote):
		return client.FlowException{}, false, perr.New(perr.Invalid, CodeFlowResolutionRequired,
			"say how the two receipts were told apart (1 to %d bytes of UTF-8)", wire.MaxTextLen)
	case errors.Is(err, sql.ErrNoRows):
		return client.FlowException{}, false, perr.New(perr.NotFound, CodeFlowNotFound,
			"no flow exception of event %s", wire.Key(terminal, seq))
	case err != nil:
		return client.FlowException{}, false, fmt.Errorf("resolve flow %s: %w", wire.Key(terminal, seq), err)
	}
	return x, applied, nil
}
