package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/perr"
	"github.com/posgate/posgate/internal/pinhash"
	"github.com/posgate/posgate/internal/wire"
)

// Codes of a supervisor's approval (Approve) and of the steps that need one.
const (
	// CodeSupervisorRequired refuses a step that needs a supervisor's approval without one:
	// a day's reopen, a refund above the store's threshold, a refund made offline.
	CodeSupervisorRequired = "supervisor_required"
	// CodeSupervisorUnknown refuses a supervisor the store's settings do not name.
	CodeSupervisorUnknown = "supervisor_unknown"
	// CodeSupervisorPINWrong refuses a supervisor's wrong PIN; it is counted.
	CodeSupervisorPINWrong = "supervisor_pin_wrong"
	// CodeSupervisorLocked refuses a supervisor after MaxPINFailures wrong PINs, until the
	// delay its retry_after_ms gives has passed.
	CodeSupervisorLocked = "supervisor_locked"
)

// MaxPINFailures is how many wrong PINs in a row a supervisor may have typed before the
// agent refuses the supervisor for a while: FirstLock after the MaxPINFailures-th, twice as
// long after each further one, at most MaxLock.
const (
	MaxPINFailures = 5
	FirstLock      = 30 * time.Second
	MaxLock        = time.Hour
)

// lockFor is how long a supervisor is refused after the n-th wrong PIN in a row (0: not).
func lockFor(n int64) time.Duration {
	if n < MaxPINFailures {
		return 0
	}
	d := FirstLock
	for i := int64(MaxPINFailures); i < n && d < MaxLock; i++ {
		d *= 2
	}
	return min(d, MaxLock)
}

// ReplaceSettings keeps the store's settings if their version is above the one held, and
// reports whether it did. payload is the message as published.
func (s *Store) ReplaceSettings(ctx context.Context, st wire.Settings, payload []byte) (bool, error) {
	res, err := s.db.W.ExecContext(ctx, `INSERT INTO settings (id, version, payload) VALUES (1, ?, ?)
		ON CONFLICT (id) DO UPDATE SET version = excluded.version, payload = excluded.payload
		WHERE excluded.version > settings.version`, st.Version, payload)
	if err != nil {
		return false, fmt.Errorf("replace settings: %w", err)
	}
	n, err := res.RowsAffected()
	return n > 0, err
}

// Settings returns the store's settings as last received (ok false: none yet, and no
// supervisor is known, no refund needs one for its amount, and none is made offline).
func (s *Store) Settings(ctx context.Context) (st wire.Settings, ok bool, err error) {
	var b []byte
	err = s.readRow(ctx, `SELECT payload FROM settings WHERE id = 1`).Scan(&b)
	if errors.Is(err, sql.ErrNoRows) {
		return st, false, nil
	}
	if err != nil {
		return st, false, fmt.Errorf("settings: %w", err)
	}
	st, err = wire.DecodeSettings(b)
	return st, err == nil, err
}

// Approve checks a supervisor's PIN against the hash in the store's settings, locally
// (also offline), and returns the supervisor's name: the approval the step records. A
// wrong PIN is counted; after MaxPINFailures in a row the supervisor is refused for a
// growing delay (CodeSupervisorLocked, with RetryAfter), also with the right PIN. One
// check runs at a time, so that guesses cannot be made in parallel.
func (s *Store) Approve(ctx context.Context, name, pin string) (string, error) {
	if name == "" {
		return "", forbidden(CodeSupervisorRequired, "a supervisor's name and PIN are needed")
	}
	st, _, err := s.Settings(ctx)
	if err != nil {
		return "", err
	}
	sv, ok := st.Supervisor(name)
	if !ok {
		return "", forbidden(CodeSupervisorUnknown, "the store names no supervisor %q on this terminal", name)
	}
	s.approving.Lock()
	defer s.approving.Unlock()
	var failures, until int64
	err = s.readRow(ctx, `SELECT failures, locked_until_ms FROM supervisor_failures WHERE name = ?`, name).
		Scan(&failures, &until)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return "", fmt.Errorf("supervisor failures: %w", err)
	}
	now := s.now()
	if wait := time.UnixMilli(until).Sub(now); wait > 0 {
		return "", locked(name, wait)
	}
	right, err := pinhash.Verify(sv.PINHash, pin)
	if err != nil {
		return "", fmt.Errorf("supervisor %q: %w", name, err)
	}
	if right {
		if failures > 0 {
			if _, err := s.db.W.ExecContext(ctx, `DELETE FROM supervisor_failures WHERE name = ?`, name); err != nil {
				return "", fmt.Errorf("supervisor failures: %w", err)
			}
		}
		return name, nil
	}
	failures++
	lock := lockFor(failures)
	if lock > 0 {
		until = now.Add(lock).UnixMilli()
	}
	if _, err := s.db.W.ExecContext(ctx, `INSERT INTO supervisor_failures (name, failures, locked_until_ms) VALUES (?, ?, ?)
		ON CONFLICT (name) DO UPDATE SET failures = excluded.failures, locked_until_ms = excluded.locked_until_ms`,
		name, failures, until); err != nil {
		return "", fmt.Errorf("supervisor failures: %w", err)
	}
	if lock > 0 {
		e := forbidden(CodeSupervisorPINWrong, "wrong PIN for supervisor %q: %d wrong in a row; the supervisor is refused for %s",
			name, failures, lock)
		e.RetryAfter = lock
		return "", e
	}
	return "", forbidden(CodeSupervisorPINWrong, "wrong PIN for supervisor %q: %d more wrong and the supervisor is refused for a while",
		name, MaxPINFailures-failures)
}

// forbidden is a refusal for want of a supervisor's approval (403).
func forbidden(code, format string, args ...any) *perr.Error {
	return perr.New(perr.Forbidden, code, format, args...)
}

func locked(name string, wait time.Duration) *perr.Error {
	e := perr.New(perr.RateLimited, CodeSupervisorLocked,
		"supervisor %q is refused after %d wrong PINs in a row; try again in %s", name, MaxPINFailures, wait.Round(time.Second))
	e.RetryAfter = wait
	return e
}

// needApproval refuses a refund of amount that needs a supervisor's approval without one
// (approvedBy ""): one made while the store is unreachable (which the store's settings
// must allow at all), or one above the store's threshold.
func (t *Tx) needApproval(amount money.Fen, approvedBy string) error {
	var b []byte
	var st wire.Settings
	err := t.queryRow(`SELECT payload FROM settings WHERE id = 1`).Scan(&b)
	switch {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return err
	default:
		if st, err = wire.DecodeSettings(b); err != nil {
			return err
		}
	}
	if t.mode.Disconnected {
		if !st.OfflineRefunds {
			return perr.New(perr.Refused, "refund_offline_disabled", "the store allows no refunds while it cannot be reached")
		}
		if approvedBy == "" {
			return forbidden(CodeSupervisorRequired, "a refund made offline needs a supervisor's approval")
		}
	}
	if st.RefundSupervisorAbove != nil && amount > *st.RefundSupervisorAbove && approvedBy == "" {
		return forbidden(CodeSupervisorRequired, "a refund of more than %s needs a supervisor's approval",
			*st.RefundSupervisorAbove)
	}
	return nil
}
