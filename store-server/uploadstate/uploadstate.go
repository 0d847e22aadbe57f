// Package uploadstate owns the state file of hq-sync upload (upload.db, beside the store's
// ledger): its schema (schema.Upload), opening it for the uploader, and reading how far HQ
// has the store's rows (Status), which the uploader's --status, its metrics and the
// store-server's GET /v1/hq and metrics show. The uploader, which runs at the store, is the
// file's only writer; everyone else reads it while it may be running, without taking it.
//
// The state holds (schema/upload/001_state.sql) small named values (kv), the batches the
// uploader built and sent, per business date the rows HQ acknowledged and the revisions it
// declared, and the parts of declarations on their way. Its hq_outbox ids are the ledger's:
// a Status is read from the state and the store's ledger together.
package uploadstate

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/posgate/posgate/internal/sqlitedb"
	"github.com/posgate/posgate/schema"
	"github.com/posgate/posgate/store-server/client"
	"github.com/posgate/posgate/store-server/ledger"
)

// Open opens (creating and migrating it if needed) the state at path for the uploader, its
// one writer: while it is open another Open of the same path, in any process, fails with
// sqlitedb.ErrInUse. Readers use ReadStatus and ReadStatusOf, which do not take it.
func Open(ctx context.Context, path string) (*sqlitedb.DB, error) {
	return sqlitedb.OpenExclusive(ctx, path, schema.Upload())
}

// ReadStatus reads the progress of the uploader of store whose state is at statePath, with
// its ledger at ledgerPath, while that uploader may be running: both are opened read-only
// and the state is not taken.
func ReadStatus(ctx context.Context, ledgerPath, statePath, store string, loc *time.Location) (client.UploadStatus, error) {
	l, err := ledger.OpenReader(ctx, ledgerPath, store, loc)
	if err != nil {
		return client.UploadStatus{}, fmt.Errorf("upload status: %w", err)
	}
	defer l.Close()
	return ReadStatusOf(ctx, statePath, l)
}

// ReadStatusOf is ReadStatus for a process that has the store's ledger open already (the
// store-server showing its managers how far HQ has the store's rows). A missing state file
// is an error wrapping fs.ErrNotExist: no uploader has run with it.
func ReadStatusOf(ctx context.Context, statePath string, l *ledger.Ledger) (client.UploadStatus, error) {
	state, err := sqlitedb.OpenQueryOnly(ctx, statePath, 1)
	if err != nil {
		return client.UploadStatus{}, fmt.Errorf("upload status: open state %s: %w", statePath, err)
	}
	defer state.Close()
	kv, err := ReadKV(ctx, state)
	if err != nil {
		return client.UploadStatus{}, fmt.Errorf("upload status: %w", err)
	}
	if err := CheckStore(kv, statePath, l.StoreID()); err != nil {
		return client.UploadStatus{}, fmt.Errorf("upload status: %w", err)
	}
	s, _, err := Read(ctx, state, kv, l)
	return s, err
}

// CheckStore checks that the state whose kv is kv, at path, belongs to store.
func CheckStore(kv map[string]string, path, store string) error {
	if kv["store_id"] != store {
		return fmt.Errorf("%s is the upload state of store %q, not %q", path, kv["store_id"], store)
	}
	return nil
}

// Read reads the progress held in state (whose kv is kv, ReadKV) and in l, the store's
// ledger, and the hq_outbox id the backlog counts after (its oldest row is the one after it).
// ReadStatusOf is Read for a reader of the file; the uploader calls Read on the state it holds.
func Read(ctx context.Context, state *sql.DB, kv map[string]string, l *ledger.Ledger) (s client.UploadStatus, after int64, _ error) {
	s.SentThrough = atoi(kv["sent_through"])
	s.Batches = atoi(kv["batches_sent"])
	err := l.ViewHQ(ctx, func(r *ledger.HQReader) error {
		var err error
		if after, s.LedgerBehindHQ, err = backlogFrom(ctx, state, r, s.SentThrough, kv["sent_key"]); err != nil {
			return err
		}
		if s.Backlog, err = r.OutboxCountAfter(ctx, after); err != nil {
			return err
		}
		if s.ExceptionsWaiting, err = r.ExceptionChangesAfter(ctx, atoi(kv["exceptions_through"])); err != nil {
			return err
		}
		if s.MovesWaiting, err = r.AdjustmentsWaiting(ctx, atoi(kv["moves_through"])); err != nil {
			return err
		}
		s.FlowsWaiting, err = r.FlowChangesWaiting(ctx, atoi(kv["flows_through"]))
		return err
	})
	if err != nil {
		return s, after, err
	}
	// The batch HQ acknowledged last is the one recorded last of those sent: batches are
	// recorded, and sent, one at a time, in order (rowid order). The highest sent_at was
	// that of a batch stamped by a clock since set back (a year ahead, say): the last
	// receipt read as one in the future, and an alert on an upload that stopped could not
	// fire until the clock caught up with it.
	var last sql.NullString
	err = state.QueryRowContext(ctx, `SELECT sent_at FROM batches WHERE state = 'sent' ORDER BY rowid DESC LIMIT 1`).
		Scan(&last)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return s, after, fmt.Errorf("status: %w", err)
	}
	if last.Valid {
		s.LastSentAt, _ = time.Parse(time.RFC3339Nano, last.String)
	}
	err = state.QueryRowContext(ctx, `SELECT batch_id, attempts, last_error FROM batches WHERE state = 'pending'`).
		Scan(&s.Pending, &s.Attempts, &s.LastError)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return s, after, fmt.Errorf("status: %w", err)
	}
	s.Declared = map[string]int64{}
	rows, err := state.QueryContext(ctx, `SELECT business_date, revision FROM days WHERE revision > 0`)
	if err != nil {
		return s, after, fmt.Errorf("status: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var d string
		var rev int64
		if err := rows.Scan(&d, &rev); err != nil {
			return s, after, fmt.Errorf("status: %w", err)
		}
		s.Declared[d] = rev
	}
	if err := rows.Err(); err != nil {
		return s, after, fmt.Errorf("status: %w", err)
	}
	if s.InParts, err = readInParts(ctx, state); err != nil {
		return s, after, fmt.Errorf("status: %w", err)
	}
	large, err := state.QueryContext(ctx, `SELECT business_date FROM days
		WHERE skipped_rows > 0 AND skipped_rows = sent_rows AND sent_rows > declared_rows ORDER BY business_date`)
	if err != nil {
		return s, after, fmt.Errorf("status: %w", err)
	}
	defer large.Close()
	for large.Next() {
		var d string
		if err := large.Scan(&d); err != nil {
			return s, after, fmt.Errorf("status: %w", err)
		}
		s.TooLarge = append(s.TooLarge, d)
	}
	return s, after, large.Err()
}

