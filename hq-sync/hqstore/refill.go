package hqstore

import (
	"context"
	"fmt"
	"time"

	"github.com/posgate/posgate/internal/hqwire"
	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/perr"
)

// Refiller is implemented by both engines: what HQ keeps so that a store that lost its
// ledger with no backup can be refilled from it (store-server restore --from-hq), and how
// it gives it back, one page at a time.
type Refiller interface {
	// PutMoves stores a store's stock moves in one transaction, each once per (store, id): a
	// move HQ holds with the same content is held, with other content the whole call is
	// refused with ErrMoveConflict and nothing is stored. It returns how many were new and
	// the highest N HQ holds of the store after it.
	PutMoves(ctx context.Context, store, batchID string, moves []hqwire.StockMove, at time.Time) (fresh int, maxN int64, err error)
	// ExportRows returns up to limit of the store's rows after (afterTerminal, afterSeq) in
	// (terminal, seq) byte order, each as the store sent it (Payload nil for a sale or
	// refund stored before HQ kept payloads).
	ExportRows(ctx context.Context, store, afterTerminal string, afterSeq int64, limit int) ([]hqwire.Row, error)
	// ExportMoves returns up to limit of the store's stock moves with N above after, in N
	// order.
	ExportMoves(ctx context.Context, store string, after int64, limit int) ([]hqwire.StockMove, error)
	// ExportDays returns the store's day declarations HQ holds, by business date, and the
	// business days HQ dropped (retention), of every store.
	ExportDays(ctx context.Context, store string) (days []hqwire.ExportDay, dropped []string, err error)
	// ExportExceptions returns up to limit of the store's exceptions after the key after
	// (kind, terminal, seq, sku) in that byte order, each in the state HQ holds, withdrawn
	// ones too.
	ExportExceptions(ctx context.Context, store string, after ExceptionKey, limit int) ([]hqwire.Exception, error)
	// ExportFlows returns up to limit of the store's flow exceptions after (afterTerminal,
	// afterSeq) in (terminal, seq) byte order, each in the state HQ holds.
	ExportFlows(ctx context.Context, store, afterTerminal string, afterSeq int64, limit int) ([]hqwire.FlowException, error)
}

// ExceptionKey is an exception's key within its store (hqwire.Exception.Key's parts):
// where a page of the exceptions export starts after. The zero key is before every one.
type ExceptionKey struct {
	Kind, Terminal string
	Seq            int64
	SKU            string
}

// ExportExceptionColumns is the select list of an exported exception of table exceptions,
// in ScanExportException's order; both engines keep the same columns.
const ExportExceptionColumns = `kind, terminal, seq, sku, business_date, change, withdrawn, code, detail, qty_short, at,
	resolved, resolved_at, resolution`

// ScanExportException reads one exception selected with ExportExceptionColumns through
// scan (the Scan of a database/sql or a pgx result).
func ScanExportException(scan func(dest ...any) error) (hqwire.Exception, error) {
	var x hqwire.Exception
	var at, resolvedAt string
	if err := scan(&x.Kind, &x.Terminal, &x.Seq, &x.SKU, &x.BusinessDate, &x.Change, &x.Withdrawn, &x.Code, &x.Detail,
		&x.QtyShort, &at, &x.Resolved, &resolvedAt, &x.Resolution); err != nil {
		return x, fmt.Errorf("export exceptions: %w", err)
	}
	var err error
	if x.At, err = ParseTime(at); err != nil {
		return x, fmt.Errorf("export exceptions: %s: at: %w", x.Key(), err)
	}
	if x.ResolvedAt, err = ParseTime(resolvedAt); err != nil {
		return x, fmt.Errorf("export exceptions: %s: resolved_at: %w", x.Key(), err)
	}
	return x, nil
}

// ExportedFlows returns the flow exceptions of xs as the export gives them: their states,
// without what HQ adds.
func ExportedFlows(xs []StoredFlowException) []hqwire.FlowException {
	out := make([]hqwire.FlowException, len(xs))
	for i := range xs {
		out[i] = xs[i].FlowException
	}
	return out
}

// ErrMoveConflict returns the error for a move whose id HQ holds with other content.
func ErrMoveConflict(store, id string) error {
	return perr.New(perr.Conflict, hqwire.CodeMoveConflict,
		"stock move %q of store %s is stored with other content; nothing of the batch was stored", id, store)
}

// SameMove reports whether two moves of one id have the same content.
func SameMove(a, b *hqwire.StockMove) bool {
	same := a.N == b.N && a.ID == b.ID && a.SKU == b.SKU && a.Delta == b.Delta && a.Reason == b.Reason &&
		a.At.Equal(b.At) && (a.Counted == nil) == (b.Counted == nil)
	return same && (a.Counted == nil || *a.Counted == *b.Counted)
}

// MoveTime is the text a move's time is kept as, and reads back from.
func MoveTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// ExportColumns is the select list of an exported row of table rows, in ScanExportRow's
// order; both engines keep the same columns.
const ExportColumns = `kind, terminal, seq, business_date, flow_no, at, hash, amount, cash, card, qr, methods, payload`

// ScanExportRow reads one row selected with ExportColumns through scan (the Scan of a
// database/sql or a pgx result).
func ScanExportRow(scan func(dest ...any) error) (hqwire.Row, error) {
	var r hqwire.Row
	var at string
	var amount int64
	var m Methods
	var payload []byte
	if err := scan(&r.Kind, &r.Terminal, &r.Seq, &r.BusinessDate, &r.FlowNo, &at, &r.Hash, &amount,
		&m.Cash, &m.Card, &m.QR, &m.Mask, &payload); err != nil {
		return r, fmt.Errorf("export rows: %w", err)
	}
	t, err := time.Parse(time.RFC3339Nano, at)
	if err != nil {
		return r, fmt.Errorf("export rows: %s/%d: at %q: %w", r.Terminal, r.Seq, at, err)
	}
	r.At, r.Amount, r.ByMethod, r.Payload = t, money.Fen(amount), m.Map(), payload
	return r, nil
}

// MoveColumns is the select list of a stock move of table stock_moves, in ScanMove's order.
const MoveColumns = `n, id, sku, delta, reason, at, counted`

// ScanMove reads one move selected with MoveColumns through scan (the Scan of a
// database/sql or a pgx result); the error of scan is returned as it is, so that an engine
// can tell its "no row".
func ScanMove(scan func(dest ...any) error) (hqwire.StockMove, error) {
	var m hqwire.StockMove
	var at string
	if err := scan(&m.N, &m.ID, &m.SKU, &m.Delta, &m.Reason, &at, &m.Counted); err != nil {
		return m, err
	}
	t, err := time.Parse(time.RFC3339Nano, at)
	if err != nil {
		return m, fmt.Errorf("move %s: at %q: %w", m.ID, at, err)
	}
	m.At = t
	return m, nil
}
