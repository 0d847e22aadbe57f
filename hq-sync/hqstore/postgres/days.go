package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/posgate/posgate/hq-sync/hqstore"
	"github.com/posgate/posgate/internal/hqwire"
)

var txnCols = []string{"business_date", "store", "i", "terminal", "seq", "kind", "flow_no",
	"amount", "cash", "card", "qr", "methods"}

// txnColumns lists txnCols for SQL: day_txns and draft_txns have the same columns.
var txnColumns = strings.Join(txnCols, ", ")

// putDays applies the batch's declarations of days with the semantics of the SQLite
// engine, and counts them in rc (Days, DaysHeld, DayParts, PartsDropped):
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
// Declarations of one store are applied one after the other: the batch holds its store's
// lock (putOnce). Row locks alone did not do it: a part 1 read the revision held before a
// concurrent whole declaration of a first revision committed, and added its draft after
// that declaration had deleted the drafts it could see, leaving a draft at or below the
// day's revision that nothing deletes. No (terminal, seq) is compared across the parts of
// a draft: hq-sync serve checks each part's own list, and the store's ledger lists a
// transaction once.
//
// A declaration of a day HQ dropped (serve --retain) changes nothing and is not counted.
func putDays(ctx context.Context, tx pgx.Tx, b *hqwire.Batch, at time.Time, rc *hqwire.Receipt, p *partitions) error {
	for i := range b.Days {
		d := &b.Days[i]
		if p.dropped(d.BusinessDate) {
			continue
		}
		part, parts, _ := hqstore.DayParts(d) // checked by hqstore.Check
		var err error
		switch {
		case parts == 1:
			err = putWhole(ctx, tx, b, d, at.UnixMilli(), rc)
		default:
			err = putPart(ctx, tx, b, d, part, parts, at.UnixMilli(), rc)
		}
		if err != nil {
			return fmt.Errorf("put batch: day %s: %w", d.BusinessDate, err)
		}
	}
	return nil
}

// putWhole stores a whole declaration if its revision is higher than the one held.
func putWhole(ctx context.Context, tx pgx.Tx, b *hqwire.Batch, d *hqwire.StoreDay, ms int64, rc *hqwire.Receipt) error {
	// The draft's row first, then the day's, as a last part locks them: two batches of the
	// day never wait for each other's second lock.
	if _, err := tx.Exec(ctx, `SELECT 1 FROM day_drafts WHERE store = $1 AND business_date = $2 FOR UPDATE`,
		b.Store, d.BusinessDate); err != nil {
		return err
	}
	stood, err := standDay(ctx, tx, b.Store, d.BusinessDate, d.Revision, d.ClosedAt.UTC().Format(time.RFC3339Nano), b.ID, ms, ms)
	if err != nil {
		return err
	}
	if !stood { // an equal or lower revision: the one held stands (the upsert locked its row)
		return noteHeld(ctx, tx, b.Store, d.BusinessDate, rc)
	}
	if err := copyTxns(ctx, tx, "day_txns", b.Store, d, 0); err != nil {
		return err
	}
	if err := deleteDraft(ctx, tx, b.Store, d.BusinessDate, d.Revision); err != nil {
		return err
	}
	rc.Days++
	return nil
}

// standDay makes revision rev, received at ms, the day's declaration, without
// transactions yet, if it is higher than the one held: the day's row is inserted (first
// declared at first) or updated, and its transactions deleted. It reports whether rev
// stands; if not, the upsert has locked the row of the revision held.
func standDay(ctx context.Context, tx pgx.Tx, store, date string, rev int64, closed, batchID string, ms, first int64) (bool, error) {
	tag, err := tx.Exec(ctx, `INSERT INTO days (store, business_date, revision, closed_at, batch_id, received_ms, first_ms)
		VALUES ($1, $2, $3, $4, $5, $6, $7)
		ON CONFLICT (store, business_date) DO UPDATE SET revision = EXCLUDED.revision,
			closed_at = EXCLUDED.closed_at, batch_id = EXCLUDED.batch_id, received_ms = EXCLUDED.received_ms
		WHERE days.revision < EXCLUDED.revision`, store, date, rev, closed, batchID, ms, first)
	if err != nil || tag.RowsAffected() == 0 {
		return false, err
	}
	if _, err := tx.Exec(ctx, `DELETE FROM day_txns WHERE business_date = $1 AND store = $2`, date, store); err != nil {
		return false, err
	}
	return true, nil
}

