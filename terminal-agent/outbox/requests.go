package outbox

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/mattn/go-sqlite3"

	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/perr"
	"github.com/posgate/posgate/internal/wire"
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
	err = storageError(err)
	s.noteStorage(err)
	return ref, seq, prior, err
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
