package outbox

import (
	"fmt"
	"time"

	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/perr"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/terminal-agent/client"
)

// Refund refunds lines of a completed sale (all remaining quantities if lines is empty) and
// queues a refund event. method defaults to the sale's largest payment's method. approvedBy
// names the supervisor whose PIN was checked (Approve), or is empty: a refund made offline,
// or above the store's threshold, is refused without one (needApproval).
func (t *Tx) Refund(saleID string, lines []client.RefundLine, method, reference string, restock bool,
	approvedBy string) (string, error) {
	state, err := t.saleState(saleID)
	if err != nil {
		return "", err
	}
	if state != "completed" {
		return "", perr.New(perr.Refused, "sale_not_completed", "sale %q is %s; only a completed sale can be refunded", saleID, state)
	}
	if err := t.settled(saleID); err != nil {
		return "", err
	}
	if err := t.dayOpen(); err != nil {
		return "", err
	}
	var saleSeq int64
	if err := t.queryRow(`SELECT seq FROM sales WHERE id = ?`, saleID).Scan(&saleSeq); err != nil {
		return "", err
	}
	if method == "" {
		if err := t.queryRow(`SELECT method FROM payments WHERE sale_id = ? AND voided = 0
			ORDER BY amount DESC, n LIMIT 1`, saleID).Scan(&method); err != nil {
			return "", err
		}
	}
	if !wire.ValidMethod(method) {
		return "", perr.New(perr.Invalid, wire.CodeMethod, "refund method %q is not cash, card or qr", method)
	}
	if method != wire.MethodCash && reference == "" {
		return "", perr.New(perr.Invalid, "reference_required", "a %s refund needs the payment device's reference", method)
	}
	left, err := t.refundable(saleID)
	if err != nil {
		return "", err
	}
	if len(lines) == 0 {
		for _, l := range left {
			if l.Qty > 0 {
				lines = append(lines, client.RefundLine{Line: l.Line, Qty: l.Qty})
			}
		}
		if len(lines) == 0 {
			return "", perr.New(perr.Refused, "already_refunded", "sale %q is already fully refunded", saleID)
		}
	}
	p := wire.RefundPayload{RefundID: newID("R" + t.s.cfg.Terminal), SaleID: saleID, SaleSeq: saleSeq,
		Method: method, Reference: reference, Restock: restock, ApprovedBy: approvedBy}
	seen := map[int]bool{}
	for _, rl := range lines {
		l, ok := left[rl.Line]
		switch {
		case !ok:
			return "", perr.New(perr.NotFound, "line_not_found", "sale %q has no line %d", saleID, rl.Line)
		case seen[rl.Line]:
			return "", perr.New(perr.Invalid, "line_repeated", "line %d is listed twice", rl.Line)
		case rl.Qty <= 0:
			return "", perr.New(perr.Invalid, wire.CodeQuantity, "refund quantity must be positive")
		case rl.Qty > l.Qty:
			return "", perr.New(perr.Refused, "refund_exceeds_sale", "line %d has only %d left to refund", rl.Line, l.Qty)
		}
		seen[rl.Line] = true
		amt, err := money.Mul(l.UnitPrice, rl.Qty)
		if err != nil {
			return "", err
		}
		p.Lines = append(p.Lines, wire.RefundLine{Line: rl.Line, SKU: l.SKU, Qty: rl.Qty, Amount: amt})
		p.Amount += amt
	}
	if p.Amount <= 0 {
		return "", perr.New(perr.Refused, "refund_zero", "nothing to refund: the lines are free")
	}
	if err := t.needApproval(p.Amount, approvedBy); err != nil {
		return "", err
	}
	if err := p.Validate(); err != nil {
		return "", err
	}
	seq, err := t.enqueue(wire.KindRefund, p, 0)
	if err != nil {
		return "", err
	}
	if _, err := t.exec(`INSERT INTO refunds (id, sale_id, seq, at, business_date, amount, method, reference, restock,
		approved_by) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, p.RefundID, saleID, seq, t.now.Format(time.RFC3339Nano),
		t.s.BusinessDate(t.now), int64(p.Amount), method, reference, restock, approvedBy); err != nil {
		return "", fmt.Errorf("record refund: %w", err)
	}
	for _, l := range p.Lines {
		if _, err := t.exec(`INSERT INTO refund_lines (refund_id, line, sku, qty, amount) VALUES (?, ?, ?, ?, ?)`,
			p.RefundID, l.Line, l.SKU, l.Qty, int64(l.Amount)); err != nil {
			return "", fmt.Errorf("record refund: %w", err)
		}
	}
	return p.RefundID, nil
}

type refundableLine struct {
	Line      int
	SKU       string
	Qty       int64
	UnitPrice money.Fen
}

// refundable returns each line of a sale with the quantity not yet refunded.
func (t *Tx) refundable(saleID string) (map[int]refundableLine, error) {
	rows, err := t.query(`SELECT l.line, l.sku, l.unit_price, l.qty - coalesce((
			SELECT sum(rl.qty) FROM refund_lines rl JOIN refunds r ON r.id = rl.refund_id
			WHERE r.sale_id = l.sale_id AND r.state = 'done' AND rl.line = l.line), 0)
		FROM sale_lines l WHERE l.sale_id = ? AND l.removed = 0`, saleID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[int]refundableLine{}
	for rows.Next() {
		var l refundableLine
		if err := rows.Scan(&l.Line, &l.SKU, &l.UnitPrice, &l.Qty); err != nil {
			return nil, err
		}
		out[l.Line] = l
	}
	return out, rows.Err()
}
