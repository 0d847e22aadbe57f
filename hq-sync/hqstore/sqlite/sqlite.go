// Package sqlite is HQ's embedded storage engine: hqstore.Storage on one SQLite file, opened by
// internal/sqlitedb (WAL, synchronous=FULL, one writer connection) with the migrations of
// schema.HQ.
//
// A batch is stored in one IMMEDIATE transaction on the writer connection, so concurrent
// PutBatch calls are serialized and a batch is stored whole or not at all. Reads run on the
// read-only pool and see a consistent snapshot. The package never stores a batch
// partially and never weakens durability.
package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/posgate/posgate/hq-sync/hqstore"
	"github.com/posgate/posgate/internal/hqwire"
	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/sqlitedb"
	"github.com/posgate/posgate/schema"
)

// Store is HQ's database in one SQLite file. It implements hqstore.Storage and is safe for
// concurrent use.
type Store struct {
	db *sqlitedb.DB
}

var _ hqstore.Storage = (*Store)(nil)

// Open opens (creating if needed) HQ's SQLite database at path and applies its migrations.
func Open(ctx context.Context, path string) (*Store, error) {
	db, err := sqlitedb.Open(ctx, path, schema.HQ())
	if err != nil {
		return nil, fmt.Errorf("open hq database: %w", err)
	}
	return &Store{db: db}, nil
}

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

// BatchCount returns how many batches are stored (of all stores).
func (s *Store) BatchCount(ctx context.Context) (int64, error) {
	var n int64
	if err := s.db.R.QueryRowContext(ctx, `SELECT count(*) FROM batches`).Scan(&n); err != nil {
		return 0, fmt.Errorf("count batches: %w", err)
	}
	return n, nil
}

// lastBatchQuery reads a store's last batch time: a search of batches_by_time.
const lastBatchQuery = `SELECT max(stored_ms) FROM batches WHERE store = ?`

// LastBatches implements hqstore.Storage: one lookup of the (store, stored_ms) index per store.
func (s *Store) LastBatches(ctx context.Context, stores []string) (map[string]time.Time, error) {
	out := make(map[string]time.Time, len(stores))
	for _, st := range stores {
		var ms sql.NullInt64
		if err := s.db.R.QueryRowContext(ctx, lastBatchQuery, st).Scan(&ms); err != nil {
			return nil, fmt.Errorf("last batch of %s: %w", st, err)
		}
		if ms.Valid {
			out[st] = time.UnixMilli(ms.Int64).UTC()
		}
	}
	return out, nil
}

// PartsKept returns how many store-days have parts of a declaration kept aside, waiting for
// their last part, and how many transactions those parts hold (of all stores).
func (s *Store) PartsKept(ctx context.Context) (days, txns int64, err error) {
	if err := s.db.R.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM day_drafts), (SELECT count(*) FROM draft_txns)`).
		Scan(&days, &txns); err != nil {
		return 0, 0, fmt.Errorf("count parts kept aside: %w", err)
	}
	return days, txns, nil
}

// DropDrafts implements hqstore.Storage, in one transaction.
func (s *Store) DropDrafts(ctx context.Context, before time.Time) (int64, error) {
	ms := before.UnixMilli()
	tx, err := s.db.W.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("drop parts kept aside: %w", err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `DELETE FROM draft_txns WHERE (business_date, store) IN
		(SELECT business_date, store FROM day_drafts WHERE first_ms < ?)`, ms); err != nil {
		return 0, fmt.Errorf("drop parts kept aside: %w", err)
	}
	res, err := tx.ExecContext(ctx, `DELETE FROM day_drafts WHERE first_ms < ?`, ms)
	if err != nil {
		return 0, fmt.Errorf("drop parts kept aside: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("drop parts kept aside: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("drop parts kept aside: %w", err)
	}
	return n, nil
}

// PutBatch implements hqstore.Storage: the whole batch in one transaction, idempotent by
// (store, batch id) and content hash. Receipt.Days counts the declarations that became
// the day's current one (a revision higher than the one held, whole or by its last part),
// Receipt.DayParts the parts kept aside (see putDays), Receipt.Exceptions the exceptions
// applied (see putExceptions).
func (s *Store) PutBatch(ctx context.Context, b *hqwire.Batch, contentHash string, at time.Time) (hqwire.Receipt, error) {
	if err := hqstore.Check(b, contentHash); err != nil {
		return hqwire.Receipt{}, err
	}
	at = at.Round(0).UTC()
	tx, err := s.db.W.BeginTx(ctx, nil)
	if err != nil {
		return hqwire.Receipt{}, fmt.Errorf("put batch: %w", err)
	}
	defer tx.Rollback()

	if rc, found, err := storedReceipt(ctx, tx, b.Store, b.ID, contentHash); found || err != nil {
		return rc, err
	}
	rc := hqwire.Receipt{Store: b.Store, BatchID: b.ID, Rows: len(b.Rows), StoredAt: at}
	if rc.New, err = insertRows(ctx, tx, b, at); err != nil {
		return hqwire.Receipt{}, err
	}
	if err = putDays(ctx, tx, b, at, &rc); err != nil {
		return hqwire.Receipt{}, err
	}
	if rc.Exceptions, err = putExceptions(ctx, tx, b, at); err != nil {
		return hqwire.Receipt{}, err
	}
	js, err := json.Marshal(rc)
	if err != nil {
		return hqwire.Receipt{}, fmt.Errorf("put batch: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO batches (store, batch_id, content_hash, receipt, stored_ms)
		VALUES (?, ?, ?, ?, ?)`, b.Store, b.ID, contentHash, string(js), at.UnixMilli()); err != nil {
		return hqwire.Receipt{}, fmt.Errorf("put batch: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return hqwire.Receipt{}, fmt.Errorf("put batch: commit: %w", err)
	}
	return rc, nil
}

