// Package postgres is HQ's storage engine for a chain: hqstore.Storage on PostgreSQL through
// pgx/v5 (pgxpool), with the same tables and semantics as the SQLite engine, for several
// serve processes sharing one database.
//
// A batch is stored in one transaction under its store's advisory lock, so that batches of
// one store (from one or several processes) are stored one after the other and those of
// different stores side by side. The batch's key is claimed first (a copy of the same batch
// that waited for the lock finds it and answers the original receipt), its new rows are
// COPYed into their day's partition (insertRows says how a row is known new), its
// declarations of days and its exceptions are applied, and the receipt is written last. A
// deadlock between two batches is retried. The package never stores a batch partially.
//
// The two tables that grow with every sale, rows and day_txns, are partitioned by business
// date (schema/hqpg): a batch makes the partitions of a day it needs before its transaction
// (partitions.prepare), serve makes them ahead (PrepareDays) and drops those of old days
// reconcile has covered (Retain).
package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/posgate/posgate/hq-sync/hqstore"
	"github.com/posgate/posgate/internal/hqwire"
	"github.com/posgate/posgate/schema"
)

// Store is HQ's database on PostgreSQL. It implements hqstore.Storage and
// hqstore.Partitioner, and is safe for concurrent use.
type Store struct {
	pool  *pgxpool.Pool
	parts *partitions
}

var (
	_ hqstore.Storage     = (*Store)(nil)
	_ hqstore.Partitioner = (*Store)(nil)
)

// Options tune Open. Zero values take the defaults.
type Options struct {
	// MaxConns bounds the connections to the database, and so the batches stored at once
	// by this process (default: pgxpool's, the larger of 4 and the number of CPUs; a
	// pool_max_conns in the URL wins).
	MaxConns int32
}

// AppName is the application_name of posgate's connections (pg_stat_activity shows
// them by it), unless the URL gives one.
const AppName = "posgate-hq"

// Open connects to the database at url (a postgres:// URL or a key=value string, as pgx
// takes it) and applies HQ's migrations.
func Open(ctx context.Context, url string) (*Store, error) { return OpenWith(ctx, url, Options{}) }

// OpenWith is Open with options.
func OpenWith(ctx context.Context, url string, o Options) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("open hq database: %w", err)
	}
	if o.MaxConns > 0 && !strings.Contains(url, "pool_max_conns") {
		cfg.MaxConns = o.MaxConns
	}
	if _, ok := cfg.ConnConfig.RuntimeParams["application_name"]; !ok {
		cfg.ConnConfig.RuntimeParams["application_name"] = AppName
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open hq database: %w", err)
	}
	if err := migrate(ctx, pool); err != nil {
		pool.Close()
		return nil, fmt.Errorf("open hq database: %w", err)
	}
	return &Store{pool: pool, parts: newPartitions()}, nil
}

// migrationLock is the advisory lock key that serializes migrations of one database.
const migrationLock = 0x706f7367_68710001 // "posg" "hq" 1

// migrate applies HQ's PostgreSQL migrations (schema.HQPostgres) not yet recorded in the
// migrations table, in name order, each in its own transaction together with its record.
func migrate(ctx context.Context, pool *pgxpool.Pool) error {
	migrations := schema.HQPostgres()
	names, err := fs.Glob(migrations, "*.sql")
	if err != nil {
		return fmt.Errorf("list migrations: %w", err)
	}
	sort.Strings(names)
	for _, name := range names {
		body, err := fs.ReadFile(migrations, name)
		if err != nil {
			return fmt.Errorf("read migration %s: %w", name, err)
		}
		err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(migrationLock)); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS migrations (
				name text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
				return err
			}
			var n int
			if err := tx.QueryRow(ctx, `SELECT count(*) FROM migrations WHERE name = $1`, name).Scan(&n); err != nil || n > 0 {
				return err
			}
			if _, err := tx.Exec(ctx, string(body)); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO migrations (name) VALUES ($1)`, name)
			return err
		})
		if err != nil {
			return fmt.Errorf("migration %s: %w", name, err)
		}
	}
	return nil
}

// Close closes the connection pool.
func (s *Store) Close() error {
	s.pool.Close()
	return nil
}

// BatchCount returns how many batches are stored (of all stores).
func (s *Store) BatchCount(ctx context.Context) (int64, error) {
	var n int64
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM batches`).Scan(&n); err != nil {
		return 0, fmt.Errorf("count batches: %w", err)
	}
	return n, nil
}

