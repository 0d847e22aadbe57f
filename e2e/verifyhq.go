package e2e

import (
	"context"
	"fmt"
	"maps"
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/posgate/posgate/hq-sync/hqstore"
	"github.com/posgate/posgate/hq-sync/hqstore/postgres"
	"github.com/posgate/posgate/hq-sync/hqstore/sqlite"
	"github.com/posgate/posgate/internal/hqwire"
	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/client"
	"github.com/posgate/posgate/store-server/ledger"
)

// What HQ holds of the store's ledger: its rows (sales, refunds, day closes) and what it
// flagged, its exceptions (oversells, price and refund exceptions, parked events, seq gaps),
// which the uploader sends in its batches, and its flow exceptions (a replayed sale or refund
// whose receipt prints a flow number another transaction holds), which it sends on a route
// of their own. HQ keeps a row once, and each exception in the latest state it was sent.

// VerifyHQ adds to rep, once the store's uploader has sent HQ every row of the ledger, every
// change of its exceptions and flow exceptions and every stock adjustment, whether HQ holds
// them as the ledger does (VerifyRowsAtHQ, VerifyExceptionsAtHQ, VerifyFlowsAtHQ,
// VerifyMovesAtHQ).
func VerifyHQ(ctx context.Context, s *StoreServer, hq *Serve, rep *Report) {
	loc, err := wire.LoadLocation(s.Opts.TZ)
	if err != nil {
		rep.Add(false, "the store's time zone: %v", err)
		return
	}
	path := filepath.Join(s.Opts.DataDir, "ledger.db")
	VerifyRowsAtHQ(ctx, s.Manager(), s.Opts.Store, path, loc, hq.Opts.DB, rep)
	VerifyExceptionsAtHQ(ctx, s.Manager(), s.Opts.Store, path, loc, hq.Opts.DB, rep)
	VerifyFlowsAtHQ(ctx, s.Manager(), s.Opts.Store, hq.Opts.DB, rep)
	VerifyMovesAtHQ(ctx, s.Manager(), s.Opts.Store, path, loc, hq.Opts.DB, rep)
}