// storedReceipt looks the batch up: found with the original receipt (Duplicate set) for
// the same content, found with a batch_id_reused error for other content.
func storedReceipt(ctx context.Context, tx *sql.Tx, store, id, contentHash string) (hqwire.Receipt, bool, error) {
	var hash, js string
	err := tx.QueryRowContext(ctx, `SELECT content_hash, receipt FROM batches WHERE store = ? AND batch_id = ?`,
		store, id).Scan(&hash, &js)
	if errors.Is(err, sql.ErrNoRows) {
		return hqwire.Receipt{}, false, nil
	}
	if err != nil {
		return hqwire.Receipt{}, false, fmt.Errorf("put batch: look up batch: %w", err)
	}
	if hash != contentHash {
		return hqwire.Receipt{}, true, hqstore.ErrBatchIDReused(store, id)
	}
	var rc hqwire.Receipt
	if err := json.Unmarshal([]byte(js), &rc); err != nil {
		return hqwire.Receipt{}, true, fmt.Errorf("put batch: stored receipt of %s/%s: %w", store, id, err)
	}
	rc.Duplicate = true
	return rc, true, nil
}

// rowsPerInsert rows go into one INSERT statement (13 parameters each and 3 shared;
// SQLite allows 32766): fewer statements, fewer cgo calls, fewer copies of the strings
// every row of a batch shares.
const rowsPerInsert = 64

const insertRowsHead = `INSERT INTO rows (store, terminal, seq, kind, business_date, flow_no, at, hash,
	amount, cash, card, qr, methods, batch_id, received_ms, payload) VALUES `

// rowShared parameters: ?1 store, ?2 batch id, ?3 received_ms; each row has rowOwn more.
const rowShared, rowOwn = 3, 13

func rowParams(b *strings.Builder, i int) {
	p := rowShared + i*rowOwn + 1
	fmt.Fprintf(b, "(?1,?%d,?%d,?%d,?%d,?%d,?%d,?%d,?%d,?%d,?%d,?%d,?%d,?2,?3,?%d)",
		p, p+1, p+2, p+3, p+4, p+5, p+6, p+7, p+8, p+9, p+10, p+11, p+12)
}

// multiInsert returns an INSERT of n rows of params, ending with tail.
func multiInsert(head string, params func(b *strings.Builder, i int), n int, tail string) string {
	var b strings.Builder
	b.WriteString(head)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		params(&b, i)
	}
	b.WriteString(tail)
	return b.String()
}

// onConflict skips a row whose key (rows_key, or the primary key that includes it) is held.
const onConflict = " ON CONFLICT DO NOTHING"

