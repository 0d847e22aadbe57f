package outbox

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/mattn/go-sqlite3"

	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/perr"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/terminal-agent/client"
)

// Mode says how the event a request creates will be decided.
type Mode struct {
	// Live: the agent will wait for the store's verdict (online, nothing queued ahead).
	Live bool
	// Disconnected: the store is unreachable now; offline caps apply.
	Disconnected bool
	// OfflineSince is when the store became unreachable (zero while connected).
	OfflineSince time.Time
}

// Tx is one request's unit of work: every change it makes commits together with the
// request's client token, or not at all.
type Tx struct {
	txStmts
	ctx  context.Context
	tx   *sql.Tx
	s    *Store
	now  time.Time
	mode Mode
	// Seq is the event the request created (0 if none).
	Seq int64
}

// Prior is the stored outcome of a request whose client token was seen before.
type Prior struct {
	Status int    // 0: committed, answer not recorded (the agent stopped before answering)
	Body   []byte // the recorded answer
	Ref    string // what the request acted on (a sale or refund id)
	Seq    int64  // the event it created
}

// Fingerprint identifies a request's content for client-token conflict detection.
func Fingerprint(method, path string, body []byte) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s %s\n", method, path)
	h.Write(body)
	return hex.EncodeToString(h.Sum(nil))
}

// Do runs fn in one transaction. With a client token, the token is recorded in the same
// transaction; a token seen before returns its Prior instead of running fn again, and a
// token reused for another request is a perr.Conflict. If fn fails nothing is stored.
//
// A full or failing disk is a *perr.Error of kind perr.Unavailable, code CodeStorageFull or
// CodeStorageError, with a message a cashier can act on; nothing of the request is stored.
func (s *Store) Do(ctx context.Context, token, fingerprint string, mode Mode,
	fn func(*Tx) (ref string, err error)) (ref string, seq int64, prior *Prior, err error) {
	ref, seq, prior, err = s.do(ctx, token, fingerprint, mode, fn)
	return ref, seq, prior, storageError(err)
}

// The codes of the storage errors (Do).
const (
	CodeStorageFull  = "storage_full"
	CodeStorageError = "storage_error"
)

// storageError turns SQLite's verdicts on the device's storage into coded errors: without
// them a full disk reads as "internal error; try again", and trying again cannot help.
func storageError(err error) error {
	var pe *perr.Error
	var se sqlite3.Error
	if err == nil || errors.As(err, &pe) || !errors.As(err, &se) {
		return err
	}
	switch se.Code {
	case sqlite3.ErrFull:
		return perr.Wrap(err, perr.Unavailable, CodeStorageFull,
			"the terminal's storage is full: this step was not recorded; free space on the device or call support")
	case sqlite3.ErrIoErr, sqlite3.ErrCorrupt, sqlite3.ErrNotADB, sqlite3.ErrCantOpen, sqlite3.ErrReadonly:
		return perr.Wrap(err, perr.Unavailable, CodeStorageError,
			"the terminal cannot write to its storage: this step was not recorded; call support")
	}
	return err
}