// noteHeld notes in rc.DaysHeld the revision of the day HQ holds.
func noteHeld(ctx context.Context, tx pgx.Tx, store, date string, rc *hqwire.Receipt) error {
	var rev int64
	if err := tx.QueryRow(ctx, `SELECT revision FROM days WHERE store = $1 AND business_date = $2`,
		store, date).Scan(&rev); err != nil {
		return err
	}
	rc.DaysHeld = hqstore.Held(rc.DaysHeld, date, rev)
	return nil
}

// putPart applies part of parts of d (parts > 1).
func putPart(ctx context.Context, tx pgx.Tx, b *hqwire.Batch, d *hqwire.StoreDay, part, parts int, ms int64, rc *hqwire.Receipt) error {
	var heldRev int64
	err := tx.QueryRow(ctx, `SELECT revision FROM days WHERE store = $1 AND business_date = $2`,
		b.Store, d.BusinessDate).Scan(&heldRev)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return err
	}
	if err == nil && !hqstore.DayStored(heldRev, d.Revision) {
		rc.DaysHeld = hqstore.Held(rc.DaysHeld, d.BusinessDate, heldRev)
		return nil
	}
	if part == 1 {
		// Lock the draft's row (new or replaced) before its transactions are deleted, so
		// that a concurrent part of the day is applied wholly before or after this one.
		if _, err := tx.Exec(ctx, `INSERT INTO day_drafts (store, business_date, revision, parts, next_part, txns,
				closed_at, batch_id, split, first_ms) VALUES ($1, $2, $3, $4, 2, $5, $6, $7, $8, $9)
			ON CONFLICT (store, business_date) DO UPDATE SET revision = EXCLUDED.revision, parts = EXCLUDED.parts,
				next_part = EXCLUDED.next_part, txns = EXCLUDED.txns, closed_at = EXCLUDED.closed_at,
				batch_id = EXCLUDED.batch_id, split = EXCLUDED.split, first_ms = EXCLUDED.first_ms`,
			b.Store, d.BusinessDate, d.Revision, parts, len(d.Txns), d.ClosedAt.UTC().Format(time.RFC3339Nano), b.ID,
			d.Split, ms); err != nil {
			return fmt.Errorf("part 1 of %d: %w", parts, err)
		}
		if _, err := tx.Exec(ctx, `DELETE FROM draft_txns WHERE business_date = $1 AND store = $2`,
			d.BusinessDate, b.Store); err != nil {
			return fmt.Errorf("part 1 of %d: %w", parts, err)
		}
		if err := copyTxns(ctx, tx, "draft_txns", b.Store, d, 0); err != nil {
			return err
		}
		rc.DayParts++
		return nil
	}

	var rev, first int64
	var n, next, txns int
	var closed, split string
	err = tx.QueryRow(ctx, `SELECT revision, parts, next_part, txns, closed_at, split, first_ms FROM day_drafts
		WHERE store = $1 AND business_date = $2 FOR UPDATE`, b.Store, d.BusinessDate).Scan(&rev, &n, &next, &txns, &closed,
		&split, &first)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("part %d of %d: %w", part, parts, err)
	}
	if err != nil || rev != d.Revision || n != parts || next != part || split != d.Split {
		rc.PartsDropped = hqstore.Dropped(rc.PartsDropped, d.BusinessDate, d.Revision)
		return nil
	}
	if part < parts {
		if err := copyTxns(ctx, tx, "draft_txns", b.Store, d, txns); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE day_drafts SET next_part = $3, txns = $4 WHERE store = $1 AND business_date = $2`,
			b.Store, d.BusinessDate, part+1, txns+len(d.Txns)); err != nil {
			return fmt.Errorf("part %d of %d: %w", part, parts, err)
		}
		rc.DayParts++
		return nil
	}
	// The last part: the draft's parts and this one, written once into the day, become the
	// revision standing, unless a batch committed since the revision held was read made a
	// revision as high stand: then the draft could only be held, and goes.
	stood, err := standDay(ctx, tx, b.Store, d.BusinessDate, d.Revision, closed, b.ID, ms, first)
	if err != nil {
		return fmt.Errorf("last part %d: %w", part, err)
	}
	if stood {
		if _, err := tx.Exec(ctx, `INSERT INTO day_txns (`+txnColumns+`) SELECT `+txnColumns+`
			FROM draft_txns WHERE business_date = $1 AND store = $2`, d.BusinessDate, b.Store); err != nil {
			return fmt.Errorf("last part %d: move transactions: %w", part, err)
		}
		if err := copyTxns(ctx, tx, "day_txns", b.Store, d, txns); err != nil {
			return err
		}
		rc.Days++
	} else if err := noteHeld(ctx, tx, b.Store, d.BusinessDate, rc); err != nil {
		return err
	}
	return deleteDraft(ctx, tx, b.Store, d.BusinessDate, d.Revision)
}

// deleteDraft deletes the day's draft and its transactions if its revision is upTo or lower.
func deleteDraft(ctx context.Context, tx pgx.Tx, store, date string, upTo int64) error {
	tag, err := tx.Exec(ctx, `DELETE FROM day_drafts WHERE store = $1 AND business_date = $2 AND revision <= $3`,
		store, date, upTo)
	if err != nil {
		return fmt.Errorf("delete parts kept aside: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return nil
	}
	if _, err := tx.Exec(ctx, `DELETE FROM draft_txns WHERE business_date = $1 AND store = $2`, date, store); err != nil {
		return fmt.Errorf("delete parts kept aside: %w", err)
	}
	return nil
}

// copyTxns COPYs the transactions of d into table (day_txns or draft_txns) at positions
// first, first+1, ...
func copyTxns(ctx context.Context, tx pgx.Tx, table, store string, d *hqwire.StoreDay, first int) error {
	if len(d.Txns) == 0 {
		return nil
	}
	src := pgx.CopyFromSlice(len(d.Txns), func(j int) ([]any, error) {
		t := &d.Txns[j]
		m, _ := hqstore.Split(t.ByMethod) // checked by hqstore.Check
		return []any{d.BusinessDate, store, int32(first + j), t.Terminal, t.Seq, t.Kind, t.FlowNo,
			int64(t.Amount), m.Cash, m.Card, m.QR, m.Mask}, nil
	})
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{table}, txnCols, src); err != nil {
		return fmt.Errorf("copy transactions: %w", err)
	}
	return nil
}

// putException stores an exception's state unless HQ holds the exception at the same or a
// higher change number: $1 store, $2 batch id, $3 received_ms, then the state's columns.
const putException = `INSERT INTO exceptions (store, kind, terminal, seq, sku, change, business_date, withdrawn,
		code, detail, qty_short, at, resolved, resolved_at, resolution, batch_id, received_ms)
	VALUES ($1, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $2, $3)
	ON CONFLICT (store, kind, terminal, seq, sku) DO UPDATE SET change = EXCLUDED.change,
		business_date = EXCLUDED.business_date, withdrawn = EXCLUDED.withdrawn, code = EXCLUDED.code,
		detail = EXCLUDED.detail, qty_short = EXCLUDED.qty_short, at = EXCLUDED.at, resolved = EXCLUDED.resolved,
		resolved_at = EXCLUDED.resolved_at, resolution = EXCLUDED.resolution, batch_id = EXCLUDED.batch_id,
		received_ms = EXCLUDED.received_ms
	WHERE exceptions.change < EXCLUDED.change`

// putExceptions applies the batch's exceptions, with the semantics of the SQLite engine,
// and returns how many it stored: each one HQ holds no state of, or a state of a lower
// change number. A withdrawn one is stored as any other (withdrawn), so that an older
// state arriving later is not stored over it.
//
// The statements go in one round trip, in key order (hqstore.Check lets a key in once),
// so that two batches applying states of the same exceptions lock them in the same order
// and never wait for each other. Each upsert waits for a concurrent one of its key and
// then compares change numbers with the state that one committed.
func putExceptions(ctx context.Context, tx pgx.Tx, b *hqwire.Batch, at time.Time) (int, error) {
	if len(b.Exceptions) == 0 {
		return 0, nil
	}
	order := make([]*hqwire.Exception, len(b.Exceptions))
	for i := range b.Exceptions {
		order[i] = &b.Exceptions[i]
	}
	slices.SortFunc(order, func(x, y *hqwire.Exception) int {
		return cmp.Or(cmp.Compare(x.Kind, y.Kind), cmp.Compare(x.Terminal, y.Terminal), cmp.Compare(x.Seq, y.Seq),
			cmp.Compare(x.SKU, y.SKU))
	})
	var batch pgx.Batch
	for _, x := range order {
		batch.Queue(putException, b.Store, b.ID, at.UnixMilli(), x.Kind, x.Terminal, x.Seq, x.SKU, x.Change,
			x.BusinessDate, x.Withdrawn, x.Code, x.Detail, x.QtyShort, hqstore.TimeText(x.At), x.Resolved,
			hqstore.TimeText(x.ResolvedAt), x.Resolution)
	}
	res := tx.SendBatch(ctx, &batch)
	applied := 0
	for _, x := range order {
		tag, err := res.Exec()
		if err != nil {
			res.Close()
			return 0, fmt.Errorf("put batch: exception %s: %w", x.Key(), err)
		}
		applied += int(tag.RowsAffected())
	}
	if err := res.Close(); err != nil {
		return 0, fmt.Errorf("put batch: exceptions: %w", err)
	}
	return applied, nil
}
