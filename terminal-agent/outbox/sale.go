package outbox

import (
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/perr"
	"github.com/posgate/posgate/internal/wire"
)

// Sale errors.
var (
	errSaleNotFound = func(id string) error {
		return perr.New(perr.NotFound, "sale_not_found", "sale %q does not exist", id)
	}
	errSaleNotOpen = func(id, state string) error {
		return perr.New(perr.Refused, "sale_not_open", "sale %q is %s, not open", id, state)
	}
)

// OpenSale opens a new sale.
func (t *Tx) OpenSale() (string, error) {
	if err := t.dayOpen(); err != nil {
		return "", err
	}
	id := newID(t.s.cfg.Terminal)
	_, err := t.exec(`INSERT INTO sales (id, state, opened_at) VALUES (?, 'open', ?)`,
		id, t.now.Format(time.RFC3339Nano))
	if err != nil {
		return "", fmt.Errorf("open sale: %w", err)
	}
	return id, nil
}

func (t *Tx) saleState(id string) (string, error) {
	var state string
	err := t.queryRow(`SELECT state FROM sales WHERE id = ?`, id).Scan(&state)
	if errors.Is(err, sql.ErrNoRows) {
		return "", errSaleNotFound(id)
	}
	return state, err
}

func (t *Tx) openSale(id string) error {
	state, err := t.saleState(id)
	if err != nil {
		return err
	}
	if state != "open" {
		return errSaleNotOpen(id, state)
	}
	return nil
}

// CatalogItem is a priced item from the cached catalog.
type CatalogItem = wire.CatalogItem

// lookupItem finds an item by SKU or barcode in the cached catalog.
func (t *Tx) lookupItem(sku, barcode string) (CatalogItem, error) {
	var it CatalogItem
	var bc sql.NullString
	q, arg := `SELECT sku, barcode, name, price FROM catalog WHERE sku = ?`, sku
	if sku == "" {
		q, arg = `SELECT sku, barcode, name, price FROM catalog WHERE barcode = ?`, barcode
	}
	err := t.queryRow(q, arg).Scan(&it.SKU, &bc, &it.Name, &it.Price)
	if errors.Is(err, sql.ErrNoRows) {
		if sku == "" {
			return it, perr.New(perr.NotFound, "unknown_barcode", "barcode %q is not in the catalog", barcode)
		}
		return it, perr.New(perr.NotFound, "unknown_sku", "SKU %q is not in the catalog", sku)
	}
	it.Barcode = bc.String
	return it, err
}

// AddLine adds qty of an item (by SKU or barcode, priced from the cached catalog) to an open
// sale and queues a scan event. It returns the new line number.
func (t *Tx) AddLine(saleID, sku, barcode string, qty int64) (int, error) {
	if (sku == "") == (barcode == "") {
		return 0, perr.New(perr.Invalid, "item_required", "give either a sku or a barcode")
	}
	if qty <= 0 || qty > wire.MaxQty {
		return 0, perr.New(perr.Invalid, wire.CodeQuantity, "quantity must be between 1 and %d", wire.MaxQty)
	}
	if err := t.openSale(saleID); err != nil {
		return 0, err
	}
	if err := t.dayOpen(); err != nil {
		return 0, err
	}
	it, err := t.lookupItem(sku, barcode)
	if err != nil {
		return 0, err
	}
	amount, err := money.Mul(it.Price, qty)
	if err != nil {
		return 0, err
	}
	total, _, _, lines, err := t.saleTotals(saleID)
	if err != nil {
		return 0, err
	}
	if lines >= wire.MaxLines {
		return 0, perr.New(perr.Refused, "too_many_lines", "a sale holds at most %d lines", wire.MaxLines)
	}
	if sum, err := money.Add(total, amount); err != nil || sum > wire.MaxAmount {
		return 0, perr.New(perr.Refused, wire.CodeTooLarge, "with this line the sale would come to more than the %s one sale may",
			wire.MaxAmount)
	}
	var line int
	if err := t.queryRow(`SELECT next_line FROM sales WHERE id = ?`, saleID).Scan(&line); err != nil {
		return 0, err
	}
	var version int64 // the catalog the line is priced from
	if err := t.queryRow(`SELECT coalesce((SELECT v FROM kv WHERE k = ?), 0)`, KVCatalogVersion).Scan(&version); err != nil {
		return 0, err
	}
	seq, err := t.enqueue(wire.KindScan, wire.ScanPayload{SaleID: saleID, Line: line, SKU: it.SKU, Qty: qty, UnitPrice: it.Price}, 0)
	if err != nil {
		return 0, err
	}
	if _, err := t.exec(`INSERT INTO sale_lines (sale_id, line, sku, name, qty, unit_price, amount, scan_seq, catalog_version)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`, saleID, line, it.SKU, it.Name, qty, int64(it.Price), int64(amount), seq,
		version); err != nil {
		return 0, fmt.Errorf("add line: %w", err)
	}
	if _, err := t.exec(`UPDATE sales SET next_line = next_line + 1 WHERE id = ?`, saleID); err != nil {
		return 0, err
	}
	return line, nil
}

