package uplink

import (
	"context"

	"github.com/posgate/posgate/internal/perr"
	"github.com/posgate/posgate/internal/wire"
)

// catalogSigned reports whether c is signed by the store's key: the one --store-key names,
// else the one the terminal pinned, else (the first signed catalog the terminal receives)
// its own key, which is pinned now. Any client of an anonymous broker (or an external
// broker that lets terminals write the topic) can retain a catalog on it: one not signed by
// the store's key is ignored, logged and counted (GET /v1/status catalogs_refused), and the
// till keeps pricing from the catalog it holds.
func (u *Uplink) catalogSigned(ctx context.Context, c wire.Catalog) bool {
	ctx = context.WithoutCancel(ctx)
	key := u.cfg.StoreKey
	if key == nil {
		var err error
		if key, err = u.store.StoreKey(ctx); err != nil {
			u.log.Error("read the pinned store key", "err", err)
			return false
		}
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
	n, cerr := u.store.CountCatalogRefused(ctx)
	if cerr != nil {
		u.log.Error("count a refused catalog", "err", cerr)
	}
	u.log.Warn("catalog not signed by the store's key: ignored, the till keeps its prices", "code", perr.CodeOf(err),
		"version", c.Version, "err", err, "refused", n)
}
