package outbox

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
)

// KVCatalogsRefused counts the catalogs the terminal refused as not signed by the store's
// key it pinned.
const KVCatalogsRefused = "catalogs_refused"

// KVStoreKeyFlag names the store key --store-key gave when it was last applied (the first 8
// bytes of its SHA-256, as a number): the flag pins its key when it is first given or
// changes, not at every start, so the pin a rotation or a reset moved stays moved.
const KVStoreKeyFlag = "store_key_flag"

// StoreKey returns the store's public catalog key the terminal pinned (nil: none yet).
func (s *Store) StoreKey(ctx context.Context) (ed25519.PublicKey, error) {
	var k []byte
	err := s.readRow(ctx, `SELECT key FROM store_key WHERE id = 1`).Scan(&k)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("store key: %w", err)
	}
	if len(k) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("store key: %d bytes, not an ed25519 key", len(k))
	}
	return ed25519.PublicKey(k), nil
}

// PinStoreKey pins key as the store's unless one is pinned already, and returns the key
// pinned now.
func (s *Store) PinStoreKey(ctx context.Context, key ed25519.PublicKey) (ed25519.PublicKey, error) {
	if _, err := s.db.W.ExecContext(ctx, `INSERT INTO store_key (id, key, pinned_ms) VALUES (1, ?, ?)
		ON CONFLICT (id) DO NOTHING`, []byte(key), s.cfg.Now().UnixMilli()); err != nil {
		return nil, fmt.Errorf("pin store key: %w", err)
	}
	return s.StoreKey(ctx)
}

// CountCatalogRefused counts one catalog refused as not the store's, and returns the count.
func (s *Store) CountCatalogRefused(ctx context.Context) (int64, error) {
	var n int64
	err := s.db.W.QueryRowContext(ctx, `INSERT INTO kv (k, v) VALUES (?, 1)
		ON CONFLICT (k) DO UPDATE SET v = v + 1 RETURNING v`, KVCatalogsRefused).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count refused catalog: %w", err)
	}
	return n, nil
}

// flagNumber is what KVStoreKeyFlag holds of key.
func flagNumber(key ed25519.PublicKey) int64 {
	sum := sha256.Sum256(key)
	return int64(binary.BigEndian.Uint64(sum[:8]))
}

// EnrolStoreKey applies --store-key: it pins key unless the flag gave this same key when it
// was last applied (the pin has moved since only along the store's rotations or by a reset,
// and stays where they moved it). It returns the key pinned before, and whether the flag
// was applied now.
func (s *Store) EnrolStoreKey(ctx context.Context, key ed25519.PublicKey) (was ed25519.PublicKey, applied bool, err error) {
	if was, err = s.StoreKey(ctx); err != nil {
		return nil, false, err
	}
	n := flagNumber(key)
	if held, err := s.KV(ctx, KVStoreKeyFlag); err != nil || (held == n && was != nil) {
		return was, false, err
	}
	err = s.durable(ctx, func(tx *sql.Tx) error {
		if err := replaceStoreKey(ctx, tx, key, s.cfg.Now().UnixMilli()); err != nil {
			return err
		}
		return setKV(ctx, tx, KVStoreKeyFlag, n)
	})
	if err != nil {
		return was, false, fmt.Errorf("pin store key: %w", err)
	}
	return was, true, nil
}

// MoveStoreKey moves the pin from from to to (a rotation the store signed with from), if
// from is still the key pinned; it reports whether it moved.
func (s *Store) MoveStoreKey(ctx context.Context, from, to ed25519.PublicKey) (bool, error) {
	r, err := s.db.W.ExecContext(ctx, `UPDATE store_key SET key = ?, pinned_ms = ? WHERE id = 1 AND key = ?`,
		[]byte(to), s.cfg.Now().UnixMilli(), []byte(from))
	if err != nil {
		return false, fmt.Errorf("move store key: %w", err)
	}
	n, err := r.RowsAffected()
	return n == 1, err
}

// ResetStoreKey pins key in place of whatever was pinned (terminal-agent catalog-key reset:
// the store's key was lost or stolen). It returns the key pinned before (nil: none).
func (s *Store) ResetStoreKey(ctx context.Context, key ed25519.PublicKey) (ed25519.PublicKey, error) {
	was, err := s.StoreKey(ctx)
	if err != nil {
		return nil, err
	}
	if err := replaceStoreKey(ctx, s.db.W, key, s.cfg.Now().UnixMilli()); err != nil {
		return was, fmt.Errorf("reset store key: %w", err)
	}
	return was, nil
}

func replaceStoreKey(ctx context.Context, db execer, key ed25519.PublicKey, ms int64) error {
	_, err := db.ExecContext(ctx, `INSERT INTO store_key (id, key, pinned_ms) VALUES (1, ?, ?)
		ON CONFLICT (id) DO UPDATE SET key = excluded.key, pinned_ms = excluded.pinned_ms`, []byte(key), ms)
	return err
}