// RemoveLine removes a line from an open sale.
func (t *Tx) RemoveLine(saleID string, line int) error {
	if err := t.openSale(saleID); err != nil {
		return err
	}
	var paid int64
	if err := t.queryRow(`SELECT count(*) FROM payments WHERE sale_id = ? AND voided = 0`, saleID).Scan(&paid); err != nil {
		return err
	}
	if paid > 0 {
		return perr.New(perr.Refused, "sale_has_payments", "lines cannot change once a payment is taken; cancel the sale instead")
	}
	res, err := t.exec(`UPDATE sale_lines SET removed = 1 WHERE sale_id = ? AND line = ? AND removed = 0`, saleID, line)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return perr.New(perr.NotFound, "line_not_found", "sale %q has no line %d", saleID, line)
	}
	return nil
}

// saleTotals returns the total of a sale's lines and what its live payments add up to.
func (t *Tx) saleTotals(saleID string) (total, paid, cash money.Fen, n int, err error) {
	err = t.queryRow(`SELECT
		coalesce((SELECT sum(amount) FROM sale_lines WHERE sale_id = ?1 AND removed = 0), 0),
		coalesce((SELECT sum(amount) FROM payments WHERE sale_id = ?1 AND voided = 0), 0),
		coalesce((SELECT sum(amount) FROM payments WHERE sale_id = ?1 AND voided = 0 AND method = 'cash'), 0),
		(SELECT count(*) FROM sale_lines WHERE sale_id = ?1 AND removed = 0)`, saleID).Scan(&total, &paid, &cash, &n)
	return
}

// Pay takes one payment for an open sale. When the payments cover the total the sale
// completes and its sale event is queued (Tx.Seq); cash over the total is change.
func (t *Tx) Pay(saleID, method string, amount money.Fen, reference string) error {
	if !wire.ValidMethod(method) {
		return perr.New(perr.Invalid, wire.CodeMethod, "payment method %q is not cash, card or qr", method)
	}
	if amount <= 0 {
		return perr.New(perr.Invalid, money.CodeNotPositive, "a payment amount must be positive")
	}
	if method != wire.MethodCash && reference == "" {
		return perr.New(perr.Invalid, "reference_required", "a %s payment needs the payment device's reference", method)
	}
	if len(reference) > wire.MaxTextLen {
		return perr.New(perr.Invalid, "reference_too_long", "the payment reference is longer than %d characters", wire.MaxTextLen)
	}
	if err := t.openSale(saleID); err != nil {
		return err
	}
	if err := t.settled(saleID); err != nil {
		return err
	}
	if err := t.dayOpen(); err != nil {
		return err
	}
	total, paid, _, lines, err := t.saleTotals(saleID)
	if err != nil {
		return err
	}
	if lines == 0 {
		return perr.New(perr.Refused, "sale_empty", "the sale has no lines to pay for")
	}
	due := total - paid
	if method != wire.MethodCash && amount > due {
		return perr.New(perr.Refused, "overpayment", "a %s payment of %s is more than the %s due", method, amount, due)
	}
	if _, err := money.Add(paid, amount); err != nil {
		return err
	}
	if amount > wire.MaxAmount {
		return perr.New(perr.Invalid, wire.CodeTooLarge, "a payment may be at most %s", wire.MaxAmount)
	}
	if method != wire.MethodCash {
		if err := t.checkOfflineCaps(amount); err != nil {
			return err
		}
	}
	var n int
	if err := t.queryRow(`SELECT count(*) FROM payments WHERE sale_id = ?`, saleID).Scan(&n); err != nil {
		return err
	}
	if n >= wire.MaxPayments {
		return perr.New(perr.Refused, "too_many_payments", "a sale takes at most %d payments", wire.MaxPayments)
	}
	if _, err := t.exec(`INSERT INTO payments (sale_id, n, method, amount, reference) VALUES (?, ?, ?, ?, ?)`,
		saleID, n+1, method, int64(amount), reference); err != nil {
		return fmt.Errorf("record payment: %w", err)
	}
	if paid+amount < total {
		return nil
	}
	return t.complete(saleID, total, paid+amount)
}

