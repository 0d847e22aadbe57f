package ledger

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/wire"
)

// Codes of refund exceptions: an accepted refund the ledger's own records do not cover.
const (
	// CodeRefundSaleUnknown: the ledger holds no accepted sale at the refund's terminal and
	// sale_seq, or that sale has another sale id than the refund names.
	CodeRefundSaleUnknown = "refund_sale_unknown"
	// CodeRefundExceedsSale: with the store's earlier refunds of the same sale, the refund
	// names a line the sale does not have or another SKU than the sale's line, returns more
	// of a line than was sold or pays back more for it than the sale took for it, or pays
	// back more than the sale's total.
	CodeRefundExceedsSale = "refund_exceeds_sale"
)

// The queries of the refund check. A refund is read by its key, the sale through its event
// (sales are keyed by flow number, and sale_lines by nothing), and the sale's refunds
// through index refunds_sale, their lines by key. (Without INDEXED BY, SQLite takes the
// refunds' key for "terminal = ? AND seq <= ?" and reads every earlier refund of the
// terminal.)
const (
	selRefundSaleSeq = `SELECT sale_seq FROM refunds WHERE terminal = ? AND seq = ?`
	selRefundsOfSale = `SELECT seq, sale_id, at, business_date FROM refunds INDEXED BY refunds_sale
		WHERE terminal = ? AND sale_seq = ?`
	delOpenRefundException = `DELETE FROM refund_exceptions WHERE terminal = ? AND seq = ? AND resolved = 0`
	selRefundedSale        = `SELECT e.payload, s.sale_id, s.total FROM events e
		JOIN sales s ON s.business_date = e.business_date AND s.flow_no = e.flow_no
		WHERE e.terminal = ? AND e.seq = ? AND e.kind = 'sale' AND e.status = 'accepted'
			AND s.terminal = e.terminal AND s.seq = e.seq`
	selSaleRefundLines = `SELECT r.seq, l.n, l.line, l.sku, l.qty, l.amount FROM refunds r INDEXED BY refunds_sale
		JOIN refund_lines l ON l.terminal = r.terminal AND l.seq = r.seq
		WHERE r.terminal = ? AND r.sale_seq = ? AND r.sale_id = ? AND r.seq <= ?`
	// A refund's exception is written only when it changes (every change is numbered for
	// headquarters, exception_changes): an open one takes the problem found now; one a manager
	// resolved keeps it while its problem is the same, and another problem (its sale landed
	// after the resolution, and the refund turned out to exceed it) opens it again, the
	// earlier resolution kept in the detail for as long as the problem stays of that code.
	// The earlier resolution is kept in column earlier, which a reader shows after the
	// detail.
	insRefundException = `INSERT INTO refund_exceptions (terminal, seq, code, detail, at, business_date)
		VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (terminal, seq) DO UPDATE SET
			code = excluded.code, detail = excluded.detail,
			earlier = CASE
				WHEN refund_exceptions.resolved THEN ' (earlier ' || refund_exceptions.code || ', resolved: ' ||
					refund_exceptions.resolution || ')'
				WHEN refund_exceptions.code = excluded.code THEN refund_exceptions.earlier
				ELSE '' END,
			resolved = 0, resolved_at = '', resolution = ''
		WHERE refund_exceptions.code <> excluded.code OR
			(NOT refund_exceptions.resolved AND refund_exceptions.detail <> excluded.detail)`
)

