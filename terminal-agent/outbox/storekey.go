package outbox

import (
	"context"
	"crypto/ed25519"
	"database/sql"
	"errors"
	"fmt"
)

// KVCatalogsRefused counts the catalogs the terminal refused as not signed by the store's
// key it pinned.
const KVCatalogsRefused = "catalogs_refused"

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
