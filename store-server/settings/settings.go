// Package settings keeps the store's settings for its terminals: the supervisors who may
// approve a day's reopen, a refund above the store's threshold or a refund made offline,
// and those refund rules. The manager sets them through the manager API; they are kept in
// the data directory (settings.json), versioned, and published retained on
// pos/{store}/settings (internal/wire.Settings) so that every terminal applies them, also
// offline.
//
// A supervisor's PIN is never kept: the store hashes it (internal/pinhash, argon2id) as it
// is set, and publishes and keeps the hash alone.
package settings

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/perr"
	"github.com/posgate/posgate/internal/pinhash"
	"github.com/posgate/posgate/internal/private"
	"github.com/posgate/posgate/internal/wire"
)

// Codes of refused changes.
const (
	CodeNameInvalid      = "supervisor_name_invalid"
	CodeNotFound         = "supervisor_not_found"
	CodeTooMany          = "supervisors_too_many"
	CodeThresholdInvalid = "refund_threshold_invalid"
)

// FileName is the settings' file in the store's data directory.
const FileName = "settings.json"

// DefaultPath is where a store-server keeps its settings in its data directory.
func DefaultPath(dataDir string) string { return filepath.Join(dataDir, FileName) }

// Publisher publishes a retained message.
type Publisher interface {
	PublishRetained(topic string, payload []byte) error
}

// Settings are the store's current settings.
type Settings struct {
	path  string
	store string
	now   func() time.Time

	mu  sync.Mutex // one change at a time, and a publish never of settings older than the last
	cur wire.Settings
}

// Open loads the settings kept at path (none set, version 0, if there is no file).
func Open(path, store string) (*Settings, error) {
	s := &Settings{path: path, store: store, now: time.Now,
		cur: wire.Settings{V: wire.Version, Store: store, Supervisors: []wire.Supervisor{}}}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read settings: %w", err)
	}
	cur, err := wire.DecodeSettings(b)
	if err != nil {
		return nil, fmt.Errorf("settings %s: %w", path, err)
	}
	if cur.Store != store {
		return nil, fmt.Errorf("settings %s are store %s's, not %s", path, cur.Store, store)
	}
	s.cur = cur
	return s, nil
}

// Current returns the current settings (version 0: none set yet).
func (s *Settings) Current() wire.Settings {
	s.mu.Lock()
	defer s.mu.Unlock()
	return clone(s.cur)
}

func clone(c wire.Settings) wire.Settings {
	c.Supervisors = slices.Clone(c.Supervisors)
	if c.RefundSupervisorAbove != nil {
		v := *c.RefundSupervisorAbove
		c.RefundSupervisorAbove = &v
	}
	return c
}

// SetSupervisor adds the supervisor name with pin, or gives the supervisor a new PIN, and
// saves and publishes the settings.
func (s *Settings) SetSupervisor(name, pin string, pub Publisher) (wire.Settings, error) {
	if !wire.ValidSupervisorName(name) {
		return wire.Settings{}, perr.New(perr.Invalid, CodeNameInvalid,
			"a supervisor's name is 1 to %d characters, with no control characters or blanks at either end", wire.MaxSupervisorName)
	}
	if err := pinhash.ValidPIN(pin); err != nil {
		return wire.Settings{}, perr.New(perr.Invalid, pinhash.CodePINInvalid,
			"a supervisor's PIN is %d to %d digits", pinhash.MinPINLen, pinhash.MaxPINLen)
	}
	h, err := pinhash.Hash(pin)
	if err != nil {
		return wire.Settings{}, err
	}
	return s.change(pub, func(next *wire.Settings) error {
		for i, sv := range next.Supervisors {
			if sv.Name == name {
				next.Supervisors[i].PINHash = h
				return nil
			}
		}
		if len(next.Supervisors) >= wire.MaxSupervisors {
			return perr.New(perr.Refused, CodeTooMany, "a store has at most %d supervisors", wire.MaxSupervisors)
		}
		next.Supervisors = append(next.Supervisors, wire.Supervisor{Name: name, PINHash: h})
		return nil
	})
}

// RemoveSupervisor removes a supervisor, and saves and publishes the settings.
func (s *Settings) RemoveSupervisor(name string, pub Publisher) (wire.Settings, error) {
	return s.change(pub, func(next *wire.Settings) error {
		for i, sv := range next.Supervisors {
			if sv.Name == name {
				next.Supervisors = slices.Delete(next.Supervisors, i, i+1)
				return nil
			}
		}
		return perr.New(perr.NotFound, CodeNotFound, "no supervisor %q", name)
	})
}

// SetRefunds sets the refund rules: above, if not nil, the amount over which a refund
// needs a supervisor; offline, whether refunds may be made offline (each with a supervisor).
func (s *Settings) SetRefunds(above *money.Fen, offline bool, pub Publisher) (wire.Settings, error) {
	if above != nil && (*above < 0 || *above > wire.MaxAmount) {
		return wire.Settings{}, perr.New(perr.Invalid, CodeThresholdInvalid,
			"the refund amount above which a supervisor is needed is 0.00 to %s", wire.MaxAmount)
	}
	return s.change(pub, func(next *wire.Settings) error {
		next.RefundSupervisorAbove, next.OfflineRefunds = above, offline
		return nil
	})
}

// change applies edit to a copy of the settings under the next version, saves it and
// publishes it. The version is the time in milliseconds, or one above the last if that is
// later: a store whose data directory was restored from a backup, or made anew, still
// issues versions above those the terminals hold, which they would otherwise ignore.
func (s *Settings) change(pub Publisher, edit func(*wire.Settings) error) (wire.Settings, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	next := clone(s.cur)
	if err := edit(&next); err != nil {
		return wire.Settings{}, err
	}
	next.Version = max(s.cur.Version+1, s.now().UnixMilli())
	if err := next.Validate(); err != nil {
		return wire.Settings{}, err
	}
	body, err := json.Marshal(next)
	if err != nil {
		return wire.Settings{}, err
	}
	if err := private.WriteFile(s.path, body); err != nil {
		return wire.Settings{}, fmt.Errorf("save settings: %w", err)
	}
	s.cur = next
	if pub != nil {
		if err := pub.PublishRetained(wire.SettingsTopic(s.store), body); err != nil {
			return clone(next), &NotPublishedError{Version: next.Version, Err: err}
		}
	}
	return clone(next), nil
}

// NotPublishedError is a change's error when the settings are saved but the broker has not
// taken them: they go out when the store-server connects to the broker again, or starts.
type NotPublishedError struct {
	Version int64
	Err     error
}

func (e *NotPublishedError) Error() string {
	return fmt.Sprintf("settings version %d saved, not yet published: %v", e.Version, e.Err)
}

func (e *NotPublishedError) Unwrap() error { return e.Err }

// Publish publishes the current settings, if any were set (at start, and on each
// reconnection to an external broker, which may have lost its retained messages).
func (s *Settings) Publish(pub Publisher) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur.Version == 0 {
		return nil
	}
	body, err := json.Marshal(s.cur)
	if err != nil {
		return err
	}
	return pub.PublishRetained(wire.SettingsTopic(s.store), body)
}

// File returns the settings file as kept, for a backup of the store (ok false: none yet).
func (s *Settings) File() (name string, body []byte, ok bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	body, err = os.ReadFile(s.path)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil, false, nil
	}
	if err != nil {
		return "", nil, false, fmt.Errorf("read settings: %w", err)
	}
	return filepath.Base(s.path), body, true, nil
}