// checkRefunds holds, once the group's rows are written, every refund of each sale the group
// touches to that sale, and keeps the sale's refund exceptions to what it finds (a refund
// exception per refund its records do not cover). A sale is touched by an accepted refund of
// it in the group, and by its own acceptance when the ledger already holds refunds of it.
// Those came first when the sale's first record did not stand: a live refusal resent offline
// once the terminal had decided it, and refunded it, on its own; or a record that failed to
// commit while ingest went on with the terminal's next events, and was sent again. All of a
// sale's refunds are held again, not only the group's, because refunds can be accepted out of
// seq order too (one refused live, resent offline after a later one): each is held to the
// sale with every refund of a lower seq, whenever it was committed.
//
// The refunds stand whatever is found: the gate has applied them, and an offline refund has
// paid the money out. An open exception a refund no longer deserves is deleted; one a
// manager resolved stays, unless the refund now has another problem (see insRefundException).
// Both ways of committing call this last, over the transaction's own rows, so a sale and its
// refund in one group are held as if committed one after the other. A group with sales asks
// index refunds_sale once (one multi-key statement per multiRows sales) which of them have refunds.
func (w *writer) checkRefunds(ctx context.Context, recs []Record, out []Outcome) error {
	touched := map[eventKey]bool{} // sales whose refunds to hold again
	var sales []any                // terminal, seq, … of the group's accepted sales
	for i := range recs {
		r, o := &recs[i], &out[i]
		if o.Status != wire.AckAccepted || o.Duplicate || o.Err != nil {
			continue
		}
		switch r.Kind {
		case wire.KindRefund:
			var saleSeq int64
			if err := w.scan(ctx, selRefundSaleSeq, []any{r.Terminal, r.Seq}, &saleSeq); err != nil {
				return fmt.Errorf("check refund %s: %w", wire.Key(r.Terminal, r.Seq), err)
			}
			touched[eventKey{r.Terminal, saleSeq}] = true
		case wire.KindSale:
			sales = append(sales, r.Terminal, r.Seq)
		}
	}
	err := selRefundedSales.chunks(len(sales)/2, func(query string, from, to int) error {
		return w.each(ctx, query, sales[2*from:2*to], func(rows *sql.Rows) error {
			var k eventKey
			if err := rows.Scan(&k.terminal, &k.seq); err != nil {
				return err
			}
			touched[k] = true
			return nil
		})
	})
	if err != nil {
		return fmt.Errorf("check refunds: %w", err)
	}
	keys := slices.SortedFunc(maps.Keys(touched), func(a, b eventKey) int {
		return cmp.Or(cmp.Compare(a.terminal, b.terminal), cmp.Compare(a.seq, b.seq))
	})
	for _, k := range keys {
		if err := w.holdRefunds(ctx, k.terminal, k.seq); err != nil {
			return fmt.Errorf("check refunds of sale %s: %w", wire.Key(k.terminal, k.seq), err)
		}
	}
	return nil
}

// selRefundedSales names, of the sales (terminal, seq) it is given, those the ledger holds
// refunds of.
var selRefundedSales = newMulti(`SELECT terminal, sale_seq FROM refunds INDEXED BY refunds_sale
	WHERE (terminal, sale_seq) IN (VALUES `, "(?, ?)", ")")

