package hqstore

import (
	"fmt"
	"time"

	"github.com/posgate/posgate/internal/hqwire"
)

// StoredFlowException is a store's flow exception as HQ holds it: its latest state from the
// store (hqwire.FlowsPath).
type StoredFlowException struct {
	Store string
	hqwire.FlowException
	ReceivedAt time.Time // when HQ received this state
}

// FlowColumns are the columns of the flow_exceptions table ScanFlowExceptions reads, in
// order.
const FlowColumns = `store, terminal, seq, change, kind, flow_given, flow_booked, held_by, at, business_date,
	resolved, resolved_at, resolution, received_ms`

// ScanFlowExceptions reads flow exceptions from rows of FlowColumns; what names them in
// errors.
func ScanFlowExceptions(what string, rows Rows) ([]StoredFlowException, error) {
	out := []StoredFlowException{}
	for rows.Next() {
		var x StoredFlowException
		var at, resolvedAt string
		var received int64
		if err := rows.Scan(&x.Store, &x.Terminal, &x.Seq, &x.Change, &x.Kind, &x.FlowGiven, &x.FlowBooked, &x.HeldBy,
			&at, &x.BusinessDate, &x.Resolved, &resolvedAt, &x.Resolution, &received); err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		var err error
		if x.At, err = ParseTime(at); err != nil {
			return nil, fmt.Errorf("%s: %s/%s:%d: at: %w", what, x.Store, x.Terminal, x.Seq, err)
		}
		if x.ResolvedAt, err = ParseTime(resolvedAt); err != nil {
			return nil, fmt.Errorf("%s: %s/%s:%d: resolved_at: %w", what, x.Store, x.Terminal, x.Seq, err)
		}
		x.ReceivedAt = time.UnixMilli(received).UTC()
		out = append(out, x)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return out, nil
}