// backlogFrom returns the hq_outbox id after which the ledger's rows are not at HQ, as far
// as the state (at watermark through, of key) can tell, and whether the ledger is behind HQ
// (it does not hold the row at through). Past the watermark while the ledger holds it. A
// ledger restored from an older backup took the ids after the backup's last row again, for
// sales HQ never had: counted after the watermark, they read as no backlog at all. Then it
// is the last row of a batch HQ acknowledged (the state keeps a week of them) that the ledger
// still holds: the rows after it may be new to HQ (at most these; a batch cut across the
// backup's last row counts a few HQ has); 0, every row, when none is.
func backlogFrom(ctx context.Context, state *sql.DB, r *ledger.HQReader, through int64, key string) (int64, bool, error) {
	if through == 0 {
		return 0, false, nil
	}
	held, err := RowHeld(ctx, r, through, key)
	if err != nil || held {
		return through, false, err
	}
	type end struct {
		id  int64
		key string
	}
	var ends []end
	err = sqlitedb.Each(ctx, state, `SELECT last_id, last_key FROM batches WHERE state = 'sent' AND rows > 0 AND last_id < ?
		ORDER BY last_id, rowid`, []any{through}, func(rows *sql.Rows) error {
		var e end
		if err := rows.Scan(&e.id, &e.key); err != nil {
			return err
		}
		ends = append(ends, e)
		return nil
	})
	if err != nil {
		return 0, true, fmt.Errorf("sent batches: %w", err)
	}
	// A restored ledger holds the rows HQ acknowledged up to its backup's last: the batches
	// whose last row it holds come first.
	after := int64(0)
	lo, hi := 0, len(ends)
	for lo < hi {
		mid := lo + (hi-lo)/2
		held, err := RowHeld(ctx, r, ends[mid].id, ends[mid].key)
		if err != nil {
			return 0, true, err
		}
		if held {
			after, lo = ends[mid].id, mid+1
		} else {
			hi = mid
		}
	}
	return after, true, nil
}

// readInParts reads how far each declaration in parts has gone (nil: none).
func readInParts(ctx context.Context, state *sql.DB) (map[string]client.UploadParts, error) {
	rows, err := state.QueryContext(ctx, `SELECT business_date, revision, min(part) - 1, parts FROM day_parts
		GROUP BY business_date`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out map[string]client.UploadParts
	for rows.Next() {
		var d string
		var p client.UploadParts
		if err := rows.Scan(&d, &p.Revision, &p.Sent, &p.Parts); err != nil {
			return nil, err
		}
		if out == nil {
			out = map[string]client.UploadParts{}
		}
		out[d] = p
	}
	return out, rows.Err()
}

// RowHeld reports whether the ledger's outbox row id is, in r's snapshot, the row of key
// (RowKey).
func RowHeld(ctx context.Context, r *ledger.HQReader, id int64, key string) (bool, error) {
	rows, err := r.OutboxAfter(ctx, id-1, 1)
	if err != nil {
		return false, err
	}
	return len(rows) == 1 && rows[0].ID == id && RowKey(&rows[0]) == key, nil
}

// ReadKV reads the state's small named values (the kv table).
func ReadKV(ctx context.Context, state *sql.DB) (map[string]string, error) {
	rows, err := state.QueryContext(ctx, `SELECT k, v FROM kv`)
	if err != nil {
		return nil, fmt.Errorf("read state: %w", err)
	}
	defer rows.Close()
	m := map[string]string{}
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			return nil, fmt.Errorf("read state: %w", err)
		}
		m[k] = v
	}
	return m, rows.Err()
}

func atoi(s string) int64 {
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

// RowKey is how the state names an outbox row (kv sent_key, batches.last_key):
// terminal:seq:hash, which tells the same ledger's row from another's at the same id.
func RowKey(o *ledger.OutboxRow) string {
	return o.Row.Terminal + ":" + strconv.FormatInt(o.Row.Seq, 10) + ":" + o.Row.Hash
}