var insertRowsFull = multiInsert(insertRowsHead, rowParams, rowsPerInsert, onConflict)

// insertRows inserts the rows HQ does not hold yet and returns how many those were. A row
// HQ holds with another hash (or a batch listing one key twice with different hashes) is a
// row_conflict.
func insertRows(ctx context.Context, tx *sql.Tx, b *hqwire.Batch, at time.Time) (int, error) {
	if len(b.Rows) == 0 {
		return 0, nil
	}
	var full *sql.Stmt
	if len(b.Rows) >= rowsPerInsert {
		var err error
		if full, err = tx.PrepareContext(ctx, insertRowsFull); err != nil {
			return 0, fmt.Errorf("put batch: %w", err)
		}
		defer full.Close()
	}
	ms := at.UnixMilli()
	args := make([]any, 0, rowShared+rowsPerInsert*rowOwn)
	inserted := 0
	for start := 0; start < len(b.Rows); start += rowsPerInsert {
		chunk := b.Rows[start:min(start+rowsPerInsert, len(b.Rows))]
		args = append(args[:0], b.Store, b.ID, ms)
		for i := range chunk {
			r := &chunk[i]
			m, _ := hqstore.Split(r.ByMethod) // checked by hqstore.Check
			var payload any                   // every row's payload (schema/hq/002): a refill of the store needs it
			if r.Payload != nil {
				payload = []byte(r.Payload)
			}
			args = append(args, r.Terminal, r.Seq, r.Kind, r.BusinessDate, r.FlowNo,
				r.At.UTC().Format(time.RFC3339Nano), r.Hash, int64(r.Amount), m.Cash, m.Card, m.QR, m.Mask, payload)
		}
		var res sql.Result
		var err error
		if len(chunk) == rowsPerInsert {
			res, err = full.ExecContext(ctx, args...)
		} else {
			res, err = tx.ExecContext(ctx, multiInsert(insertRowsHead, rowParams, len(chunk), onConflict), args...)
		}
		if err != nil {
			return 0, fmt.Errorf("put batch: insert rows: %w", err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return 0, fmt.Errorf("put batch: insert rows: %w", err)
		}
		inserted += int(n)
	}
	if inserted < len(b.Rows) {
		if err := checkHashes(ctx, tx, b); err != nil {
			return 0, err
		}
	}
	return inserted, nil
}

// checkHashes compares every row of the batch with the row HQ holds under its key (rows
// just inserted match themselves): the slow path, only for batches that resend rows.
func checkHashes(ctx context.Context, tx *sql.Tx, b *hqwire.Batch) error {
	st, err := tx.PrepareContext(ctx, `SELECT hash FROM rows WHERE store = ? AND terminal = ? AND seq = ?`)
	if err != nil {
		return fmt.Errorf("put batch: %w", err)
	}
	defer st.Close()
	for i := range b.Rows {
		r := &b.Rows[i]
		var hash string
		if err := st.QueryRowContext(ctx, b.Store, r.Terminal, r.Seq).Scan(&hash); err != nil {
			return fmt.Errorf("put batch: check row %s: %w", r.Key(b.Store), err)
		}
		if hash != r.Hash {
			return hqstore.ErrRowConflict(b.Store, r.Terminal, r.Seq)
		}
	}
	return nil
}

// putDays applies the batch's declarations of days and counts them in rc (Days, DaysHeld,
// DayParts, PartsDropped):
//
//   - a declaration whose revision is no higher than the one held changes nothing, whole
//     or in parts (DaysHeld names the revision held);
//   - a whole one becomes the day's, and deletes a draft (parts kept aside) of its
//     revision or lower: those parts could only be held from now on;
//   - part 1 of n replaces the day's draft with a new one;
//   - part k > 1 is appended to the draft if it is the draft's next part of the same
//     revision, number of parts and split, and the last part makes the draft the day's
//     declaration as a whole one of its revision would; any other part is dropped
//     (PartsDropped) and leaves the draft as it was.
//
// No (terminal, seq) is compared across the parts of a draft: hq-sync serve checks each
// part's own list, and the store's ledger lists a transaction once.
func putDays(ctx context.Context, tx *sql.Tx, b *hqwire.Batch, at time.Time, rc *hqwire.Receipt) error {
	ms := at.UnixMilli()
	for i := range b.Days {
		d := &b.Days[i]
		part, parts, _ := hqstore.DayParts(d) // checked by hqstore.Check
		var held int64
		err := tx.QueryRowContext(ctx, `SELECT revision FROM days WHERE store = ? AND business_date = ?`,
			b.Store, d.BusinessDate).Scan(&held)
		found := err == nil
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("put batch: day %s: %w", d.BusinessDate, err)
		}
		if found && !hqstore.DayStored(held, d.Revision) {
			rc.DaysHeld = hqstore.Held(rc.DaysHeld, d.BusinessDate, held)
			continue
		}
		switch {
		case parts == 1:
			err = standDay(ctx, tx, b.Store, d.BusinessDate, d.Revision, d.ClosedAt.UTC().Format(time.RFC3339Nano), b.ID, ms, ms, found)
			if err == nil {
				err = insertTxns(ctx, tx, insertDayTxns, b.Store, d, 0)
			}
			if err == nil {
				err = deleteDraft(ctx, tx, b.Store, d.BusinessDate, d.Revision)
			}
			rc.Days++
		case part == 1:
			err = startDraft(ctx, tx, b, d, parts, ms)
			rc.DayParts++
		default:
			err = addPart(ctx, tx, b, d, part, parts, found, ms, rc)
		}
		if err != nil {
			return fmt.Errorf("put batch: day %s: %w", d.BusinessDate, err)
		}
	}
	return nil
}