// holdRefunds holds every refund of the sale at (terminal, saleSeq) to it: it records an
// exception for each refund the ledger's records do not cover, and deletes the open
// exception of each they do (a resolved exception stays as the manager left it). An
// exception that stays as it was is not written.
func (w *writer) holdRefunds(ctx context.Context, terminal string, saleSeq int64) error {
	type refund struct {
		seq            int64
		saleID, at, dt string
	}
	var refunds []refund
	err := w.each(ctx, selRefundsOfSale, []any{terminal, saleSeq}, func(rows *sql.Rows) error {
		var r refund
		if err := rows.Scan(&r.seq, &r.saleID, &r.at, &r.dt); err != nil {
			return err
		}
		refunds = append(refunds, r)
		return nil
	})
	if err != nil {
		return err
	}
	for _, r := range refunds {
		code, detail, err := w.refundProblem(ctx, terminal, r.seq, r.saleID, saleSeq)
		switch {
		case err != nil:
			return err
		case code == "":
			err = w.exec(ctx, delOpenRefundException, terminal, r.seq)
		default:
			err = w.exec(ctx, insRefundException, terminal, r.seq, code, detail, r.at, r.dt)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// refundProblem returns the first problem of the refund (terminal, seq) of sale saleID at
// saleSeq, as a refund exception code and its detail ("" if the ledger covers it).
//
// The refund is held to its sale together with the earlier refunds of the same sale (same
// terminal, sale_seq and sale id, a lower seq): its lines must name lines of the sale with
// their SKUs, each line it names must not have been returned, in all, more than sold nor
// paid back more than the sale took for it, and the refunds' amounts must not add up to
// more than the sale's total.
func (w *writer) refundProblem(ctx context.Context, terminal string, seq int64, saleID string, saleSeq int64) (
	code, detail string, err error) {
	sale := wire.Key(terminal, saleSeq)
	var payload []byte
	var soldID string
	var total money.Fen
	err = w.scan(ctx, selRefundedSale, []any{terminal, saleSeq}, &payload, &soldID, &total)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return CodeRefundSaleUnknown, fmt.Sprintf("the store has no accepted sale %s", sale), nil
	case err != nil:
		return "", "", err
	case soldID != saleID:
		return CodeRefundSaleUnknown, fmt.Sprintf("sale %s is %q, not %q", sale, soldID, saleID), nil
	}
	var p wire.SalePayload // validated when the sale was committed
	if err := json.Unmarshal(payload, &p); err != nil {
		return CodeRefundSaleUnknown, fmt.Sprintf("the lines of sale %s cannot be read: %v", sale, err), nil
	}
	sold := make(map[int]wire.Line, len(p.Lines))
	for _, ln := range p.Lines {
		if _, ok := sold[ln.Line]; !ok { // a line number twice: the first is the line
			sold[ln.Line] = ln
		}
	}

	type line struct {
		n, line int
		sku     string
		qty     int64
		amount  money.Fen
	}
	var own []line                  // the refund's lines, put in order below
	back := map[int]int64{}         // line → quantity returned by the refund and the earlier ones
	backPaid := map[int]money.Fen{} // line → paid back for it by the refund and the earlier ones
	var paid money.Fen              // paid back by the refund and the earlier ones
	err = w.each(ctx, selSaleRefundLines, []any{terminal, saleSeq, saleID, seq}, func(rows *sql.Rows) error {
		var rseq int64
		var l line
		if err := rows.Scan(&rseq, &l.n, &l.line, &l.sku, &l.qty, &l.amount); err != nil {
			return err
		}
		back[l.line] += l.qty
		backPaid[l.line] += l.amount // each at most wire.MaxAmount: no overflow
		paid += l.amount
		if rseq == seq {
			own = append(own, l)
		}
		return nil
	})
	if err != nil {
		return "", "", err
	}
	slices.SortFunc(own, func(a, b line) int { return cmp.Compare(a.n, b.n) })

	for _, l := range own {
		s, ok := sold[l.line]
		switch {
		case !ok:
			return CodeRefundExceedsSale, fmt.Sprintf("sale %s has no line %d", sale, l.line), nil
		case s.SKU != l.sku:
			return CodeRefundExceedsSale, fmt.Sprintf("line %d of sale %s sold %q, not %q", l.line, sale, s.SKU, l.sku), nil
		}
	}
	for _, l := range own {
		s := sold[l.line]
		switch {
		case back[l.line] > s.Qty:
			return CodeRefundExceedsSale, fmt.Sprintf("line %d of sale %s (%q): %d returned in all, %d sold",
				l.line, sale, s.SKU, back[l.line], s.Qty), nil
		case backPaid[l.line] > s.Amount:
			return CodeRefundExceedsSale, fmt.Sprintf("line %d of sale %s (%q): %s paid back in all, %s taken for it",
				l.line, sale, s.SKU, backPaid[l.line], s.Amount), nil
		}
	}
	if paid > total {
		return CodeRefundExceedsSale, fmt.Sprintf("sale %s took %s, its refunds pay back %s in all", sale, total, paid), nil
	}
	return "", "", nil
}