func (s *Store) do(ctx context.Context, token, fingerprint string, mode Mode,
	fn func(*Tx) (ref string, err error)) (ref string, seq int64, prior *Prior, err error) {
	tx, err := s.db.W.BeginTx(ctx, nil)
	if err != nil {
		return "", 0, nil, fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback()
	now := s.now()
	if token != "" {
		p, err := lookupRequest(txStmts{ctx: ctx, tx: tx, cache: s.wstmts}, token, fingerprint)
		if err != nil || p != nil {
			return "", 0, p, err
		}
	}
	t := &Tx{txStmts: txStmts{ctx: ctx, tx: tx, cache: s.wstmts}, ctx: ctx, tx: tx, s: s, now: now, mode: mode}
	if ref, err = fn(t); err != nil {
		return "", 0, nil, err
	}
	if token != "" {
		if _, err := t.exec(`INSERT INTO requests (token, fingerprint, ref, created_ms, body)
			VALUES (?, ?, ?, ?, ?)`, token, fingerprint, ref, now.UnixMilli(), seqBody(t.Seq)); err != nil {
			return "", 0, nil, fmt.Errorf("record request: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return "", 0, nil, fmt.Errorf("commit: %w", err)
	}
	s.wstmts.warm(ctx)
	return ref, t.Seq, nil, nil
}

// seqBody keeps the created event's seq in the body column until the answer replaces it.
func seqBody(seq int64) []byte { return []byte(fmt.Sprint(seq)) }

func lookupRequest(tx txStmts, token, fingerprint string) (*Prior, error) {
	if len(token) > 128 {
		return nil, perr.New(perr.Invalid, "idempotency_key_invalid", "Idempotency-Key is longer than 128 characters")
	}
	var p Prior
	var fp string
	err := tx.queryRow(`SELECT fingerprint, status, coalesce(body, ''), ref FROM requests WHERE token = ?`, token).
		Scan(&fp, &p.Status, &p.Body, &p.Ref)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("look up request: %w", err)
	}
	if fp != fingerprint {
		return nil, perr.New(perr.Conflict, "idempotency_key_reused",
			"this Idempotency-Key was already used for a different request")
	}
	if p.Status == 0 {
		fmt.Sscan(string(p.Body), &p.Seq)
		p.Body = nil
	}
	return &p, nil
}

// Forget drops the record of the request with client token token, so that the same
// request with the same token runs again (a step the store refused for now and that was
// undone).
func (s *Store) Forget(ctx context.Context, token string) error {
	if token == "" {
		return nil
	}
	err := s.unsynced(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `DELETE FROM requests WHERE token = ?`, token)
		return err
	})
	if err != nil {
		return fmt.Errorf("forget request: %w", err)
	}
	return nil
}

// Answer records the answer given for a client token, so that a retry gets it again.
//
// The record is committed without an fsync of its own (synchronous=NORMAL for this one
// transaction): the next commit's fsync, or the next checkpoint, carries it to the disk.
// Losing it to a power cut loses nothing: the request's own commit (Do) was durable, and a
// retry that finds no recorded answer is answered from the stored state, as after an agent
// that stopped before answering. A cashier's request thus waits for one fsync, not two.
func (s *Store) Answer(ctx context.Context, token string, status int, body []byte) error {
	if token == "" {
		return nil
	}
	err := s.unsynced(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `UPDATE requests SET status = ?, body = ? WHERE token = ?`, status, body, token)
		return err
	})
	if err != nil {
		return fmt.Errorf("record answer: %w", err)
	}
	return nil
}

// enqueue appends an event to the queue and returns its seq. The seq is the AUTOINCREMENT
// key's next value, read inside this write transaction (BEGIN IMMEDIATE holds the write
// lock), so the hash that covers it goes in with the same INSERT.
func (t *Tx) enqueue(kind wire.Kind, payload any, storedFen money.Fen) (int64, error) {
	body, err := json.Marshal(payload)
	if err != nil {
		return 0, fmt.Errorf("encode %s: %w", kind, err)
	}
	var seq int64
	if err := t.queryRow(`SELECT coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'events'), 0) + 1`).Scan(&seq); err != nil {
		return 0, fmt.Errorf("enqueue %s: %w", kind, err)
	}
	hash := wire.Hash(kind, t.s.cfg.Store, t.s.cfg.Terminal, seq, t.now, body)
	if _, err := t.exec(`INSERT INTO events (seq, kind, at, business_date, payload, hash, offline, stored_fen, created_ms)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`, seq, string(kind), t.now.Format(time.RFC3339Nano), t.s.BusinessDate(t.now), body,
		hash, !t.mode.Live, int64(storedFen), t.now.UnixMilli()); err != nil {
		return 0, fmt.Errorf("enqueue %s: %w", kind, err)
	}
	t.Seq = seq
	return seq, nil
}

