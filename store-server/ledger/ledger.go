// Package ledger is the store's SQLite ledger, the final judge of what the store sold: every
// event the store decided, unique per (terminal, seq); accepted sales, refunds and day closes;
// stock and the moves that prove it; store flow numbers; oversell and refund exceptions;
// parked events; and the queue of rows owed to headquarters.
//
// The ledger is written by one goroutine (the ingest's committer) through the single writer
// connection, many events per transaction (Commit). Reads go through the read-only pool.
// Redis is a projection rebuilt from Snapshot; the ledger never reads Redis and never takes
// a fact from it that it cannot store itself. It must never store an event twice, never
// overwrite a final result, and never change stock without a stock move.
package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/posgate/posgate/internal/sqlitedb"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/schema"
)

// Stable error and refusal codes of the ledger.
const (
	// CodeOutOfStock refuses a live sale in degrade mode (Record.CheckStock) that would take a
	// SKU below zero. The refusal is stored non-final.
	CodeOutOfStock = "out_of_stock"
	// CodeIdempotencyConflict answers a record whose key is stored final with another hash.
	CodeIdempotencyConflict = "idempotency_conflict"
	// CodeFlowClash is the Outcome.Err code of a record whose flow number is already taken
	// on its business date.
	CodeFlowClash = "flow_clash"
	// CodeRecordInvalid is the Outcome.Err code of a record the ledger cannot store as given
	// (no terminal or seq, unknown status, an accepted event without a readable payload).
	CodeRecordInvalid = "ledger_record_invalid"
	// CodeConstraint is the Outcome.Err code of a record that broke another ledger constraint.
	CodeConstraint = "ledger_constraint"
	// CodeAdjustmentConflict answers an adjustment id reused with another SKU, delta or reason.
	CodeAdjustmentConflict = "adjustment_conflict"
	// CodeAdjustmentInvalid answers an adjustment without id or SKU, or with an unknown reason.
	CodeAdjustmentInvalid = "adjustment_invalid"
)

// Stock movement and adjustment reasons (a sale's movement is its lines: no stock_moves
// row has reason sale; the view stock_flow names them so).
const (
	ReasonOpening = "opening"
	ReasonAdjust  = "adjust"
	ReasonSale    = "sale"
	ReasonRefund  = "refund"
)

// SnapshotDays is how many business dates before today (in the store's zone) Snapshot
// returns counters for; later dates (a terminal clock running ahead) are included too.
// MaxFlow is returned for every date whose keys are in Redis, however old, so flow numbers
// never repeat; a date whose keys left Redis takes its flow numbers from the ledger.
const SnapshotDays = 7

const timeFormat = time.RFC3339Nano

// Ledger is a store's ledger database.
type Ledger struct {
	// Now is the clock for receive, park and adjustment times and for Snapshot's window
	// (time.Now unless set). Business dates never come from it.
	Now func() time.Time

	db      *sqlitedb.DB
	storeID string
	loc     *time.Location

	mu   sync.Mutex
	prep map[string]*sql.Stmt // statements prepared on the writer connection, by query

	daysMu   sync.RWMutex
	expired  map[string]bool  // business days whose keys left Redis (redis_days)
	archSeqs map[string]int64 // archived_seqs, read when first needed (nil: not read)

	// betweenReads, when a test sets it, runs in readDay (Totals, DayCloses) after the
	// ledger's read and before the archive's.
	betweenReads func()
}

// openClock is a new Ledger's Now (tests set it to open a ledger at a time of theirs).
var openClock = time.Now

// Open opens (creating and migrating) the ledger of store storeID at path. loc is the
// store's time zone, in which business dates are taken. A ledger created for another store
// is refused.
func Open(ctx context.Context, path, storeID string, loc *time.Location) (*Ledger, error) {
	if !wire.ValidID(storeID) {
		return nil, fmt.Errorf("open ledger: store id %q is not valid", storeID)
	}
	if loc == nil {
		return nil, errors.New("open ledger: the store's time zone is missing")
	}
	db, err := sqlitedb.OpenExclusive(ctx, path, schema.Store())
	if err != nil {
		return nil, fmt.Errorf("open ledger: %w", err)
	}
	l := &Ledger{Now: openClock, db: db, storeID: storeID, loc: loc, prep: map[string]*sql.Stmt{}}
	if err := l.claim(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("open ledger: %w", err)
	}
	if err := l.takeRestore(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("open ledger: restored: %w", err)
	}
	if err := l.loadRedisDays(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("open ledger: %w", err)
	}
	return l, nil
}