func (t *Tx) checkOfflineCaps(amount money.Fen) error {
	if !t.mode.Disconnected {
		return nil
	}
	caps := t.s.cfg.Caps
	if caps.MaxCardPayment > 0 && amount > caps.MaxCardPayment {
		return perr.New(perr.Refused, "offline_cap_payment",
			"offline, a card or QR payment may be at most %s; take cash or wait for the network", caps.MaxCardPayment)
	}
	// A time offline that starts after now is one the clock was set back under: how long it
	// has lasted is unknown, and may be past the cap.
	if off := t.mode.OfflineSince; caps.MaxOffline > 0 && !off.IsZero() &&
		(t.now.Sub(off) > caps.MaxOffline || off.After(t.now)) {
		return perr.New(perr.Refused, "offline_too_long",
			"this terminal has been offline longer than %s; card and QR payments need the network, take cash", caps.MaxOffline)
	}
	if caps.MaxStoredCard > 0 {
		// Held offline: the card and QR money of the events waiting to sync, and that of the
		// sales still open, which their sale events will hold once they complete.
		var stored money.Fen
		if err := t.queryRow(`SELECT coalesce((SELECT sum(stored_fen) FROM events WHERE state = 'pending'), 0) +
			coalesce((SELECT sum(p.amount) FROM payments p JOIN sales s ON s.id = p.sale_id
				WHERE s.state = 'open' AND p.method != 'cash' AND p.voided = 0), 0)`).Scan(&stored); err != nil {
			return err
		}
		if stored+amount > caps.MaxStoredCard {
			return perr.New(perr.Refused, "offline_cap_total",
				"offline card and QR payments waiting to sync would exceed %s; take cash or wait for the network", caps.MaxStoredCard)
		}
	}
	return nil
}

// complete closes a fully paid sale and queues its sale event.
func (t *Tx) complete(saleID string, total, paid money.Fen) error {
	p := wire.SalePayload{SaleID: saleID, Total: total, Change: paid - total}
	var openedAt string
	if err := t.queryRow(`SELECT opened_at FROM sales WHERE id = ?`, saleID).Scan(&openedAt); err != nil {
		return err
	}
	p.OpenedAt, _ = time.Parse(time.RFC3339Nano, openedAt)
	rows, err := t.query(`SELECT line, sku, name, qty, unit_price, amount, catalog_version FROM sale_lines
		WHERE sale_id = ? AND removed = 0 ORDER BY line`, saleID)
	if err != nil {
		return err
	}
	for rows.Next() {
		var l wire.Line
		var v int64
		if err := rows.Scan(&l.Line, &l.SKU, &l.Name, &l.Qty, &l.UnitPrice, &l.Amount, &v); err != nil {
			rows.Close()
			return err
		}
		// The sale names the oldest catalog its lines were priced from (a catalog that
		// came mid-sale priced only the lines after it).
		if len(p.Lines) == 0 || v < p.CatalogVersion {
			p.CatalogVersion = v
		}
		p.Lines = append(p.Lines, l)
	}
	rows.Close()
	var stored money.Fen
	rows, err = t.query(`SELECT method, amount, reference FROM payments WHERE sale_id = ? AND voided = 0 ORDER BY n`, saleID)
	if err != nil {
		return err
	}
	for rows.Next() {
		var pm wire.Payment
		if err := rows.Scan(&pm.Method, &pm.Amount, &pm.Reference); err != nil {
			rows.Close()
			return err
		}
		if pm.Method != wire.MethodCash {
			stored += pm.Amount
		}
		p.Payments = append(p.Payments, pm)
	}
	rows.Close()
	if err := p.Validate(); err != nil {
		if perr.CodeOf(err) == wire.CodeTooLarge {
			return err
		}
		return perr.Wrap(err, perr.Refused, "change_not_cash", "change can only be given for cash: %s", perr.As(err).Message)
	}
	if t.mode.Live {
		stored = 0 // a live sale's card money is not held offline
	}
	seq, err := t.enqueue(wire.KindSale, p, stored)
	if err != nil {
		return err
	}
	_, err = t.exec(`UPDATE sales SET state = 'completed', completed_at = ?, business_date = ?,
		total = ?, change = ?, seq = ? WHERE id = ?`, t.now.Format(time.RFC3339Nano), t.s.BusinessDate(t.now),
		int64(total), int64(p.Change), seq, saleID)
	return err
}

// Cancel cancels an open sale; payments already taken are voided (the POS app reverses them
// on its payment device).
func (t *Tx) Cancel(saleID string) error {
	if err := t.openSale(saleID); err != nil {
		return err
	}
	if _, err := t.exec(`UPDATE payments SET voided = 1 WHERE sale_id = ?`, saleID); err != nil {
		return err
	}
	_, err := t.exec(`UPDATE sales SET state = 'cancelled' WHERE id = ?`, saleID)
	return err
}