// LastBatches implements hqstore.Storage: one lookup of the (store, stored_ms) index per store,
// in one query.
func (s *Store) LastBatches(ctx context.Context, stores []string) (map[string]time.Time, error) {
	out := make(map[string]time.Time, len(stores))
	rows, err := s.pool.Query(ctx, `SELECT st, (SELECT max(stored_ms) FROM batches WHERE store = st)
		FROM unnest($1::text[]) AS st`, stores)
	if err != nil {
		return nil, fmt.Errorf("last batches: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var st string
		var ms *int64
		if err := rows.Scan(&st, &ms); err != nil {
			return nil, fmt.Errorf("last batches: %w", err)
		}
		if ms != nil {
			out[st] = time.UnixMilli(*ms).UTC()
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("last batches: %w", err)
	}
	return out, nil
}

// PartsKept returns how many store-days have parts of a declaration kept aside, waiting for
// their last part, and how many transactions those parts hold (of all stores).
func (s *Store) PartsKept(ctx context.Context) (days, txns int64, err error) {
	if err := s.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM day_drafts), (SELECT count(*) FROM draft_txns)`).
		Scan(&days, &txns); err != nil {
		return 0, 0, fmt.Errorf("count parts kept aside: %w", err)
	}
	return days, txns, nil
}

// DropDrafts implements hqstore.Storage, in one transaction. It locks the drafts it deletes
// before their transactions, as a part does, and skips a draft a batch holds: that one is
// dropped at the next call if it is still stale.
func (s *Store) DropDrafts(ctx context.Context, before time.Time) (int64, error) {
	var n int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT store, business_date FROM day_drafts WHERE first_ms < $1
			FOR UPDATE SKIP LOCKED`, before.UnixMilli())
		if err != nil {
			return err
		}
		type day struct{ store, date string }
		days, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (day, error) {
			var d day
			return d, r.Scan(&d.store, &d.date)
		})
		if err != nil {
			return err
		}
		for _, d := range days {
			if _, err := tx.Exec(ctx, `DELETE FROM draft_txns WHERE business_date = $1 AND store = $2`,
				d.date, d.store); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `DELETE FROM day_drafts WHERE store = $1 AND business_date = $2`,
				d.store, d.date); err != nil {
				return err
			}
		}
		n = int64(len(days))
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("drop parts kept aside: %w", err)
	}
	return n, nil
}

// maxAttempts bounds the retries of a batch that lost a race with a concurrent one.
const maxAttempts = 8

// PutBatch implements hqstore.Storage: the whole batch in one transaction, under its
// store's lock, idempotent by (store, batch id) and content hash. Receipt.Days counts the
// declarations that became the day's current one (a revision higher than the one held,
// whole or by its last part), Receipt.DayParts the parts kept aside (see putDays),
// Receipt.Exceptions the exceptions applied (see putExceptions).
func (s *Store) PutBatch(ctx context.Context, b *hqwire.Batch, contentHash string, at time.Time) (hqwire.Receipt, error) {
	if err := hqstore.Check(b, contentHash); err != nil {
		return hqwire.Receipt{}, err
	}
	at = at.Round(0).UTC()
	var rowDays, declared []string
	for i := range b.Rows {
		rowDays = append(rowDays, b.Rows[i].BusinessDate)
	}
	for i := range b.Days {
		declared = append(declared, b.Days[i].BusinessDate)
	}
	days := batchDays(rowDays, declared)
	for attempt := 1; ; attempt++ {
		err := s.parts.prepare(ctx, s.pool, days)
		var rc hqwire.Receipt
		if err == nil {
			rc, err = s.putOnce(ctx, b, contentHash, at)
		}
		if missingPartition(err) {
			s.parts.forget() // another process dropped a day this one had seen
		}
		if err == nil || attempt == maxAttempts || !(retryable(err) || missingPartition(err)) || ctx.Err() != nil {
			return rc, err
		}
		select {
		case <-ctx.Done():
			return hqwire.Receipt{}, fmt.Errorf("put batch: %w", ctx.Err())
		case <-time.After(time.Duration(attempt) * 10 * time.Millisecond):
		}
	}
}