// standDay makes revision rev, received at ms, the day's declaration, without
// transactions yet: the day's row is updated (found) or inserted (first declared at first).
func standDay(ctx context.Context, tx *sql.Tx, store, date string, rev int64, closed, batchID string, ms, first int64,
	found bool) error {
	if !found {
		_, err := tx.ExecContext(ctx, `INSERT INTO days (store, business_date, revision, closed_at, batch_id,
			received_ms, first_ms) VALUES (?, ?, ?, ?, ?, ?, ?)`, store, date, rev, closed, batchID, ms, first)
		return err
	}
	_, err := tx.ExecContext(ctx, `UPDATE days SET revision = ?, closed_at = ?, batch_id = ?, received_ms = ?
		WHERE store = ? AND business_date = ?`, rev, closed, batchID, ms, store, date)
	if err == nil {
		_, err = tx.ExecContext(ctx, `DELETE FROM day_txns WHERE business_date = ? AND store = ?`, date, store)
	}
	return err
}

// deleteDraft deletes the day's draft and its transactions if its revision is upTo or lower.
func deleteDraft(ctx context.Context, tx *sql.Tx, store, date string, upTo int64) error {
	res, err := tx.ExecContext(ctx, `DELETE FROM day_drafts WHERE store = ? AND business_date = ? AND revision <= ?`,
		store, date, upTo)
	if err != nil {
		return fmt.Errorf("delete parts kept aside: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return err
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM draft_txns WHERE business_date = ? AND store = ?`, date, store); err != nil {
		return fmt.Errorf("delete parts kept aside: %w", err)
	}
	return nil
}

// startDraft replaces whatever HQ kept aside of the day with part 1 of parts of d,
// received at ms.
func startDraft(ctx context.Context, tx *sql.Tx, b *hqwire.Batch, d *hqwire.StoreDay, parts int, ms int64) error {
	if err := deleteDraft(ctx, tx, b.Store, d.BusinessDate, math.MaxInt64); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO day_drafts (store, business_date, revision, parts, next_part, txns,
		closed_at, batch_id, split, first_ms) VALUES (?, ?, ?, ?, 2, ?, ?, ?, ?, ?)`, b.Store, d.BusinessDate, d.Revision,
		parts, len(d.Txns), d.ClosedAt.UTC().Format(time.RFC3339Nano), b.ID, d.Split, ms); err != nil {
		return fmt.Errorf("part 1 of %d: %w", parts, err)
	}
	return insertTxns(ctx, tx, insertDraftTxns, b.Store, d, 0)
}

// addPart appends part (> 1) of parts of d to the day's draft if it is the draft's next
// part (rc.DayParts), and makes the draft the day's declaration when it is the last
// (rc.Days). Otherwise it keeps nothing and notes the part in rc.PartsDropped. found tells
// whether the day has a declaration already (its first_ms is kept); if not, the day was
// first declared when part 1 came.
func addPart(ctx context.Context, tx *sql.Tx, b *hqwire.Batch, d *hqwire.StoreDay, part, parts int, found bool, ms int64,
	rc *hqwire.Receipt) error {
	var rev int64
	var n, next, txns int
	var closed, split string
	var first int64
	err := tx.QueryRowContext(ctx, `SELECT revision, parts, next_part, txns, closed_at, split, first_ms FROM day_drafts
		WHERE store = ? AND business_date = ?`, b.Store, d.BusinessDate).Scan(&rev, &n, &next, &txns, &closed, &split,
		&first)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("part %d of %d: %w", part, parts, err)
	}
	if err != nil || rev != d.Revision || n != parts || next != part || split != d.Split {
		rc.PartsDropped = hqstore.Dropped(rc.PartsDropped, d.BusinessDate, d.Revision)
		return nil
	}
	if part < parts {
		if err := insertTxns(ctx, tx, insertDraftTxns, b.Store, d, txns); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE day_drafts SET next_part = ?, txns = ? WHERE store = ? AND business_date = ?`,
			part+1, txns+len(d.Txns), b.Store, d.BusinessDate); err != nil {
			return fmt.Errorf("part %d of %d: %w", part, parts, err)
		}
		rc.DayParts++
		return nil
	}
	// The last part: the draft's parts and this one, written once into the day, become
	// the revision standing.
	if err := standDay(ctx, tx, b.Store, d.BusinessDate, d.Revision, closed, b.ID, ms, first, found); err != nil {
		return fmt.Errorf("last part %d: %w", part, err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO day_txns (`+txnColumns+`) SELECT `+txnColumns+`
		FROM draft_txns WHERE business_date = ? AND store = ?`, d.BusinessDate, b.Store); err != nil {
		return fmt.Errorf("last part %d: move transactions: %w", part, err)
	}
	if err := insertTxns(ctx, tx, insertDayTxns, b.Store, d, txns); err != nil {
		return err
	}
	if err := deleteDraft(ctx, tx, b.Store, d.BusinessDate, d.Revision); err != nil {
		return err
	}
	rc.Days++
	return nil
}

