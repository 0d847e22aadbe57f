package uplink

import (
	"context"
	"crypto/ed25519"
	"sync"

	"github.com/posgate/posgate/internal/perr"
	"github.com/posgate/posgate/internal/wire"
)

// catalogKeys is what the lane keeps of the store's catalog key in memory.
type catalogKeys struct {
	enrol sync.Once // --store-key applied (pinnedKey)
	mu    sync.Mutex
	// refused is the last catalog refused as not signed by the pinned key: taken after all
	// if a rotation then moves the pin to the key that signed it (the store publishes the
	// chain before its catalog, but the broker may deliver the two the other way round).
	refused *wire.Catalog
}

// pinnedKey returns the store's catalog key the terminal holds (nil: none yet), after
// applying --store-key once (outbox.EnrolStoreKey: when it is first given or changes).
func (u *Uplink) pinnedKey(ctx context.Context) (ed25519.PublicKey, error) {
	u.keys.enrol.Do(func() {
		if u.cfg.StoreKey == nil {
			return
		}
		was, applied, err := u.store.EnrolStoreKey(ctx, u.cfg.StoreKey)
		switch {
		case err != nil:
			u.log.Error("pin --store-key", "err", err)
		case applied && was != nil && !was.Equal(u.cfg.StoreKey):
			u.log.Warn("store catalog key pinned from a changed --store-key", "key", wire.KeyID(u.cfg.StoreKey),
				"was", wire.KeyID(was))
		case !applied && !was.Equal(u.cfg.StoreKey):
			u.log.Info("the pinned store catalog key moved on from --store-key (a rotation the store signed, or catalog-key reset)",
				"key", wire.KeyID(was), "store_key_flag", wire.KeyID(u.cfg.StoreKey))
		}
	})
	return u.store.StoreKey(ctx)
}

// catalogSigned reports whether c is signed by the store's key: the one the terminal
// pinned (given by --store-key, or moved along the store's rotations, or reset), else (the
// first signed catalog the terminal receives) its own key, which is pinned now. Any client
// of an anonymous broker (or an external broker that lets terminals write the topic) can
// retain a catalog on it: one not signed by the store's key is ignored, logged and counted
// (GET /v1/status catalogs_refused), and the till keeps pricing from the catalog it holds.
func (u *Uplink) catalogSigned(ctx context.Context, c wire.Catalog) bool {
	ctx = context.WithoutCancel(ctx)
	key, err := u.pinnedKey(ctx)
	if err != nil {
		u.log.Error("read the pinned store key", "err", err)
		return false
	}
	if key == nil {
		own, err := wire.CatalogKey(c)
		if err == nil {
			err = wire.VerifyCatalog(c, own)
		}
		if err != nil {
			u.refuseCatalog(ctx, c, err)
			return false
		}
		if key, err = u.store.PinStoreKey(ctx, own); err != nil {
			u.log.Error("pin the store key", "err", err)
			return false
		}
		u.log.Warn("store catalog key pinned from the first signed catalog (give --store-key to pin it at enrolment)",
			"key", wire.KeyID(key))
	}
	if err := wire.VerifyCatalog(c, key); err != nil {
		u.refuseCatalog(ctx, c, err)
		return false
	}
	return true
}

func (u *Uplink) refuseCatalog(ctx context.Context, c wire.Catalog, err error) {
	u.keys.mu.Lock()
	u.keys.refused = &c
	u.keys.mu.Unlock()
	n, cerr := u.store.CountCatalogRefused(ctx)
	if cerr != nil {
		u.log.Error("count a refused catalog", "err", cerr)
	}
	u.log.Warn("catalog not signed by the store's key: ignored, the till keeps its prices", "code", perr.CodeOf(err),
		"version", c.Version, "err", err, "refused", n)
}

// onCatalogKeys follows the store's chain of catalog key rotations (wire.CatalogKeys) from
// the key the terminal pinned, each step verified by the key before it, and moves the pin
// to the newest key; then the catalog last refused is looked at again. A chain that does
// not verify or does not name the pinned key is ignored, logged and counted like a forged
// catalog. A stolen key can sign a rotation of its own: the pin of a till is then reset at
// the till (terminal-agent catalog-key reset).
func (u *Uplink) onCatalogKeys(ctx context.Context, payload []byte) {
	ctx = context.WithoutCancel(ctx)
	k, err := wire.DecodeCatalogKeys(payload)
	if err != nil {
		u.refuseKeys(ctx, err)
		return
	}
	if k.Store != u.cfg.Store {
		u.log.Warn("catalog keys for another store", "store", k.Store)
		return
	}
	pinned, err := u.pinnedKey(ctx)
	if err != nil {
		u.log.Error("read the pinned store key", "err", err)
		return
	}
	if pinned == nil {
		return // nothing to follow from: the first signed catalog pins its key
	}
	next, err := k.Follow(pinned)
	if err != nil {
		u.refuseKeys(ctx, err)
		return
	}
	if next.Equal(pinned) {
		return
	}
	moved, err := u.store.MoveStoreKey(ctx, pinned, next)
	if err != nil || !moved {
		u.log.Error("move the pinned store key", "err", err, "moved", moved)
		return
	}
	u.log.Warn("store catalog key rotated: the pin follows the store's signed rotation", "from", wire.KeyID(pinned),
		"to", wire.KeyID(next), "rotations", len(k.Rotations))
	u.keys.mu.Lock()
	c := u.keys.refused
	u.keys.refused = nil
	u.keys.mu.Unlock()
	if c != nil && wire.VerifyCatalog(*c, next) == nil {
		u.takeCatalog(ctx, *c)
	}
}

func (u *Uplink) refuseKeys(ctx context.Context, err error) {
	n, cerr := u.store.CountCatalogRefused(ctx)
	if cerr != nil {
		u.log.Error("count a refused catalog", "err", cerr)
	}
	u.log.Warn("catalog key rotation not taken: the till keeps its pinned key", "code", perr.CodeOf(err), "err", err,
		"refused", n)
}