// retryable reports whether err is a deadlock or a serialization failure, which a new
// attempt of the same transaction may not meet.
func retryable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40P01" || pe.Code == "40001")
}

// lockStore is the statement that takes a store's lock for the rest of the transaction.
const lockStore = `SELECT pg_advisory_xact_lock(hashtextextended('posgate-hq-store/' || $1, 0))`

func (s *Store) putOnce(ctx context.Context, b *hqwire.Batch, contentHash string, at time.Time) (hqwire.Receipt, error) {
	br, twins := distinctRows(b) // a row_conflict, answered once the batch id is known new
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return hqwire.Receipt{}, fmt.Errorf("put batch: %w", err)
	}
	defer tx.Rollback(ctx)

	// The store's lock, then the batch's key and the terminals' highest seqs HQ holds, in
	// one round trip: a copy of the same batch storing in another transaction (or process)
	// is committed by the time the lock is ours, and its receipt is found.
	var pb pgx.Batch
	pb.Queue(lockStore, b.Store)
	var hash, js string
	found := false
	pb.Queue(`SELECT content_hash, receipt FROM batches WHERE store = $1 AND batch_id = $2`, b.Store, b.ID).
		QueryRow(func(row pgx.Row) error {
			err := row.Scan(&hash, &js)
			if errors.Is(err, pgx.ErrNoRows) {
				return nil
			}
			found = err == nil
			return err
		})
	top := map[string]int64{}
	queueHeldSeqs(&pb, b.Store, br, top)
	if err := tx.SendBatch(ctx, &pb).Close(); err != nil {
		return hqwire.Receipt{}, fmt.Errorf("put batch: lock store and look up batch: %w", err)
	}
	if found {
		return storedReceipt(b.Store, b.ID, contentHash, hash, js)
	}
	if twins != nil {
		return hqwire.Receipt{}, twins
	}
	rc := hqwire.Receipt{Store: b.Store, BatchID: b.ID, Rows: len(b.Rows), StoredAt: at}
	fresh, err := insertRows(ctx, tx, b, br, top, at, s.parts)
	if err != nil {
		return hqwire.Receipt{}, err
	}
	rc.New = len(fresh)
	if err = putDays(ctx, tx, b, at, &rc, s.parts); err != nil {
		return hqwire.Receipt{}, err
	}
	if rc.Exceptions, err = putExceptions(ctx, tx, b, at); err != nil {
		return hqwire.Receipt{}, err
	}
	receipt, err := json.Marshal(rc)
	if err != nil {
		return hqwire.Receipt{}, fmt.Errorf("put batch: %w", err)
	}
	var end pgx.Batch // the terminals' seqs raised and the receipt, in one round trip
	queueRaiseSeqs(&end, b.Store, fresh)
	end.Queue(`INSERT INTO batches (store, batch_id, content_hash, receipt, stored_ms)
		VALUES ($1, $2, $3, $4, $5)`, b.Store, b.ID, contentHash, string(receipt), at.UnixMilli())
	if err := tx.SendBatch(ctx, &end).Close(); err != nil {
		return hqwire.Receipt{}, fmt.Errorf("put batch: receipt: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return hqwire.Receipt{}, fmt.Errorf("put batch: commit: %w", err)
	}
	return rc, nil
}

// storedReceipt returns the original receipt (Duplicate set) of a batch stored before with
// hash and receipt js, for the same content, and a batch_id_reused error for other content.
func storedReceipt(store, id, contentHash, hash, js string) (hqwire.Receipt, error) {
	if hash != contentHash {
		return hqwire.Receipt{}, hqstore.ErrBatchIDReused(store, id)
	}
	var rc hqwire.Receipt
	if err := json.Unmarshal([]byte(js), &rc); err != nil {
		return hqwire.Receipt{}, fmt.Errorf("put batch: stored receipt of %s/%s: %w", store, id, err)
	}
	rc.Duplicate = true
	return rc, nil
}