// Enqueue appends an event that needs no verdict (a heartbeat) outside any request.
func (s *Store) Enqueue(ctx context.Context, kind wire.Kind, payload wire.Payload) (int64, error) {
	if err := payload.Validate(); err != nil {
		return 0, err
	}
	_, seq, _, err := s.Do(ctx, "", "", Mode{}, func(t *Tx) (string, error) {
		_, err := t.enqueue(kind, payload, 0)
		return "", err
	})
	return seq, err
}

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
	seq, err := t.enqueue(wire.KindScan, wire.ScanPayload{SaleID: saleID, Line: line, SKU: it.SKU, Qty: qty, UnitPrice: it.Price}, 0)
	if err != nil {
		return 0, err
	}
	if _, err := t.exec(`INSERT INTO sale_lines (sale_id, line, sku, name, qty, unit_price, amount, scan_seq)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, saleID, line, it.SKU, it.Name, qty, int64(it.Price), int64(amount), seq); err != nil {
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
	rows, err := t.query(`SELECT line, sku, name, qty, unit_price, amount FROM sale_lines
		WHERE sale_id = ? AND removed = 0 ORDER BY line`, saleID)
	if err != nil {
		return err
	}
	for rows.Next() {
		var l wire.Line
		if err := rows.Scan(&l.Line, &l.SKU, &l.Name, &l.Qty, &l.UnitPrice, &l.Amount); err != nil {
			rows.Close()
			return err
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

// Codes of a day close, and of steps on a closed day.
const (
	// CodeDayClosed refuses a step that would add to the totals of a business day this
	// terminal has closed.
	CodeDayClosed = "day_closed"
	// CodeDayNotStarted refuses a close of a business day that has not begun.
	CodeDayNotStarted = "business_date_future"
	// CodeSalePaidOpen refuses closing the day while a sale has payments taken and is not
	// complete: it could not be completed on the closed day.
	CodeSalePaidOpen = "sale_paid_open"
)

// dayOpen refuses a step that would add to the totals of a business day this terminal has
// closed. The close declared them to the store and headquarters, once: a sale after it made
// the declaration short for good, and the day never reconciled.
func (t *Tx) dayOpen() error {
	date := t.s.BusinessDate(t.now)
	var seq int64
	err := t.queryRow(`SELECT seq FROM day_closes WHERE business_date = ?`, date).Scan(&seq)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil
	case err != nil:
		return err
	}
	return perr.New(perr.Refused, CodeDayClosed,
		"business day %s is closed at this terminal (its totals are declared); sales and refunds go on the next business day, "+
			"or a supervisor reopens the day", date)
}

// CodeVerdictPending refuses a payment or refund built on a step of the sale that the store
// may still refuse: its live verdict has not come.
const CodeVerdictPending = "verdict_pending"

// selUndecided lists a sale's events sent live whose verdict has not come: its scans, and
// its completion. The store may still refuse one, which undoes it.
const selUndecided = `SELECT seq FROM events WHERE state = 'pending' AND offline = 0 AND seq IN (
	SELECT scan_seq FROM sale_lines WHERE sale_id = ? AND scan_seq IS NOT NULL
	UNION ALL SELECT seq FROM sales WHERE id = ? AND seq IS NOT NULL) ORDER BY seq`

// Undecided returns the seqs of the sale's events that wait for the store's live verdict.
func (s *Store) Undecided(ctx context.Context, saleID string) ([]int64, error) {
	rows, err := s.readRows(ctx, selUndecided, saleID, saleID)
	if err != nil {
		return nil, err
	}
	return scanSeqs(rows)
}

// UndecidedSteps returns the seqs of sale and refund events that wait for the store's live
// verdict, of any sale: a day close waits for them.
func (s *Store) UndecidedSteps(ctx context.Context) ([]int64, error) {
	rows, err := s.readRows(ctx, `SELECT seq FROM events WHERE state = 'pending' AND offline = 0
		AND kind IN ('sale', 'refund') ORDER BY seq`)
	if err != nil {
		return nil, err
	}
	return scanSeqs(rows)
}

// settled refuses a step built on a step of the sale whose live verdict has not come: a
// payment taken on a line the store then refuses, or a refund of a sale it then refuses,
// could not be undone with it, and the till and the store would hold different sales.
func (t *Tx) settled(saleID string) error {
	rows, err := t.query(selUndecided, saleID, saleID)
	if err != nil {
		return err
	}
	seqs, err := scanSeqs(rows)
	if err != nil {
		return err
	}
	if len(seqs) > 0 {
		return perr.New(perr.Refused, CodeVerdictPending,
			"a step of sale %q (event %d) still waits for the store's verdict; try again in a moment", saleID, seqs[0])
	}
	return nil
}

func scanSeqs(rows *sql.Rows) ([]int64, error) {
	defer rows.Close()
	var seqs []int64
	for rows.Next() {
		var seq int64
		if err := rows.Scan(&seq); err != nil {
			return nil, err
		}
		seqs = append(seqs, seq)
	}
	return seqs, rows.Err()
}

// Refund refunds lines of a completed sale (all remaining quantities if lines is empty) and
// queues a refund event. method defaults to the sale's largest payment's method.
func (t *Tx) Refund(saleID string, lines []client.RefundLine, method, reference string, restock bool) (string, error) {
	if t.mode.Disconnected && !t.s.cfg.Caps.OfflineRefunds {
		return "", perr.New(perr.Refused, "refund_offline_disabled", "refunds need the network on this terminal")
	}
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
		Method: method, Reference: reference, Restock: restock}
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
	if err := p.Validate(); err != nil {
		return "", err
	}
	seq, err := t.enqueue(wire.KindRefund, p, 0)
	if err != nil {
		return "", err
	}
	if _, err := t.exec(`INSERT INTO refunds (id, sale_id, seq, at, business_date, amount, method, reference, restock)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`, p.RefundID, saleID, seq, t.now.Format(time.RFC3339Nano),
		t.s.BusinessDate(t.now), int64(p.Amount), method, reference, restock); err != nil {
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

// CodeNothingToClose refuses a day close that names no day when no business day with sales
// or refunds is open at the terminal within the close lookback.
const CodeNothingToClose = "nothing_to_close"

// CodeDayAmbiguous refuses a day close that names no day while more than one business day
// with sales or refunds is open at the terminal within the close lookback: the cashier names
// the one to close.
const CodeDayAmbiguous = "day_to_close_ambiguous"

// DefaultCloseLookbackDays is how many days before today a close that names no day looks
// for an open business day, unless Config.CloseLookbackDays says otherwise (DayToClose).
const DefaultCloseLookbackDays = 7

// DayToClose returns the business day a close that names none closes: the one business day
// from CloseLookbackDays (7) days before today up to today (now, in the store's zone) with a
// completed sale or a refund at this terminal that is not closed. With none it is
// nothing_to_close; with several it is day_to_close_ambiguous, naming them, since closing the
// wrong one locks the till out of a day's trade until a supervisor reopens it. Every default tried
// guessed wrong somewhere: today's date closed the new, empty day after midnight; the latest
// open day closed the new day after a sale at 00:01; the oldest lagged a day behind for good
// after one missed close; an hour of the day locked a night shift out of the morning.
//
// An open day older than the lookback is no candidate (OldOpenDays lists it, and a
// supervisor closes it by name): a till whose clock, reset by a dead RTC, dated an offline
// sale years back would otherwise make every close ambiguous until someone named that day.
// The cashier's evening close is about the days just traded, and a week covers a close
// missed over a long weekend; a day missed for longer needs someone who knows why.
func (s *Store) DayToClose(ctx context.Context, now time.Time) (string, error) {
	open, old, err := s.openDays(ctx, now)
	if err != nil {
		return "", err
	}
	var also string
	if len(old) > 0 {
		also = fmt.Sprintf("; open more than %d days back, left for a supervisor to close by date: %s",
			s.closeLookbackDays(), strings.Join(old, ", "))
	}
	switch len(open) {
	case 0:
		return "", perr.New(perr.Refused, CodeNothingToClose,
			"no business day with sales or refunds is open at this terminal; name the day to close (business_date)%s", also)
	case 1:
		return open[0], nil
	}
	return "", perr.New(perr.Refused, CodeDayAmbiguous,
		"business days %s are open at this terminal; name the one to close (business_date)%s", strings.Join(open, ", "), also)
}

// OldOpenDays returns the business days, in order, with a completed sale or a refund at this
// terminal that are not closed and are older than the lookback of a close that names no day
// (DayToClose): they are closed by naming them.
func (s *Store) OldOpenDays(ctx context.Context, now time.Time) ([]string, error) {
	_, old, err := s.openDays(ctx, now)
	return old, err
}

func (s *Store) closeLookbackDays() int {
	if s.cfg.CloseLookbackDays > 0 {
		return s.cfg.CloseLookbackDays
	}
	return DefaultCloseLookbackDays
}

// openDays returns the business days up to today (now, in the store's zone) with a completed
// sale or a refund at this terminal that are not closed, in order: those within the close
// lookback (recent), and those before it (old).
func (s *Store) openDays(ctx context.Context, now time.Time) (recent, old []string, err error) {
	today := s.BusinessDate(now)
	d, err := time.Parse(wire.BusinessDate, today)
	if err != nil {
		return nil, nil, err
	}
	from := d.AddDate(0, 0, -s.closeLookbackDays()).Format(wire.BusinessDate) // dates, not instants: no DST
	// Each traded day is found by one seek from the one before (indexes sales_day and
	// refunds_day), not by reading every sale and refund the till has made.
	rows, err := s.readRows(ctx, `WITH RECURSIVE
			s(day) AS (SELECT min(business_date) FROM sales WHERE state = 'completed'
				UNION ALL SELECT (SELECT min(business_date) FROM sales WHERE state = 'completed' AND business_date > s.day)
				FROM s WHERE s.day IS NOT NULL),
			r(day) AS (SELECT min(business_date) FROM refunds WHERE state = 'done'
				UNION ALL SELECT (SELECT min(business_date) FROM refunds WHERE state = 'done' AND business_date > r.day)
				FROM r WHERE r.day IS NOT NULL)
		SELECT day FROM (SELECT day FROM s UNION SELECT day FROM r)
		WHERE day IS NOT NULL AND day <= ? AND day NOT IN (SELECT business_date FROM day_closes)
		ORDER BY day`, today)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var day string
		if err := rows.Scan(&day); err != nil {
			return nil, nil, err
		}
		if day < from { // YYYY-MM-DD orders as text
			old = append(old, day)
		} else {
			recent = append(recent, day)
		}
	}
	return recent, old, rows.Err()
}

// DayClose queues the terminal's totals for a business day, which are then final: no sale,
// payment or refund is taken on that day at this terminal any more (day_closed), until a
// supervisor reopens the day (DayReopen); its next close is then a new close of all the
// day's trade. Closing a closed day again returns its close. A day that has not begun cannot be closed, nor one
// while a sale or refund waits for the store's live verdict (verdict_pending: its refusal
// would undo it under the close), nor today while a sale has payments taken and is not
// complete.
func (t *Tx) DayClose(date string) (wire.DayClosePayload, error) {
	var p wire.DayClosePayload
	if _, err := time.Parse(wire.BusinessDate, date); err != nil {
		return p, perr.New(perr.Invalid, "business_date_invalid", "business date %q is not YYYY-MM-DD", date)
	}
	var body []byte
	err := t.queryRow(`SELECT seq, payload FROM day_closes WHERE business_date = ?`, date).Scan(&t.Seq, &body)
	if err == nil {
		return p, json.Unmarshal(body, &p)
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return p, err
	}
	today := t.s.BusinessDate(t.now)
	if date > today { // YYYY-MM-DD orders as text
		return p, perr.New(perr.Refused, CodeDayNotStarted, "business day %s has not begun (today is %s)", date, today)
	}
	var seq int64
	err = t.queryRow(`SELECT seq FROM events WHERE state = 'pending' AND offline = 0 AND kind IN ('sale', 'refund')
		ORDER BY seq LIMIT 1`).Scan(&seq)
	switch {
	case err == nil:
		return p, perr.New(perr.Refused, CodeVerdictPending,
			"event %d still waits for the store's verdict; close the day again in a moment", seq)
	case !errors.Is(err, sql.ErrNoRows):
		return p, err
	}
	if date == today {
		var id string
		err = t.queryRow(`SELECT s.id FROM sales s WHERE s.state = 'open' AND EXISTS (
			SELECT 1 FROM payments p WHERE p.sale_id = s.id AND p.voided = 0) LIMIT 1`).Scan(&id)
		switch {
		case err == nil:
			return p, perr.New(perr.Refused, CodeSalePaidOpen,
				"sale %q has payments taken and is not complete: complete or cancel it before closing the day", id)
		case !errors.Is(err, sql.ErrNoRows):
			return p, err
		}
	}
	if p, err = dayTotals(t.ctx, t.tx, date); err != nil {
		return p, err
	}
	if seq, err = t.enqueue(wire.KindDayClose, p, 0); err != nil {
		return p, err
	}
	body, _ = json.Marshal(p)
	_, err = t.exec(`INSERT INTO day_closes (business_date, seq, payload) VALUES (?, ?, ?)`, date, seq, body)
	return p, err
}

type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// DayTotals returns the terminal's own totals for a business day: completed sales (per
// payment method, cash net of change) and refunds.
func (s *Store) DayTotals(ctx context.Context, date string) (wire.DayClosePayload, error) {
	return dayTotals(ctx, s.db.R, date)
}

func dayTotals(ctx context.Context, q querier, date string) (wire.DayClosePayload, error) {
	p := wire.DayClosePayload{BusinessDate: date, Methods: []wire.MethodTotal{}}
	by := map[string]*wire.MethodTotal{}
	get := func(m string) *wire.MethodTotal {
		if by[m] == nil {
			by[m] = &wire.MethodTotal{Method: m}
		}
		return by[m]
	}
	rows, err := q.QueryContext(ctx, `SELECT p.method, count(DISTINCT s.id), sum(p.amount)
		FROM sales s JOIN payments p ON p.sale_id = s.id AND p.voided = 0
		WHERE s.state = 'completed' AND s.business_date = ? GROUP BY p.method`, date)
	if err != nil {
		return p, fmt.Errorf("day totals: %w", err)
	}
	for rows.Next() {
		var m string
		var n int64
		var amt money.Fen
		if err := rows.Scan(&m, &n, &amt); err != nil {
			rows.Close()
			return p, err
		}
		mt := get(m)
		mt.SaleCount, mt.SaleAmount = n, amt
	}
	rows.Close()
	// Change is given in cash: take it off the cash figure.
	var change, count, total money.Fen
	if err := scanOne(ctx, q, `SELECT coalesce(sum(change), 0), count(*), coalesce(sum(total), 0) FROM sales
		WHERE state = 'completed' AND business_date = ?`, []any{date}, &change, &count, &total); err != nil {
		return p, err
	}
	if change > 0 {
		get(wire.MethodCash).SaleAmount -= change
	}
	p.SaleCount, p.SaleAmount = int64(count), total
	rows, err = q.QueryContext(ctx, `SELECT method, count(*), sum(amount) FROM refunds
		WHERE state = 'done' AND business_date = ? GROUP BY method`, date)
	if err != nil {
		return p, fmt.Errorf("day totals: %w", err)
	}
	for rows.Next() {
		var m string
		var n int64
		var amt money.Fen
		if err := rows.Scan(&m, &n, &amt); err != nil {
			rows.Close()
			return p, err
		}
		mt := get(m)
		mt.RefundCount, mt.RefundAmount = n, amt
		p.RefundCount += n
		p.RefundAmount += amt
	}
	rows.Close()
	for _, m := range []string{wire.MethodCash, wire.MethodCard, wire.MethodQR} {
		if by[m] != nil {
			p.Methods = append(p.Methods, *by[m])
		}
	}
	return p, nil
}

func scanOne(ctx context.Context, q querier, query string, args []any, dest ...any) error {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	if !rows.Next() {
		return sql.ErrNoRows
	}
	if err := rows.Scan(dest...); err != nil {
		return err
	}
	return rows.Err()
}