// claim records the store id in a new ledger and checks it in an existing one.
func (l *Ledger) claim(ctx context.Context) error {
	if _, err := l.db.W.ExecContext(ctx, `INSERT INTO meta (k, v) VALUES ('store_id', ?) ON CONFLICT (k) DO NOTHING`,
		l.storeID); err != nil {
		return err
	}
	var id string
	if err := l.db.W.QueryRowContext(ctx, `SELECT v FROM meta WHERE k = 'store_id'`).Scan(&id); err != nil {
		return err
	}
	if id != l.storeID {
		return fmt.Errorf("%s is the ledger of store %q, not %q", l.db.Path, id, l.storeID)
	}
	return nil
}

// Close closes the database. The ledger must not be used afterwards.
func (l *Ledger) Close() error {
	l.mu.Lock()
	for q, s := range l.prep {
		s.Close()
		delete(l.prep, q)
	}
	l.mu.Unlock()
	return l.db.Close()
}

// Dir returns the directory of the ledger's files.
func (l *Ledger) Dir() string { return filepath.Dir(l.db.Path) }

// FileBytes returns the size of the ledger's files: the database, its write-ahead log and
// the log's index.
func (l *Ledger) FileBytes() int64 {
	var n int64
	for _, suffix := range []string{"", "-wal", "-shm"} {
		if fi, err := os.Stat(l.db.Path + suffix); err == nil {
			n += fi.Size()
		}
	}
	return n
}

// FileName is the ledger's name in a store-server's data directory, and in a backup of it.
const FileName = "ledger.db"

// Backup writes a consistent copy of the ledger, as of one commit, into the new file dst
// while the store goes on trading (sqlitedb.Snapshot: the copy is checked, and nothing is
// left at dst on an error).
//
// The copy carries a mark (meta backup_ms: when it was made) that the ledger, opened from
// it after a restore, takes for one (takeRestore, RestoredAt); ingest asks each till for the
// events the copy does not hold as it meets them.
func (l *Ledger) Backup(ctx context.Context, dst string) error {
	at := l.now().UnixMilli()
	return sqlitedb.SnapshotEdit(ctx, l.db.Path, dst, func(ctx context.Context, db *sql.DB) error {
		_, err := db.ExecContext(ctx, `INSERT INTO meta (k, v) VALUES ('backup_ms', ?)
			ON CONFLICT (k) DO UPDATE SET v = excluded.v`, strconv.FormatInt(at, 10))
		return err
	})
}

