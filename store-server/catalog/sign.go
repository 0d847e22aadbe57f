package catalog

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/posgate/posgate/internal/private"
	"github.com/posgate/posgate/internal/wire"
)

// Key files in the store's data directory, both 0600. The private key leaves it only in a
// backup (GET /v1/backup, operator role), so that a restored store signs with the key its
// tills pinned; the public one is what each terminal is given with --store-key.
const (
	KeyFile    = "catalog-key.pem" // PKCS #8 ed25519 private key, 0600
	PubKeyFile = "catalog-key.pub" // PKIX public key (wire.MarshalStoreKey), 0600
)

// LoadKey returns the store's catalog signing key kept in dataDir, made at the first start
// (and its public key written beside it). A key file that cannot be read as an ed25519 key
// stops the start: a new key would have every terminal that pinned the old one refuse the
// store's catalogs.
func LoadKey(dataDir string) (ed25519.PrivateKey, error) {
	path := filepath.Join(dataDir, KeyFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return makeKey(dataDir)
	}
	if err != nil {
		return nil, fmt.Errorf("catalog key: %w", err)
	}
	key, err := parsePrivate(path, b)
	if err != nil {
		return nil, err
	}
	// The public key file is written again if it went missing: it is what operators copy.
	if _, err := os.Stat(filepath.Join(dataDir, PubKeyFile)); errors.Is(err, os.ErrNotExist) {
		if err := writePub(dataDir, key); err != nil {
			return nil, err
		}
	}
	return key, nil
}

func makeKey(dataDir string) (ed25519.PrivateKey, error) {
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	body, err := privatePEM(key)
	if err != nil {
		return nil, err
	}
	if err := writePub(dataDir, key); err != nil {
		return nil, err
	}
	// Written whole under a temporary name, 0600, then linked in: two starts at once keep
	// one key, and a crash leaves no half key.
	if err := private.WriteFile(filepath.Join(dataDir, KeyFile), body); err != nil {
		return nil, fmt.Errorf("catalog key: %w", err)
	}
	return key, nil
}

func writePub(dataDir string, key ed25519.PrivateKey) error {
	pub, err := wire.MarshalStoreKey(key.Public().(ed25519.PublicKey))
	if err != nil {
		return err
	}
	if err := private.WriteFile(filepath.Join(dataDir, PubKeyFile), pub); err != nil {
		return fmt.Errorf("catalog public key: %w", err)
	}
	return nil
}

// SetSigner has every catalog the store publishes from now on signed with key (the
// terminals take no other). Call it before the first import or publish.
func (c *Catalog) SetSigner(key ed25519.PrivateKey) {
	c.replacing.Lock()
	defer c.replacing.Unlock()
	c.key = key
}

// signed returns cat signed with the store's key (as it is without one).
func (c *Catalog) signed(cat wire.Catalog) (wire.Catalog, error) {
	if c.key == nil {
		return cat, nil
	}
	cat.Key, cat.Sig = "", ""
	err := wire.SignCatalog(&cat, c.key)
	return cat, err
}