// waitSent waits until the uploader of the store (its manager API m) has none of what
// left counts (of its GET /v1/hq status) left to send, and reports whether it came to that
// (a failed line in rep otherwise).
func waitSent(ctx context.Context, m *client.Client, rep *Report, what string, left func(*client.UploadStatus) int64) bool {
	var last string
	for {
		a, err := m.HQ(ctx)
		switch {
		case err != nil:
			last = err.Error()
		case a.Upload == nil:
			last = "no uploader state"
		default:
			n := left(a.Upload)
			if n == 0 {
				return true
			}
			last = fmt.Sprintf("%d %s waiting", n, what)
		}
		select {
		case <-ctx.Done():
			rep.Add(false, "the uploader sent HQ every %s: %v (%s)", what, ctx.Err(), last)
			return false
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// VerifyExceptionsAtHQ waits until the uploader of the store (its manager API m) has no
// exception change left to send, then reads the state of every exception of the store's
// ledger (at ledgerPath, read-only, as the uploader reads it: ledger.HQReader's
// ExceptionsAfter) and every exception HQ holds of store in its database db (as HQ exports
// them to a refill, hqstore.Refiller), and compares them (CompareExceptions) into rep.
func VerifyExceptionsAtHQ(ctx context.Context, m *client.Client, store, ledgerPath string, loc *time.Location, db string,
	rep *Report) {
	verifyAtHQ(ctx, m, rep, "exception change", func(u *client.UploadStatus) int64 { return u.ExceptionsWaiting },
		func() ([]hqwire.Exception, error) { return ledgerExceptions(ctx, ledgerPath, store, loc) },
		func() ([]hqwire.Exception, error) { return hqExceptions(ctx, db, store) }, CompareExceptions)
}

// verifyAtHQ waits until the uploader of the store (its manager API m) has none of what
// left counts left to send, then reads the ledger's side and HQ's and compares them into
// rep.
func verifyAtHQ[L, H any](ctx context.Context, m *client.Client, rep *Report, what string, left func(*client.UploadStatus) int64,
	ledgerSide func() ([]L, error), hqSide func() ([]H, error), compare func(*Report, []L, []H)) {
	if !waitSent(ctx, m, rep, what, left) {
		return
	}
	led, err := ledgerSide()
	if err != nil {
		rep.Add(false, "reading the ledger's side (%ss): %v", what, err)
		return
	}
	hq, err := hqSide()
	if err != nil {
		rep.Add(false, "reading HQ's side (%ss): %v", what, err)
		return
	}
	compare(rep, led, hq)
}

// ledgerExceptions reads the state of every exception the ledger at path has a change of,
// withdrawn ones included.
func ledgerExceptions(ctx context.Context, path, store string, loc *time.Location) ([]hqwire.Exception, error) {
	var xs []hqwire.Exception
	err := readLedger(ctx, path, store, loc, func(r *ledger.HQReader) (err error) {
		xs, _, _, err = r.ExceptionsAfter(ctx, 0, math.MaxInt32)
		return err
	})
	return xs, err
}

// hqExceptions reads every exception HQ holds of store, withdrawn ones included.
func hqExceptions(ctx context.Context, db, store string) ([]hqwire.Exception, error) {
	var out []hqwire.Exception
	err := readHQ(ctx, db, func(ref hqstore.Refiller) (err error) {
		out, err = allPages(func(last *hqwire.Exception) ([]hqwire.Exception, error) {
			var after hqstore.ExceptionKey
			if last != nil {
				after = hqstore.ExceptionKey{Kind: last.Kind, Terminal: last.Terminal, Seq: last.Seq, SKU: last.SKU}
			}
			return ref.ExportExceptions(ctx, store, after, hqwire.MaxExportPage)
		})
		return err
	})
	return out, err
}

// allPages reads page after page, each after the last item of the one before (nil for the
// first), until one comes back empty.
func allPages[T any](page func(last *T) ([]T, error)) ([]T, error) {
	var out []T
	for {
		var last *T
		if n := len(out); n > 0 {
			last = &out[n-1]
		}
		items, err := page(last)
		if err != nil || len(items) == 0 {
			return out, err
		}
		out = append(out, items...)
	}
}

// readLedger runs read on the ledger at path, opened read-only as the uploader opens it,
// in one snapshot.
func readLedger(ctx context.Context, path, store string, loc *time.Location, read func(*ledger.HQReader) error) error {
	return withLedger(ctx, path, store, loc, func(l *ledger.Ledger) error { return l.ViewHQ(ctx, read) })
}

// withLedger runs use on the ledger at path, opened read-only as the uploader opens it.
func withLedger(ctx context.Context, path, store string, loc *time.Location, use func(*ledger.Ledger) error) error {
	l, err := ledger.OpenReader(ctx, path, store, loc)
	if err != nil {
		return err
	}
	defer l.Close()
	return use(l)
}

// readHQ runs read on HQ's database db, as it exports a store to a refill.
func readHQ(ctx context.Context, db string, read func(hqstore.Refiller) error) error {
	st, err := openHQ(ctx, db)
	if err != nil {
		return err
	}
	defer st.Close()
	ref, ok := st.(hqstore.Refiller)
	if !ok {
		return fmt.Errorf("HQ's storage %T does not export a store", st)
	}
	return read(ref)
}

// CompareExceptions adds to rep whether HQ holds the exceptions of a store (hq: all HQ
// holds of it) as the store's ledger does (ledger: the state of each it has a change of):
// each the ledger holds at HQ, not withdrawn, with the same state (business date, code,
// detail, units short, time, open or resolved, when and the resolution), and none at HQ
// that the ledger does not hold (withdrawn at HQ and gone from the ledger, or never in it,
// is the same). A line for each difference, and one line that counts them.
func CompareExceptions(rep *Report, ledger, hq []hqwire.Exception) {
	at := map[string]hqwire.Exception{}
	held := 0
	for _, x := range hq {
		if !x.Withdrawn {
			at[x.Key()] = x
			held++
		}
	}
	differ, kept, resolved := 0, 0, 0
	for _, l := range ledger {
		if l.Withdrawn {
			continue
		}
		kept++
		if l.Resolved {
			resolved++
		}
		h, ok := at[l.Key()]
		delete(at, l.Key())
		if !ok {
			differ++
			rep.Add(false, "exception %s of %s: in the store's ledger, not at HQ (or withdrawn there)", l.Key(), l.BusinessDate)
			continue
		}
		if d := exceptionDiffers(l, h); d != "" {
			differ++
			rep.Add(false, "exception %s of %s: the ledger's and HQ's differ in %s", l.Key(), l.BusinessDate, d)
		}
	}
	for k, h := range at {
		differ++
		rep.Add(false, "exception %s of %s: at HQ, not in the store's ledger", k, h.BusinessDate)
	}
	rep.Add(differ == 0, "exceptions: %d in the store's ledger (%d resolved), %d at HQ, %d differ", kept, resolved, held, differ)
}

// exceptionDiffers names the fields of an exception's state in which the ledger's (l) and
// HQ's (h) differ, with both values; "" when none does.
func exceptionDiffers(l, h hqwire.Exception) string {
	d := differences{}
	d.field("business_date", l.BusinessDate == h.BusinessDate, l.BusinessDate, h.BusinessDate)
	d.field("code", l.Code == h.Code, l.Code, h.Code)
	d.field("detail", l.Detail == h.Detail, fmt.Sprintf("%q", l.Detail), fmt.Sprintf("%q", h.Detail))
	d.field("qty_short", l.QtyShort == h.QtyShort, l.QtyShort, h.QtyShort)
	d.field("at", l.At.Equal(h.At), l.At, h.At)
	d.field("resolved", l.Resolved == h.Resolved, l.Resolved, h.Resolved)
	d.field("resolved_at", l.ResolvedAt.Equal(h.ResolvedAt), l.ResolvedAt, h.ResolvedAt)
	d.field("resolution", l.Resolution == h.Resolution, fmt.Sprintf("%q", l.Resolution), fmt.Sprintf("%q", h.Resolution))
	return d.String()
}

// differences collects the fields two states differ in.
type differences []string

func (d *differences) field(name string, same bool, lv, hv any) {
	if !same {
		*d = append(*d, fmt.Sprintf("%s (ledger %v, HQ %v)", name, lv, hv))
	}
}

func (d differences) String() string { return strings.Join(d, ", ") }

// VerifyFlowsAtHQ waits until the uploader of the store (its manager API m) has no flow
// exception change left to send (GET /v1/hq), then reads the ledger's flow exceptions,
// resolved ones too, and those HQ holds of store in its database db (serve's --db: a SQLite
// path, read beside the running serve, or a postgres:// URL), and compares them
// (CompareFlows) into rep.
func VerifyFlowsAtHQ(ctx context.Context, m *client.Client, store, db string, rep *Report) {
	verifyAtHQ(ctx, m, rep, "flow exception change", func(u *client.UploadStatus) int64 { return u.FlowsWaiting },
		func() ([]client.FlowException, error) {
			a, err := m.FlowExceptions(ctx, "", true)
			return a.Flows, err
		},
		func() ([]hqstore.StoredFlowException, error) { return hqFlows(ctx, db, store) },
		func(rep *Report, led []client.FlowException, hq []hqstore.StoredFlowException) {
			CompareFlows(rep, store, led, hq)
		})
}

// openHQ opens HQ's database db (serve's --db: a SQLite path, or a postgres:// URL).
func openHQ(ctx context.Context, db string) (hqstore.Storage, error) {
	if strings.HasPrefix(db, "postgres://") || strings.HasPrefix(db, "postgresql://") {
		return postgres.Open(ctx, db)
	}
	return sqlite.Open(ctx, strings.TrimPrefix(db, "sqlite:"))
}

// hqFlows reads the flow exceptions HQ holds of store, every date, resolved ones too.
func hqFlows(ctx context.Context, db, store string) ([]hqstore.StoredFlowException, error) {
	st, err := openHQ(ctx, db)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	return st.FlowExceptions(ctx, "", store, false)
}

// CompareFlows adds to rep whether HQ holds the flow exceptions of store (hq: what HQ holds,
// of store and any other) as the store's ledger does (ledger: all of them, resolved ones
// too): each of the ledger's at HQ with the same state (kind, flow numbers, the transaction
// holding the receipt's number, times, business date, open or resolved, and the
// resolution), and none at HQ that the ledger lacks. A line for each difference, and one
// line that counts them.
func CompareFlows(rep *Report, store string, ledger []client.FlowException, hq []hqstore.StoredFlowException) {
	at := map[string]hqstore.StoredFlowException{}
	for _, x := range hq {
		if x.Store == store {
			at[wire.Key(x.Terminal, x.Seq)] = x
		}
	}
	differ, resolved, held := 0, 0, len(at)
	for _, l := range ledger {
		k := wire.Key(l.Terminal, l.Seq)
		if l.Resolved {
			resolved++
		}
		h, ok := at[k]
		delete(at, k)
		if !ok {
			differ++
			rep.Add(false, "flow exception %s of %s (flow %d booked as %d): in the store's ledger, not at HQ",
				k, l.BusinessDate, l.FlowGiven, l.FlowBooked)
			continue
		}
		if d := flowDiffers(l, h.FlowException); d != "" {
			differ++
			rep.Add(false, "flow exception %s of %s: the ledger's and HQ's differ in %s", k, l.BusinessDate, d)
		}
	}
	for k, h := range at {
		differ++
		rep.Add(false, "flow exception %s of %s (flow %d booked as %d): at HQ, not in the store's ledger",
			k, h.BusinessDate, h.FlowGiven, h.FlowBooked)
	}
	rep.Add(differ == 0, "flow exceptions: %d in the store's ledger (%d resolved), %d at HQ, %d differ",
		len(ledger), resolved, held, differ)
}

// flowDiffers names the fields of a flow exception's state in which the ledger's (l) and
// HQ's (h) differ, with both values; "" when none does.
func flowDiffers(l client.FlowException, h hqwire.FlowException) string {
	d := differences{}
	d.field("kind", l.Kind == h.Kind, l.Kind, h.Kind)
	d.field("flow_given", l.FlowGiven == h.FlowGiven, l.FlowGiven, h.FlowGiven)
	d.field("flow_booked", l.FlowBooked == h.FlowBooked, l.FlowBooked, h.FlowBooked)
	d.field("held_by", l.HeldBy == h.HeldBy, fmt.Sprintf("%q", l.HeldBy), fmt.Sprintf("%q", h.HeldBy))
	d.field("at", l.At.Equal(h.At), l.At, h.At)
	d.field("business_date", l.BusinessDate == h.BusinessDate, l.BusinessDate, h.BusinessDate)
	d.field("resolved", l.Resolved == h.Resolved, l.Resolved, h.Resolved)
	d.field("resolved_at", l.ResolvedAt.Equal(h.ResolvedAt), l.ResolvedAt, h.ResolvedAt)
	d.field("resolution", l.Resolution == h.Resolution, fmt.Sprintf("%q", l.Resolution), fmt.Sprintf("%q", h.Resolution))
	return d.String()
}

// VerifyRowsAtHQ waits until the uploader of the store (its manager API m) has no row left
// to send and no batch pending, then reads every row of the store's ledger as the uploader
// sends them (at ledgerPath, read-only: ledger.HQReader's OutboxAfter) and every row HQ holds
// of store in its database db (as HQ exports them to a refill, hqstore.Refiller), and
// compares them (CompareRows) into rep.
func VerifyRowsAtHQ(ctx context.Context, m *client.Client, store, ledgerPath string, loc *time.Location, db string,
	rep *Report) {
	left := func(u *client.UploadStatus) int64 {
		if u.Pending != "" {
			return max(u.Backlog, 1)
		}
		return u.Backlog
	}
	verifyAtHQ(ctx, m, rep, "row", left,
		func() ([]hqwire.Row, error) { return LedgerRows(ctx, ledgerPath, store, loc) },
		func() ([]hqwire.Row, error) { return HQRows(ctx, db, store) }, CompareRows)
}

// LedgerRows reads every row the ledger at path has for HQ, in the order it queued them.
func LedgerRows(ctx context.Context, path, store string, loc *time.Location) ([]hqwire.Row, error) {
	var out []hqwire.Row
	err := readLedger(ctx, path, store, loc, func(r *ledger.HQReader) error {
		for after := int64(0); ; {
			rows, err := r.OutboxAfter(ctx, after, 4096)
			if err != nil || len(rows) == 0 {
				return err
			}
			for _, o := range rows {
				out = append(out, o.Row)
			}
			after = rows[len(rows)-1].ID
		}
	})
	return out, err
}

// HQRows reads every row HQ holds of store, by terminal and seq.
func HQRows(ctx context.Context, db, store string) ([]hqwire.Row, error) {
	var out []hqwire.Row
	err := readHQ(ctx, db, func(ref hqstore.Refiller) (err error) {
		out, err = allPages(func(last *hqwire.Row) ([]hqwire.Row, error) {
			if last == nil {
				return ref.ExportRows(ctx, store, "", 0, hqwire.MaxExportPage)
			}
			return ref.ExportRows(ctx, store, last.Terminal, last.Seq, hqwire.MaxExportPage)
		})
		return err
	})
	return out, err
}

// CompareRows adds to rep whether HQ holds the rows of a store (hq: all HQ holds of it) as
// the store's ledger queued them for HQ (ledger): each once at HQ with the same kind,
// business date, flow number, time, hash (its content), amount and split by method, and
// none at HQ the ledger does not hold. A line for each difference (the first 20), and one
// line that counts the rows, the fen of the sales and refunds, and the differences.
func CompareRows(rep *Report, ledger, hq []hqwire.Row) {
	at := make(map[string]hqwire.Row, len(hq))
	for _, r := range hq {
		at[wire.Key(r.Terminal, r.Seq)] = r
	}
	differ := 0
	say := func(format string, args ...any) {
		if differ++; differ <= 20 {
			rep.Add(false, format, args...)
		}
	}
	var sales, refunds money.Fen
	for _, l := range ledger {
		k := wire.Key(l.Terminal, l.Seq)
		h, ok := at[k]
		delete(at, k)
		switch {
		case !ok:
			say("row %s of %s: in the store's ledger, not at HQ", k, l.BusinessDate)
			continue
		case l.Kind == hqwire.KindSale:
			sales += l.Amount
		case l.Kind == hqwire.KindRefund:
			refunds += l.Amount
		}
		if d := rowDiffers(l, h); d != "" {
			say("row %s of %s: the ledger's and HQ's differ in %s", k, l.BusinessDate, d)
		}
	}
	for k, h := range at {
		say("row %s of %s: at HQ, not in the store's ledger", k, h.BusinessDate)
	}
	rep.Add(differ == 0, "rows: %d in the store's ledger (sales %s, refunds %s), %d at HQ, %d differ",
		len(ledger), sales, refunds, len(hq), differ)
}

// rowDiffers names the fields in which the ledger's row (l) and HQ's (h) differ, with both
// values; "" when none does.
func rowDiffers(l, h hqwire.Row) string {
	d := differences{}
	d.field("kind", l.Kind == h.Kind, l.Kind, h.Kind)
	d.field("business_date", l.BusinessDate == h.BusinessDate, l.BusinessDate, h.BusinessDate)
	d.field("flow_no", l.FlowNo == h.FlowNo, l.FlowNo, h.FlowNo)
	d.field("at", l.At.Equal(h.At), l.At, h.At)
	d.field("hash", l.Hash == h.Hash, l.Hash, h.Hash)
	d.field("amount", l.Amount == h.Amount, l.Amount, h.Amount)
	d.field("by_method", maps.Equal(nonZero(l.ByMethod), nonZero(h.ByMethod)), l.ByMethod, h.ByMethod)
	return d.String()
}

// nonZero is a split by method without its zero amounts (a method missing stands for 0).
func nonZero(by map[string]money.Fen) map[string]money.Fen {
	out := make(map[string]money.Fen, len(by))
	for m, a := range by {
		if a != 0 {
			out[m] = a
		}
	}
	return out
}

// VerifyMovesAtHQ waits until the uploader of the store (its manager API m) has no stock
// adjustment left to send, then reads every adjustment of the store's ledger (at
// ledgerPath, read-only) and every stock move HQ holds of store in its database db (as HQ
// exports them to a refill), and compares them (CompareMoves) into rep.
func VerifyMovesAtHQ(ctx context.Context, m *client.Client, store, ledgerPath string, loc *time.Location, db string,
	rep *Report) {
	verifyAtHQ(ctx, m, rep, "stock adjustment", func(u *client.UploadStatus) int64 { return u.MovesWaiting },
		func() ([]hqwire.StockMove, error) { return ledgerMoves(ctx, ledgerPath, store, loc) },
		func() ([]hqwire.StockMove, error) { return hqMoves(ctx, db, store) }, CompareMoves)
}

// ledgerMoves reads every stock adjustment of the ledger at path, in its order.
func ledgerMoves(ctx context.Context, path, store string, loc *time.Location) ([]hqwire.StockMove, error) {
	var out []hqwire.StockMove
	err := withLedger(ctx, path, store, loc, func(l *ledger.Ledger) (err error) {
		out, err = allPages(func(last *hqwire.StockMove) ([]hqwire.StockMove, error) {
			return l.Adjustments(ctx, moveN(last), hqwire.MaxExportPage)
		})
		return err
	})
	return out, err
}

// hqMoves reads every stock move HQ holds of store, in N order.
func hqMoves(ctx context.Context, db, store string) ([]hqwire.StockMove, error) {
	var out []hqwire.StockMove
	err := readHQ(ctx, db, func(ref hqstore.Refiller) (err error) {
		out, err = allPages(func(last *hqwire.StockMove) ([]hqwire.StockMove, error) {
			return ref.ExportMoves(ctx, store, moveN(last), hqwire.MaxExportPage)
		})
		return err
	})
	return out, err
}

// moveN is the number of move m, 0 for none.
func moveN(m *hqwire.StockMove) int64 {
	if m == nil {
		return 0
	}
	return m.N
}

// CompareMoves adds to rep whether HQ holds the stock moves of a store (hq: all HQ holds of
// it) as the store's ledger booked its adjustments (ledger): each once at HQ, by its id,
// with the same SKU, units, reason, time and counted figure, and none at HQ the ledger does
// not hold. (Their numbers are the ledger's order, which a refilled ledger gives anew.) A
// line for each difference (the first 20), and one line that counts them and the units.
func CompareMoves(rep *Report, ledger, hq []hqwire.StockMove) {
	at := make(map[string]hqwire.StockMove, len(hq))
	for _, m := range hq {
		at[m.ID] = m
	}
	differ := 0
	say := func(format string, args ...any) {
		if differ++; differ <= 20 {
			rep.Add(false, format, args...)
		}
	}
	var units int64
	for _, l := range ledger {
		units += l.Delta
		h, ok := at[l.ID]
		delete(at, l.ID)
		if !ok {
			say("stock move %s (%s %+d): in the store's ledger, not at HQ", l.ID, l.SKU, l.Delta)
			continue
		}
		d := differences{}
		d.field("sku", l.SKU == h.SKU, l.SKU, h.SKU)
		d.field("delta", l.Delta == h.Delta, l.Delta, h.Delta)
		d.field("reason", l.Reason == h.Reason, l.Reason, h.Reason)
		d.field("at", l.At.Equal(h.At), l.At, h.At)
		d.field("counted", counted(l.Counted) == counted(h.Counted), counted(l.Counted), counted(h.Counted))
		if d.String() != "" {
			say("stock move %s: the ledger's and HQ's differ in %s", l.ID, d)
		}
	}
	for id, h := range at {
		say("stock move %s (%s %+d): at HQ, not in the store's ledger", id, h.SKU, h.Delta)
	}
	rep.Add(differ == 0, "stock moves: %d in the store's ledger (%+d units), %d at HQ, %d differ", len(ledger), units, len(hq), differ)
}

// counted is a count's figure as text: "none" for a move that is no count.
func counted(n *int64) string {
	if n == nil {
		return "none"
	}
	return strconv.FormatInt(*n, 10)
}
