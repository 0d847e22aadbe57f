// Package outbox is the terminal-agent's durable state in SQLite: the cashier's sales,
// payments, refunds and day closes, the catalog it prices from, the client tokens that make a
// double click one request, and the queue of events the terminal owes its store.
//
// Every state change is committed (WAL, synchronous=FULL) before the caller answers the POS
// app. A seq is taken from an AUTOINCREMENT key, so it is never reused, also after a crash or
// after pruning. The package never deletes an event that the store has not acknowledged.
package outbox

import (
	"context"
	"crypto/rand"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/perr"
	"github.com/posgate/posgate/internal/sqlitedb"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/schema"
	"github.com/posgate/posgate/terminal-agent/client"
)

// Caps are the offline limits. Cash is never capped.
type Caps struct {
	// MaxCardPayment is the largest single card/QR payment taken offline (0: no limit).
	MaxCardPayment money.Fen
	// MaxStoredCard is the most card/QR money held unsynced in the outbox (0: no limit).
	MaxStoredCard money.Fen
	// MaxOffline is how long the terminal may take card/QR payments offline (0: no limit).
	MaxOffline time.Duration
}

// Config configures a Store.
type Config struct {
	Store    string
	Terminal string
	// Location is the store's time zone; business dates are taken in it.
	Location *time.Location
	// Now is the clock (time.Now if nil).
	Now  func() time.Time
	Caps Caps
	// CloseLookbackDays is how many days before today a close that names no day looks for
	// an open business day; older open days are closed by name (DefaultCloseLookbackDays if
	// 0; see DayToClose).
	CloseLookbackDays int
	// KeepRequests is how many requests must be recorded after a request before Prune may
	// delete its record (DefaultKeepRequests if 0).
	KeepRequests int64
	// Logger receives the storage refusals of Do, each code at most once in 10 s
	// (slog.Default if nil).
	Logger *slog.Logger
	// KeepUnheld is how long Prune keeps an acknowledged event whose business day HQ does
	// not hold (DefaultKeepUnheld if 0): the bound of the outbox when HQ never
	// acknowledges.
	KeepUnheld time.Duration
}

// Store is the terminal's database.
type Store struct {
	db     *sqlitedb.DB
	cfg    Config
	wstmts *stmtCache // statements prepared on the writer connection
	rstmts *stmtCache // statements prepared on the reader pool

	approving sync.Mutex // one supervisor's PIN checked at a time (Approve)
	storage   storageLog
}

// Dir returns the directory of the outbox's files.
func (s *Store) Dir() string { return filepath.Dir(s.db.Path) }