// takeRestore turns the mark of a backup's copy (meta backup_ms) into the time the ledger
// was restored (meta restored_ms: now, or just after the last event it holds if that is
// later), in one transaction: the mark is taken once, by the
// first store-server that opens the restored ledger, and a later restore of another backup
// moves the time on.
func (l *Ledger) takeRestore(ctx context.Context) error {
	tx, err := l.db.W.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	var backup string
	err = tx.QueryRowContext(ctx, `SELECT v FROM meta WHERE k = 'backup_ms'`).Scan(&backup)
	if errors.Is(err, sql.ErrNoRows) {
		return nil
	}
	if err != nil {
		return err
	}
	// Later than every event the copy holds, even if this machine's clock is behind the one
	// that received them: an event of a terminal at or after it is one heard since.
	var last int64
	if err := tx.QueryRowContext(ctx, `SELECT coalesce(max(received_ms), 0) FROM events`).Scan(&last); err != nil {
		return err
	}
	at := max(l.now().UnixMilli(), last+1)
	if _, err := tx.ExecContext(ctx, `INSERT INTO meta (k, v) VALUES ('restored_ms', ?)
		ON CONFLICT (k) DO UPDATE SET v = excluded.v`, strconv.FormatInt(at, 10)); err != nil {
		return err
	}
	// The copy's rows for HQ are the lost ledger's up to their highest id: the uploader
	// resumes from there once the tills refilled the ledger (RestoredOutbox).
	if _, err := tx.ExecContext(ctx, `INSERT INTO meta (k, v) VALUES ('restored_outbox', (SELECT coalesce(max(id), 0) FROM hq_outbox))
		ON CONFLICT (k) DO UPDATE SET v = excluded.v`); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM meta WHERE k = 'backup_ms'`); err != nil {
		return err
	}
	return tx.Commit()
}

// RestoredAt returns when the ledger was restored from a backup (the first time a
// store-server opened it after the last restore), if it was.
func (l *Ledger) RestoredAt(ctx context.Context) (time.Time, bool, error) {
	var v string
	err := l.db.R.QueryRowContext(ctx, `SELECT v FROM meta WHERE k = 'restored_ms'`).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, fmt.Errorf("restored at: %w", err)
	}
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("restored at: %q: %w", v, err)
	}
	return time.UnixMilli(ms), true, nil
}

// FinishCheckpoint lets a long log start over (sqlitedb.DB.FinishCheckpoint): the committer
// calls it between group commits.
func (l *Ledger) FinishCheckpoint(ctx context.Context) error { return l.db.FinishCheckpoint(ctx) }

// prepared returns the statement prepared on the writer connection for query, or nil.
func (l *Ledger) prepared(query string) *sql.Stmt {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.prep[query]
}

// prepare prepares query on the writer connection for later transactions. It must not be
// called inside a write transaction (the writer pool has one connection). A failure only
// means the next transaction prepares the statement for itself again.
func (l *Ledger) prepare(query string) {
	if l.prepared(query) != nil {
		return
	}
	s, err := l.db.W.PrepareContext(context.Background(), query)
	if err != nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.prep[query] != nil {
		s.Close()
		return
	}
	l.prep[query] = s
}

// StoreID returns the store this ledger belongs to.
func (l *Ledger) StoreID() string { return l.storeID }

// BusinessDate returns the business date ("2006-01-02") of a sale made at at: its date in the
// store's time zone, whenever it is synced (invariant 7).
func (l *Ledger) BusinessDate(at time.Time) string {
	return at.In(l.loc).Format(wire.BusinessDate)
}

func (l *Ledger) now() time.Time {
	if l.Now == nil {
		return time.Now()
	}
	return l.Now()
}

// Stored is what the ledger holds for one idempotency key.
type Stored struct {
	Kind         wire.Kind
	Hash         string
	Status       wire.AckStatus
	Final        bool
	Code         string
	Message      string
	FlowNo       int64
	BusinessDate string
	Oversold     bool
}

// outcome returns the stored result as a Commit outcome.
func (s Stored) outcome() Outcome {
	return Outcome{Status: s.Status, Code: s.Code, Message: s.Message, FlowNo: s.FlowNo,
		BusinessDate: s.BusinessDate, Oversold: s.Oversold}
}

const lookupQuery = `SELECT kind, hash, status, final, code, message, coalesce(flow_no, 0), business_date, oversold
	FROM events WHERE terminal = ? AND seq = ?`

func scanStored(row *sql.Row) (Stored, bool, error) {
	var s Stored
	err := row.Scan(&s.Kind, &s.Hash, &s.Status, &s.Final, &s.Code, &s.Message, &s.FlowNo, &s.BusinessDate, &s.Oversold)
	if errors.Is(err, sql.ErrNoRows) {
		return Stored{}, false, nil
	}
	if err != nil {
		return Stored{}, false, err
	}
	return s, true, nil
}

// Lookup returns what the ledger holds for the event (terminal, seq), if anything. The
// caller compares Hash to detect a conflict and checks Final: a non-final result (a live
// refusal) does not bind a later delivery of the key.
func (l *Ledger) Lookup(ctx context.Context, terminal string, seq int64) (Stored, bool, error) {
	s, ok, err := scanStored(l.db.R.QueryRowContext(ctx, lookupQuery, terminal, seq))
	if err == nil && !ok {
		s, ok, err = l.lookupArchived(ctx, terminal, seq)
	}
	if err != nil {
		return Stored{}, false, fmt.Errorf("lookup %s: %w", wire.Key(terminal, seq), err)
	}
	return s, ok, nil
}

// Next returns, for every terminal the ledger has heard from, the next seq it expects: the
// highest seq recorded (final or not) plus one.
func (l *Ledger) Next(ctx context.Context) (map[string]int64, error) {
	rows, err := l.db.R.QueryContext(ctx, `SELECT terminal, max(seq) FROM events GROUP BY terminal`)
	if err != nil {
		return nil, fmt.Errorf("next seqs: %w", err)
	}
	defer rows.Close()
	next := map[string]int64{}
	for rows.Next() {
		var t string
		var seq int64
		if err := rows.Scan(&t, &seq); err != nil {
			return nil, fmt.Errorf("next seqs: %w", err)
		}
		next[t] = seq + 1
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("next seqs: %w", err)
	}
	if err := l.refilledNext(ctx, next); err != nil {
		return nil, fmt.Errorf("next seqs: %w", err)
	}
	return next, nil
}
