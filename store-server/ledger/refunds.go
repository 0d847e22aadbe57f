package ledger

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
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
// (sales are keyed by flow number, and sale_lines by nothing: migrations 003 and 004), and
// the sale's refunds through index refunds_sale, their lines by key. (Without INDEXED BY,
// SQLite takes the refunds' key for "terminal = ? AND seq <= ?" and reads every earlier
// refund of the terminal.)
const (
	selRefundOf     = `SELECT sale_id, sale_seq, at, business_date FROM refunds WHERE terminal = ? AND seq = ?`
	selRefundedSale = `SELECT e.payload, s.sale_id, s.total FROM events e
		JOIN sales s ON s.business_date = e.business_date AND s.flow_no = e.flow_no
		WHERE e.terminal = ? AND e.seq = ? AND e.kind = 'sale' AND e.status = 'accepted'
			AND s.terminal = e.terminal AND s.seq = e.seq`
	selSaleRefundLines = `SELECT r.seq, l.n, l.line, l.sku, l.qty, l.amount FROM refunds r INDEXED BY refunds_sale
		JOIN refund_lines l ON l.terminal = r.terminal AND l.seq = r.seq
		WHERE r.terminal = ? AND r.sale_seq = ? AND r.sale_id = ? AND r.seq <= ?`
	insRefundException = `INSERT INTO refund_exceptions (terminal, seq, code, detail, at, business_date)
		VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (terminal, seq) DO NOTHING`
)

// checkRefunds flags, once the group's rows are written, each refund the group accepted
// that the ledger's records do not cover (a refund exception). The refund stands: the gate
// has applied it, and an offline one has paid the money out. Both ways of committing call
// it last, over the transaction's own rows, so a sale and its refund in one group are
// checked as if committed one after the other. A group without a refund runs no query.
func (w *writer) checkRefunds(ctx context.Context, recs []Record, out []Outcome) error {
	for i := range recs {
		o := &out[i]
		if recs[i].Kind != wire.KindRefund || o.Status != wire.AckAccepted || o.Duplicate || o.Err != nil {
			continue
		}
		if err := w.checkRefund(ctx, recs[i].Terminal, recs[i].Seq); err != nil {
			return fmt.Errorf("check refund %s: %w", wire.Key(recs[i].Terminal, recs[i].Seq), err)
		}
	}
	return nil
}

// checkRefund records a refund exception for the accepted refund (terminal, seq) if the
// ledger's records do not cover it.
func (w *writer) checkRefund(ctx context.Context, terminal string, seq int64) error {
	var saleID, at, date string
	var saleSeq int64
	if err := w.scan(ctx, selRefundOf, []any{terminal, seq}, &saleID, &saleSeq, &at, &date); err != nil {
		return err
	}
	code, detail, err := w.refundProblem(ctx, terminal, seq, saleID, saleSeq)
	if err != nil || code == "" {
		return err
	}
	return w.exec(ctx, insRefundException, terminal, seq, code, detail, at, date)
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
	st, err := w.stmt(ctx, selSaleRefundLines)
	if err != nil {
		return "", "", err
	}
	rows, err := st.QueryContext(ctx, terminal, saleSeq, saleID, seq)
	if err != nil {
		return "", "", err
	}
	defer rows.Close()
	for rows.Next() {
		var rseq int64
		var l line
		if err := rows.Scan(&rseq, &l.n, &l.line, &l.sku, &l.qty, &l.amount); err != nil {
			return "", "", err
		}
		back[l.line] += l.qty
		backPaid[l.line] += l.amount // each at most wire.MaxAmount: no overflow
		paid += l.amount
		if rseq == seq {
			own = append(own, l)
		}
	}
	if err := rows.Err(); err != nil {
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