const (
	txnsPerInsert = 64
	txnColumns    = `business_date, store, i, terminal, seq, kind, flow_no, amount, cash, card, qr, methods`
)

func txnParams(b *strings.Builder, _ int) { b.WriteString("(?,?,?,?,?,?,?,?,?,?,?,?)") }

// txnInsert is a statement inserting a declaration's transactions into day_txns (a day's
// standing revision) or draft_txns (the parts kept aside): its head, and its statement for
// a full chunk, built once.
type txnInsert struct{ head, full string }

func newTxnInsert(table string) txnInsert {
	head := `INSERT INTO ` + table + ` (` + txnColumns + `) VALUES `
	return txnInsert{head: head, full: multiInsert(head, txnParams, txnsPerInsert, "")}
}

var (
	insertDayTxns   = newTxnInsert("day_txns")
	insertDraftTxns = newTxnInsert("draft_txns")
)

// insertTxns inserts the transactions of d at positions first, first+1, ...
func insertTxns(ctx context.Context, tx *sql.Tx, ins txnInsert, store string, d *hqwire.StoreDay, first int) error {
	args := make([]any, 0, txnsPerInsert*12)
	for start := 0; start < len(d.Txns); start += txnsPerInsert {
		chunk := d.Txns[start:min(start+txnsPerInsert, len(d.Txns))]
		args = args[:0]
		for j := range chunk {
			t := &chunk[j]
			m, _ := hqstore.Split(t.ByMethod) // checked by hqstore.Check
			args = append(args, d.BusinessDate, store, first+start+j, t.Terminal, t.Seq, t.Kind, t.FlowNo,
				int64(t.Amount), m.Cash, m.Card, m.QR, m.Mask)
		}
		q := ins.full
		if len(chunk) < txnsPerInsert {
			q = multiInsert(ins.head, txnParams, len(chunk), "")
		}
		if _, err := tx.ExecContext(ctx, q, args...); err != nil {
			return fmt.Errorf("insert transactions: %w", err)
		}
	}
	return nil
}