// Open opens (creating and migrating) the terminal database at path.
func Open(ctx context.Context, path string, cfg Config) (*Store, error) {
	if cfg.Location == nil {
		cfg.Location = time.Local
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	db, err := sqlitedb.OpenExclusive(ctx, path, schema.Terminal())
	if err != nil {
		return nil, fmt.Errorf("open outbox: %w", err)
	}
	return &Store{db: db, cfg: cfg, wstmts: newStmtCache(db.W), rstmts: newStmtCache(db.R)}, nil
}

// Close closes the database.
func (s *Store) Close() error {
	s.wstmts.close()
	s.rstmts.close()
	return s.db.Close()
}

// Config returns the store's configuration.
func (s *Store) Config() Config { return s.cfg }

func (s *Store) now() time.Time { return s.cfg.Now().In(s.cfg.Location) }

// BusinessDate is the business day of t in the store's time zone.
func (s *Store) BusinessDate(t time.Time) string {
	return t.In(s.cfg.Location).Format(wire.BusinessDate)
}

// Event is a queued event as the sync lane publishes it.
type Event struct {
	Seq     int64
	Kind    wire.Kind
	At      time.Time
	Payload []byte
	Hash    string
	Offline bool
	Created time.Time
	// Replay and LostFrom are set on an event sent again on the store's request (Sendable).
	Replay   *wire.Replay
	LostFrom int64
}

// Envelope returns the event's wire envelope.
func (e *Event) Envelope(store, terminal string) wire.Envelope {
	return wire.Envelope{
		V: wire.Version, Kind: e.Kind, Store: store, Terminal: terminal, Seq: e.Seq,
		Key: wire.Key(terminal, e.Seq), Hash: e.Hash, At: e.At, Offline: e.Offline, Payload: e.Payload,
		Replay: e.Replay, LostFrom: e.LostFrom,
	}
}

// Pending returns up to limit undelivered events with seq > after, in seq order.
func (s *Store) Pending(ctx context.Context, after int64, limit int) ([]Event, error) {
	rows, err := s.readRows(ctx, `SELECT seq, kind, at, payload, hash, offline, created_ms FROM events
		WHERE state = 'pending' AND seq > ? ORDER BY seq LIMIT ?`, after, limit)
	if err != nil {
		return nil, fmt.Errorf("pending events: %w", err)
	}
	defer rows.Close()
	var out []Event
	for rows.Next() {
		var e Event
		var at string
		var created int64
		if err := rows.Scan(&e.Seq, &e.Kind, &at, &e.Payload, &e.Hash, &e.Offline, &created); err != nil {
			return nil, fmt.Errorf("pending events: %w", err)
		}
		e.Created = time.UnixMilli(created)
		if e.At, err = time.Parse(time.RFC3339Nano, at); err != nil {
			return nil, fmt.Errorf("pending event %d: bad time %q: %w", e.Seq, at, err)
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

// Backlog is the undelivered part of the queue.
type Backlog struct {
	Count      int64
	OldestSeq  int64
	OldestAt   time.Time // when the oldest undelivered event was created (zero if none)
	StoredCard money.Fen // card/QR money in undelivered events
	Parked     int64
}

// Backlog returns the queue's figures.
func (s *Store) Backlog(ctx context.Context) (Backlog, error) {
	var b Backlog
	var oldestMs sql.NullInt64
	var oldestSeq sql.NullInt64
	err := s.readRow(ctx, `SELECT count(*), min(seq), min(created_ms), coalesce(sum(stored_fen), 0)
		FROM events WHERE state = 'pending'`).Scan(&b.Count, &oldestSeq, &oldestMs, &b.StoredCard)
	if err != nil {
		return b, fmt.Errorf("backlog: %w", err)
	}
	if oldestMs.Valid {
		b.OldestAt = time.UnixMilli(oldestMs.Int64)
		b.OldestSeq = oldestSeq.Int64
	}
	if err := s.readRow(ctx, `SELECT count(*) FROM events WHERE state = 'parked'`).Scan(&b.Parked); err != nil {
		return b, fmt.Errorf("backlog: %w", err)
	}
	return b, nil
}

// LastSeq returns the highest seq given to an event (0 before the first), also once the
// event is pruned: seq is AUTOINCREMENT.
func (s *Store) LastSeq(ctx context.Context) (int64, error) {
	var seq int64
	err := s.db.R.QueryRowContext(ctx, `SELECT coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'events'), 0)`).Scan(&seq)
	return seq, err
}

// PendingBefore counts undelivered events with a seq below seq.
func (s *Store) PendingBefore(ctx context.Context, seq int64) (int64, error) {
	var n int64
	err := s.db.R.QueryRowContext(ctx, `SELECT count(*) FROM events WHERE state = 'pending' AND seq < ?`, seq).Scan(&n)
	return n, err
}

// Parked lists parked events, oldest first.
func (s *Store) Parked(ctx context.Context, limit int) ([]client.Parked, error) {
	rows, err := s.db.R.QueryContext(ctx, `SELECT seq, kind, at, coalesce(ack_status, ''), coalesce(code, ''),
		coalesce(message, '') FROM events WHERE state = 'parked' ORDER BY seq LIMIT ?`, limit)
	if err != nil {
		return nil, fmt.Errorf("parked events: %w", err)
	}
	defer rows.Close()
	var out []client.Parked
	for rows.Next() {
		var p client.Parked
		var at string
		if err := rows.Scan(&p.Seq, &p.Kind, &at, &p.Status, &p.Code, &p.Message); err != nil {
			return nil, fmt.Errorf("parked events: %w", err)
		}
		p.At, _ = time.Parse(time.RFC3339Nano, at)
		p.Key = wire.Key(s.cfg.Terminal, p.Seq)
		out = append(out, p)
	}
	return out, rows.Err()
}

// Transition is what an ack does to an event.
type Transition struct {
	Seq    int64
	Ack    wire.Ack
	Action Action
}

// Action is the effect of an ack on a queued event.
type Action int

// The actions.
const (
	Ack     Action = iota + 1 // delivered: the store has it
	Park                      // the store refused an offline event: keep it aside with its reason
	Refuse                    // a live verdict said no and the cashier was told: undo the sale step
	Offline                   // the terminal decided locally: deliver it as an offline event
)

// Apply applies transitions in one transaction and returns those that changed a pending event.
//
// Transitions that are all deliveries (Ack) commit without an fsync of their own (the next
// commit's fsync or checkpoint carries them): if a power cut loses them, their events are
// pending again, are resent, and the store answers each as a duplicate with its original
// result. A refusal, a park or a switch to offline is made durable before Apply returns: the
// cashier is told of it, and losing it could bring a refused sale back as an offline one.
func (s *Store) Apply(ctx context.Context, ts []Transition) ([]Transition, error) {
	if len(ts) == 0 {
		return nil, nil
	}
	durable := false
	for _, t := range ts {
		durable = durable || t.Action != Ack
	}
	nowMs := s.cfg.Now().UnixMilli()
	var done []Transition
	apply := func(tx *sql.Tx) error {
		done = done[:0]
		st := txStmts{ctx: ctx, tx: tx, cache: s.wstmts}
		for _, t := range ts {
			changed, err := applyOne(st, t, nowMs)
			if err != nil {
				return fmt.Errorf("apply ack %d: %w", t.Seq, err)
			}
			if changed {
				done = append(done, t)
			}
		}
		_, err := st.exec(setKVSQL, KVLastAck, nowMs)
		return err
	}
	var err error
	if durable {
		err = s.durable(ctx, apply)
	} else {
		err = s.unsynced(ctx, apply)
	}
	if err != nil {
		return nil, fmt.Errorf("apply acks: %w", err)
	}
	s.wstmts.warm(ctx)
	return done, nil
}

// durable runs fn in a write transaction and commits it (synchronous=FULL: durable on return).
func (s *Store) durable(ctx context.Context, fn func(*sql.Tx) error) error {
	return inTx(ctx, s.db.W, fn)
}

// inTx runs fn in a transaction of b (the writer pool or one of its connections) and
// commits it; if fn fails, nothing is stored.
func inTx(ctx context.Context, b interface {
	BeginTx(context.Context, *sql.TxOptions) (*sql.Tx, error)
}, fn func(*sql.Tx) error) error {
	tx, err := b.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit()
}

// unsynced is durable at synchronous=NORMAL: the commit is atomic and in the write-ahead
// log, on the disk with the next fsync. The writer connection is put back to FULL before
// anyone else may use it; one that cannot be put back is closed (the pool opens a new one,
// at FULL). Only what may be lost to a power cut without harm goes this way.
func (s *Store) unsynced(ctx context.Context, fn func(*sql.Tx) error) (err error) {
	c, err := s.db.W.Conn(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.ExecContext(ctx, "PRAGMA synchronous = NORMAL"); err != nil {
		return err
	}
	defer func() {
		if _, rerr := c.ExecContext(context.WithoutCancel(ctx), "PRAGMA synchronous = FULL"); rerr != nil {
			_ = c.Raw(func(any) error { return driver.ErrBadConn })
			if err == nil {
				err = rerr
			}
		}
	}()
	return inTx(ctx, c, fn)
}

func applyOne(tx txStmts, t Transition, nowMs int64) (bool, error) {
	a := t.Ack
	var kind string
	var err error
	switch t.Action {
	case Ack:
		var flow sql.NullInt64
		var date sql.NullString
		if a.Result != nil {
			flow = sql.NullInt64{Int64: a.Result.FlowNo, Valid: a.Result.FlowNo > 0}
			date = sql.NullString{String: a.Result.BusinessDate, Valid: a.Result.BusinessDate != ""}
		}
		err = tx.queryRow(`UPDATE events SET state = 'acked', done_ms = ?, ack_status = ?, flow_no = ?, store_date = ?,
			stored_fen = 0 WHERE seq = ? AND state = 'pending' RETURNING kind`,
			nowMs, string(a.Status), flow, date, t.Seq).Scan(&kind)
		if err == nil && flow.Valid {
			switch wire.Kind(kind) {
			case wire.KindSale:
				_, err = tx.exec(`UPDATE sales SET flow_no = ? WHERE seq = ?`, flow, t.Seq)
			case wire.KindRefund:
				_, err = tx.exec(`UPDATE refunds SET flow_no = ? WHERE seq = ?`, flow, t.Seq)
			}
		}
	case Park:
		err = tx.queryRow(`UPDATE events SET state = 'parked', done_ms = ?, ack_status = ?, code = ?, message = ?,
			stored_fen = 0 WHERE seq = ? AND state = 'pending' RETURNING kind`,
			nowMs, string(a.Status), a.Code, a.Message, t.Seq).Scan(&kind)
	case Refuse:
		err = tx.queryRow(`UPDATE events SET state = 'refused', done_ms = ?, ack_status = ?, code = ?, message = ?,
			stored_fen = 0 WHERE seq = ? AND state = 'pending' RETURNING kind`,
			nowMs, string(a.Status), a.Code, a.Message, t.Seq).Scan(&kind)
		if err == nil {
			err = undo(tx, wire.Kind(kind), t.Seq)
		}
	case Offline:
		var payload []byte
		err = tx.queryRow(`UPDATE events SET offline = 1 WHERE seq = ? AND state = 'pending' RETURNING kind, payload`,
			t.Seq).Scan(&kind, &payload)
		if err == nil && wire.Kind(kind) == wire.KindSale {
			// A sale decided locally holds its card and QR money offline like one taken
			// offline: it was queued as live, with none counted.
			var p wire.SalePayload
			if err = json.Unmarshal(payload, &p); err == nil {
				var stored money.Fen
				for _, pm := range p.Payments {
					if pm.Method != wire.MethodCash {
						stored += pm.Amount // bounded: the sale's payments were validated
					}
				}
				_, err = tx.exec(`UPDATE events SET stored_fen = ? WHERE seq = ?`, int64(stored), t.Seq)
			}
		}
	default:
		return false, fmt.Errorf("unknown action %d", t.Action)
	}
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil // not pending (already acked, or pruned): nothing to do
	}
	return err == nil, err
}

// undo reverts the sale step whose event seq was refused by a live verdict: a scanned line is
// removed, a completed sale reopens without its last payment, a refund is marked refused, a
// day close is taken back (the day is open again: the cashier was told the store refused it,
// and the store holds no close of it).
func undo(tx txStmts, kind wire.Kind, seq int64) error {
	var err error
	switch kind {
	case wire.KindScan:
		_, err = tx.exec(`UPDATE sale_lines SET removed = 1 WHERE scan_seq = ?`, seq)
	case wire.KindSale:
		var id string
		if err = tx.queryRow(`SELECT id FROM sales WHERE seq = ?`, seq).Scan(&id); err != nil {
			return err
		}
		if _, err = tx.exec(`UPDATE payments SET voided = 1 WHERE sale_id = ? AND n =
			(SELECT max(n) FROM payments WHERE sale_id = ? AND voided = 0)`, id, id); err != nil {
			return err
		}
		_, err = tx.exec(`UPDATE sales SET state = 'open', seq = NULL, completed_at = NULL,
			business_date = NULL, change = 0 WHERE id = ?`, id)
	case wire.KindRefund:
		_, err = tx.exec(`UPDATE refunds SET state = 'refused' WHERE seq = ?`, seq)
	case wire.KindDayClose:
		_, err = tx.exec(`DELETE FROM day_closes WHERE seq = ?`, seq)
	}
	return err
}

// EventState returns the delivery state of event seq (perr.NotFound if pruned or unknown).
func (s *Store) EventState(ctx context.Context, seq int64) (client.EventState, error) {
	e := client.EventState{Seq: seq, Key: wire.Key(s.cfg.Terminal, seq)}
	var flow sql.NullInt64
	err := s.readRow(ctx, `SELECT state, offline, coalesce(ack_status, ''), coalesce(code, ''),
		coalesce(message, ''), flow_no FROM events WHERE seq = ?`, seq).
		Scan(&e.State, &e.Offline, &e.Status, &e.Code, &e.Message, &flow)
	if errors.Is(err, sql.ErrNoRows) {
		return e, perr.New(perr.NotFound, "event_not_found", "event %d is unknown or pruned", seq)
	}
	e.FlowNo = flow.Int64
	return e, err
}

// DefaultKeepRequests is how many requests must be recorded after a request before its
// record may be pruned, unless Config.KeepRequests says otherwise (Prune).
const DefaultKeepRequests = 10_000

// Prune deletes what the outbox no longer needs: acknowledged and refused events whose
// delivery ended before before and whose business day HQ holds (or that are older than
// Config.KeepUnheld: retention.go), and the records of requests (Idempotency-Key) that no retry
// can still come for. Pending and parked events are never pruned. It returns the number of
// events deleted.
//
// A request's record is what answers a retry of it; without it the retry runs again, and a
// payment is taken twice. A POS app retries within minutes, but the clock cannot say how
// long ago that was: a device clock jumps (NTP stepping a clock that a dead RTC left days or
// years behind), and a record made a minute ago then looks older than any retention. So a
// record is deleted only when all of these hold:
//
//   - at least KeepRequests (DefaultKeepRequests, 10,000) requests have been recorded after
//     it. This measure owes nothing to the clock: at a request a second, faster than anyone
//     works a till, it is close to three hours of trade, and no app retries that late;
//   - it was made before before, by the clock;
//   - the clock has not gone back: no record is dated after now. A record from the future
//     means the clock was once ahead or is now behind; until now passes it, ages read off
//     the clock are not trusted and no record is deleted by its age.
//
// Whatever the clock says, a record with ten times KeepRequests requests after it is
// deleted, so that a clock that stays behind does not grow the table without end.
func (s *Store) Prune(ctx context.Context, before time.Time) (int64, error) {
	pruned, err := s.pruneEvents(ctx, before)
	if err != nil {
		return 0, err
	}
	keep := s.cfg.KeepRequests
	if keep <= 0 {
		keep = DefaultKeepRequests
	}
	err = s.durable(ctx, func(tx *sql.Tx) error {
		// last(k) is the n of the newest record with k records after it (0 if none has).
		last := func(k int64) (int64, error) {
			var n int64
			err := tx.QueryRowContext(ctx, `SELECT n FROM requests ORDER BY n DESC LIMIT 1 OFFSET ?`, k).Scan(&n)
			if errors.Is(err, sql.ErrNoRows) {
				return 0, nil
			}
			return n, err
		}
		byAge, err := last(keep)
		if err != nil || byAge == 0 {
			return err
		}
		anyClock, err := last(10 * keep)
		if err != nil {
			return err
		}
		var newest int64
		if err := tx.QueryRowContext(ctx, `SELECT max(created_ms) FROM requests`).Scan(&newest); err != nil {
			return err
		}
		if newest > s.now().UnixMilli() {
			byAge = 0 // the clock went back: no record is deleted by its age
		}
		_, err = tx.ExecContext(ctx, `DELETE FROM requests WHERE (n <= ? AND created_ms < ?) OR n <= ?`,
			byAge, before.UnixMilli(), anyClock)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("prune requests: %w", err)
	}
	return pruned, nil
}

// KV returns a named value (0 if unset).
func (s *Store) KV(ctx context.Context, k string) (int64, error) {
	var v int64
	err := s.db.R.QueryRowContext(ctx, `SELECT v FROM kv WHERE k = ?`, k).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	return v, err
}

// SetKV sets a named value.
func (s *Store) SetKV(ctx context.Context, k string, v int64) error {
	return setKV(ctx, s.db.W, k, v)
}

type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

const setKVSQL = `INSERT INTO kv (k, v) VALUES (?, ?) ON CONFLICT (k) DO UPDATE SET v = excluded.v`

func setKV(ctx context.Context, db execer, k string, v int64) error {
	_, err := db.ExecContext(ctx, setKVSQL, k, v)
	if err != nil {
		return fmt.Errorf("set %s: %w", k, err)
	}
	return nil
}

// Names of kv values.
const (
	KVCatalogVersion = "catalog_version"
	KVOfflineSince   = "offline_since_ms" // 0 while the store is reachable
	KVLastAck        = "last_ack_ms"
	// KVSilentSince is when the lane sent the first message the store has not answered,
	// once that is longer ago than the ack timeout (0: the store answers). It outlives a
	// restart, which would otherwise start the time offline from zero (--offline-max).
	KVSilentSince = "store_silent_since_ms"
	// KVBacklogReported is 1 while the broker may hold a backlog report of this terminal
	// (one was published and not cleared since).
	KVBacklogReported = "backlog_reported"
)

// newID returns a random id with a prefix.
func newID(prefix string) string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return prefix + "-" + hex.EncodeToString(b[:])
}

// ReplaceCatalog stores a catalog if its version is newer than the one held, and reports
// whether it did.
func (s *Store) ReplaceCatalog(ctx context.Context, c wire.Catalog) (bool, error) {
	tx, err := s.db.W.BeginTx(ctx, nil)
	if err != nil {
		return false, fmt.Errorf("replace catalog: %w", err)
	}
	defer tx.Rollback()
	var have int64
	err = tx.QueryRowContext(ctx, `SELECT v FROM kv WHERE k = ?`, KVCatalogVersion).Scan(&have)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return false, fmt.Errorf("replace catalog: %w", err)
	}
	if c.Version <= have {
		return false, nil
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM catalog`); err != nil {
		return false, fmt.Errorf("replace catalog: %w", err)
	}
	stmt, err := tx.PrepareContext(ctx, `INSERT INTO catalog (sku, barcode, name, price) VALUES (?, ?, ?, ?)`)
	if err != nil {
		return false, fmt.Errorf("replace catalog: %w", err)
	}
	defer stmt.Close()
	for _, it := range c.Items {
		bc := sql.NullString{String: it.Barcode, Valid: it.Barcode != ""}
		if _, err := stmt.ExecContext(ctx, it.SKU, bc, it.Name, int64(it.Price)); err != nil {
			return false, fmt.Errorf("replace catalog: %w", err)
		}
	}
	if err := setKV(ctx, tx, KVCatalogVersion, c.Version); err != nil {
		return false, err
	}
	return true, tx.Commit()
}