// putException stores an exception's state unless HQ holds the exception at the same or a
// higher change number: ?1 store, ?2 batch id, ?3 received_ms, then the state's columns.
const putException = `INSERT INTO exceptions (store, kind, terminal, seq, sku, change, business_date, withdrawn,
		code, detail, qty_short, at, resolved, resolved_at, resolution, batch_id, received_ms)
	VALUES (?1, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?2, ?3)
	ON CONFLICT (store, kind, terminal, seq, sku) DO UPDATE SET change = excluded.change,
		business_date = excluded.business_date, withdrawn = excluded.withdrawn, code = excluded.code,
		detail = excluded.detail, qty_short = excluded.qty_short, at = excluded.at, resolved = excluded.resolved,
		resolved_at = excluded.resolved_at, resolution = excluded.resolution, batch_id = excluded.batch_id,
		received_ms = excluded.received_ms
	WHERE exceptions.change < excluded.change`

// putExceptions applies the batch's exceptions and returns how many it stored: each one
// HQ holds no state of, or a state of a lower change number. A withdrawn one is stored as
// any other (withdrawn), so that an older state arriving later is not stored over it.
func putExceptions(ctx context.Context, tx *sql.Tx, b *hqwire.Batch, at time.Time) (int, error) {
	if len(b.Exceptions) == 0 {
		return 0, nil
	}
	st, err := tx.PrepareContext(ctx, putException)
	if err != nil {
		return 0, fmt.Errorf("put batch: exceptions: %w", err)
	}
	defer st.Close()
	applied := 0
	for i := range b.Exceptions {
		x := &b.Exceptions[i]
		res, err := st.ExecContext(ctx, b.Store, b.ID, at.UnixMilli(), x.Kind, x.Terminal, x.Seq, x.SKU, x.Change,
			x.BusinessDate, x.Withdrawn, x.Code, x.Detail, x.QtyShort, hqstore.TimeText(x.At), x.Resolved,
			hqstore.TimeText(x.ResolvedAt), x.Resolution)
		if err != nil {
			return 0, fmt.Errorf("put batch: exception %s: %w", x.Key(), err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return 0, fmt.Errorf("put batch: exception %s: %w", x.Key(), err)
		}
		applied += int(n)
	}
	return applied, nil
}

// Rows implements hqstore.Storage. Rows come in (store, terminal, seq) order; only day-close
// rows carry their Payload.
//
// A day of a chain is a million rows, so the rows are read below database/sql (its
// per-column conversions cost more than SQLite's own work) into one slice sized by a
// count taken in the same read transaction.
func (s *Store) Rows(ctx context.Context, date, store string) ([]hqstore.StoredRow, error) {
	filter, args := ` WHERE business_date = ?`, []driver.NamedValue{{Ordinal: 1, Value: date}}
	if store != "" {
		filter += ` AND store = ?`
		args = append(args, driver.NamedValue{Ordinal: 2, Value: store})
	}
	var out []hqstore.StoredRow
	err := s.read(ctx, func(c *rawConn) error {
		n, err := c.count(`SELECT count(*) FROM rows`+filter, args)
		if err != nil {
			return err
		}
		out = make([]hqstore.StoredRow, 0, n)
		in := hqstore.Interner{}
		return c.each(`SELECT store, terminal, seq, kind, flow_no, amount, cash, card, qr, methods, received_ms,
			CASE WHEN kind = 'day_close' THEN payload END FROM rows`+filter+` ORDER BY store, terminal, seq`, args, func(v []driver.Value) error {
			m := hqstore.Methods{Cash: asInt(v[6]), Card: asInt(v[7]), QR: asInt(v[8]), Mask: asInt(v[9])}
			r := hqstore.StoredRow{
				Store: in.String(asString(v[0])), Terminal: in.String(asString(v[1])), Seq: asInt(v[2]),
				Kind: in.String(asString(v[3])), BusinessDate: date, FlowNo: asInt(v[4]),
				Amount: money.Fen(asInt(v[5])), ByMethod: m.Map(), ReceivedAt: time.UnixMilli(asInt(v[10])).UTC(),
			}
			if p, ok := v[11].([]byte); ok && r.Kind == hqwire.KindDayClose {
				r.Payload = json.RawMessage(p) // the driver's own copy
			}
			out = append(out, r)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("rows of %s: %w", date, err)
	}
	return out, nil
}

// DateStores implements hqstore.Storage: the stores with rows on the date, one seek of the
// date's rows per store (a skip scan of their key), and those with a declaration of it.
func (s *Store) DateStores(ctx context.Context, date string) ([]string, error) {
	var out []string
	err := s.read(ctx, func(c *rawConn) error {
		return c.each(`WITH RECURSIVE st(store) AS (
				SELECT min(store) FROM rows WHERE business_date = ?1
				UNION ALL
				SELECT (SELECT min(store) FROM rows WHERE business_date = ?1 AND store > st.store)
				FROM st WHERE st.store IS NOT NULL
			)
			SELECT store FROM st WHERE store IS NOT NULL
			UNION SELECT store FROM days WHERE business_date = ?1
			ORDER BY 1`, []driver.NamedValue{{Ordinal: 1, Value: date}}, func(v []driver.Value) error {
			out = append(out, asString(v[0]))
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("stores of %s: %w", date, err)
	}
	return out, nil
}

// RecordReconcile implements hqstore.Storage.
func (s *Store) RecordReconcile(ctx context.Context, r hqstore.ReconcileRun) error {
	_, err := s.db.W.ExecContext(ctx, `INSERT OR IGNORE INTO reconcile_runs (business_date, store, finished_ms, ok,
		stores, hq_txns, differences) VALUES (?, ?, ?, ?, ?, ?, ?)`, r.Date, r.Store, r.Finished.UnixMilli(), r.OK,
		r.Stores, r.HQTxns, r.Differences)
	if err != nil {
		return fmt.Errorf("record reconciliation of %s: %w", r.Date, err)
	}
	return nil
}

// Days implements hqstore.Storage. Declarations come in store order.
func (s *Store) Days(ctx context.Context, date, store string) ([]hqstore.StoredDay, error) {
	filter, args := ` WHERE business_date = ?`, []driver.NamedValue{{Ordinal: 1, Value: date}}
	if store != "" {
		filter += ` AND store = ?`
		args = append(args, driver.NamedValue{Ordinal: 2, Value: store})
	}
	var days []hqstore.StoredDay
	err := s.read(ctx, func(c *rawConn) error {
		err := c.each(`SELECT store, revision, closed_at, received_ms, first_ms FROM days`+filter+` ORDER BY store`, args,
			func(v []driver.Value) error {
				closed, err := time.Parse(time.RFC3339Nano, asString(v[2]))
				if err != nil {
					return fmt.Errorf("store %s: closed_at: %w", v[0], err)
				}
				days = append(days, hqstore.StoredDay{
					Store:      asString(v[0]),
					Day:        hqwire.StoreDay{BusinessDate: date, Revision: asInt(v[1]), ClosedAt: closed},
					ReceivedAt: time.UnixMilli(asInt(v[3])).UTC(),
					FirstAt:    time.UnixMilli(asInt(v[4])).UTC(),
				})
				return nil
			})
		if err != nil || len(days) == 0 {
			return err
		}
		n, err := c.count(`SELECT count(*) FROM day_txns`+filter, args)
		if err != nil {
			return err
		}
		all := make([]hqwire.Txn, 0, n) // one allocation; each day gets a capped window of it
		in := hqstore.Interner{}
		k, from := 0, 0
		cut := func(upTo int) { // days[k] is done
			days[k].Day.Txns = all[from:len(all):len(all)]
			from = len(all)
			k = upTo
		}
		err = c.each(`SELECT store, terminal, seq, kind, flow_no, amount, cash, card, qr, methods
			FROM day_txns`+filter+` ORDER BY store, i`, args, func(v []driver.Value) error {
			st := asString(v[0])
			if days[k].Store != st {
				j := k + 1
				for j < len(days) && days[j].Store != st {
					j++
				}
				if j == len(days) {
					return fmt.Errorf("transactions of store %s without its day", st)
				}
				cut(j)
			}
			m := hqstore.Methods{Cash: asInt(v[6]), Card: asInt(v[7]), QR: asInt(v[8]), Mask: asInt(v[9])}
			all = append(all, hqwire.Txn{Terminal: in.String(asString(v[1])), Seq: asInt(v[2]), Kind: in.String(asString(v[3])),
				FlowNo: asInt(v[4]), Amount: money.Fen(asInt(v[5])), ByMethod: m.Map()})
			return nil
		})
		if err != nil {
			return err
		}
		cut(len(days))
		for i := range days {
			if days[i].Day.Txns == nil {
				days[i].Day.Txns = []hqwire.Txn{}
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("days of %s: %w", date, err)
	}
	return days, nil
}

// Exceptions implements hqstore.Storage. Exceptions come in (store, kind, terminal, seq, sku)
// order; withdrawn ones are left out.
func (s *Store) Exceptions(ctx context.Context, date, store string) ([]hqstore.StoredException, error) {
	return s.exceptions(ctx, "exceptions of "+date, `business_date = ? AND NOT withdrawn`,
		`store, kind, terminal, seq, sku`, store, date)
}

// OpenExceptions implements hqstore.Storage.
func (s *Store) OpenExceptions(ctx context.Context, store string) ([]hqstore.StoredException, error) {
	return s.exceptions(ctx, "open exceptions", `NOT withdrawn AND NOT resolved`,
		`business_date, store, kind, terminal, seq, sku`, store)
}

// exceptions reads the exceptions where cond holds (with args), of store if not "", in
// order; what names them in errors.
func (s *Store) exceptions(ctx context.Context, what, cond, order, store string, args ...any) ([]hqstore.StoredException, error) {
	q := `SELECT ` + hqstore.ExceptionColumns + ` FROM exceptions WHERE ` + cond
	if store != "" {
		args = append(args, store)
		q += ` AND store = ?`
	}
	rows, err := s.db.R.QueryContext(ctx, q+` ORDER BY `+order, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	defer rows.Close()
	return hqstore.ScanExceptions(what, rows)
}

// rawConn is a read-only connection used through the driver's own interfaces.
type rawConn struct {
	ctx context.Context
	q   driver.QueryerContext
}

// read runs f on a connection of the read pool inside one read transaction, so that
// everything f reads comes from one snapshot.
func (s *Store) read(ctx context.Context, f func(c *rawConn) error) error {
	conn, err := s.db.R.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	return conn.Raw(func(dc any) error {
		q, ok := dc.(driver.QueryerContext)
		ex, ok2 := dc.(driver.ExecerContext)
		if !ok || !ok2 {
			return fmt.Errorf("sqlite driver connection %T cannot query", dc)
		}
		if _, err := ex.ExecContext(ctx, `BEGIN`, nil); err != nil {
			return err
		}
		err := f(&rawConn{ctx: ctx, q: q})
		if _, rerr := ex.ExecContext(context.WithoutCancel(ctx), `ROLLBACK`, nil); err == nil && rerr != nil {
			err = rerr
		}
		return err
	})
}

// each runs query and calls f with each row's values, which are valid until f returns
// ([]byte values are f's to keep).
func (c *rawConn) each(query string, args []driver.NamedValue, f func(v []driver.Value) error) error {
	rows, err := c.q.QueryContext(c.ctx, query, args)
	if err != nil {
		return err
	}
	defer rows.Close()
	v := make([]driver.Value, len(rows.Columns()))
	for {
		if err := rows.Next(v); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
		if err := f(v); err != nil {
			return err
		}
	}
}

// count runs a query returning one integer.
func (c *rawConn) count(query string, args []driver.NamedValue) (int, error) {
	n := 0
	err := c.each(query, args, func(v []driver.Value) error {
		n = int(asInt(v[0]))
		return nil
	})
	return n, err
}

// asInt returns an INTEGER column's value (0 for NULL).
func asInt(v driver.Value) int64 {
	n, _ := v.(int64)
	return n
}

// asString returns a TEXT column's value.
func asString(v driver.Value) string {
	switch x := v.(type) {
	case string:
		return x
	case []byte:
		return string(x)
	}
	return ""
}
