package catalog

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/posgate/posgate/internal/private"
	"github.com/posgate/posgate/internal/wire"
)

// Files of a rotation of the catalog key, beside KeyFile.
const (
	// RotationsFile is the chain of the key's rotations (wire.CatalogKeys, JSON, 0600),
	// each signed by the key it replaced: the store publishes it, retained, before its
	// catalog, and the terminals follow it from the key they pinned.
	RotationsFile = "catalog-keys.json"
	// nextKeyFile holds a new key while a rotation is under way: written before the chain
	// names it, it replaces KeyFile after. A rotation cut short is finished (the chain names
	// it) or dropped (the chain does not) at the next start.
	nextKeyFile = "catalog-key.next.pem"
)

// Signer is the store's catalog key and the chain of its rotations, read by LoadSigner.
type Signer struct {
	Key       ed25519.PrivateKey
	Rotations wire.CatalogKeys
}

// LoadSigner returns the store's catalog key (LoadKey: made at the first start) and the
// chain of its rotations, after finishing or dropping a rotation cut short. The chain must
// be the store's and verify, and end with the key (else the start stops: the terminals
// would follow the chain to a key whose catalogs the store does not sign).
func LoadSigner(dataDir, store string) (Signer, error) {
	if err := finishRotation(dataDir); err != nil {
		return Signer{}, err
	}
	chain, err := loadRotations(dataDir, store)
	if err != nil {
		return Signer{}, err
	}
	if len(chain.Rotations) > 0 {
		if _, err := os.Stat(filepath.Join(dataDir, KeyFile)); errors.Is(err, os.ErrNotExist) {
			return Signer{}, fmt.Errorf("catalog key: %s holds %d rotations but %s is missing: restore it from the backup",
				RotationsFile, len(chain.Rotations), KeyFile)
		}
	}
	key, err := LoadKey(dataDir)
	if err != nil {
		return Signer{}, err
	}
	pub := key.Public().(ed25519.PublicKey)
	if n := chain.Newest(); n != nil && !n.Equal(pub) {
		return Signer{}, fmt.Errorf("catalog key: %s ends with key %s, but %s is key %s", RotationsFile, wire.KeyID(n),
			KeyFile, wire.KeyID(pub))
	}
	return Signer{Key: key, Rotations: chain}, nil
}

// loadRotations reads the chain kept in dataDir (an empty one if there is none).
func loadRotations(dataDir, store string) (wire.CatalogKeys, error) {
	empty := wire.CatalogKeys{V: wire.Version, Store: store}
	path := filepath.Join(dataDir, RotationsFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return empty, nil
	}
	if err != nil {
		return empty, fmt.Errorf("catalog key rotations: %w", err)
	}
	chain, err := wire.DecodeCatalogKeys(b)
	if err != nil {
		return empty, fmt.Errorf("catalog key rotations %s: %w", path, err)
	}
	if chain.Store != store {
		return empty, fmt.Errorf("catalog key rotations %s are store %s's, not %s's", path, chain.Store, store)
	}
	if err := chain.Verify(); err != nil {
		return empty, fmt.Errorf("catalog key rotations %s: %w", path, err)
	}
	return chain, nil
}

// Rotate gives the store of dataDir a new catalog key: it makes the key, appends to the
// chain the step from the current key to it, signed by the current key, and installs it.
// It returns the new public key. The store must not be running (its key is read at start).
func Rotate(dataDir, store string, now time.Time) (ed25519.PublicKey, error) {
	if _, err := os.Stat(filepath.Join(dataDir, KeyFile)); err != nil {
		return nil, fmt.Errorf("no catalog key to rotate in %s (the store-server makes it at its first start): %w", dataDir, err)
	}
	cur, err := LoadSigner(dataDir, store)
	if err != nil {
		return nil, err
	}
	pub, next, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	body, err := privatePEM(next)
	if err != nil {
		return nil, err
	}
	// The new key first, the chain that names it second, the key file last: a crash at any
	// point leaves a store that starts with one key or the other (finishRotation).
	if err := private.WriteFile(filepath.Join(dataDir, nextKeyFile), body); err != nil {
		return nil, fmt.Errorf("new catalog key: %w", err)
	}
	at := now.UTC()
	if rs := cur.Rotations.Rotations; len(rs) > 0 && !at.After(rs[len(rs)-1].At) {
		at = rs[len(rs)-1].At.Add(time.Millisecond) // a clock set back: the chain still goes forward
	}
	chain := cur.Rotations
	chain.Rotations = append(chain.Rotations, wire.SignRotation(store, cur.Key, pub, at))
	cb, err := json.Marshal(chain)
	if err != nil {
		return nil, err
	}
	if err := private.WriteFile(filepath.Join(dataDir, RotationsFile), cb); err != nil {
		return nil, fmt.Errorf("catalog key rotations: %w", err)
	}
	if err := finishRotation(dataDir); err != nil {
		return nil, err
	}
	return pub, nil
}

// finishRotation installs the key a rotation left in nextKeyFile when the chain names it as
// the newest, and drops it when the chain does not (the rotation stopped before the chain
// was written).
func finishRotation(dataDir string) error {
	path := filepath.Join(dataDir, nextKeyFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("new catalog key: %w", err)
	}
	next, err := parsePrivate(path, b)
	if err != nil {
		return err
	}
	var chain wire.CatalogKeys
	if cb, err := os.ReadFile(filepath.Join(dataDir, RotationsFile)); err == nil {
		if chain, err = wire.DecodeCatalogKeys(cb); err != nil {
			return fmt.Errorf("catalog key rotations: %w", err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("catalog key rotations: %w", err)
	}
	if n := chain.Newest(); n != nil && n.Equal(next.Public().(ed25519.PublicKey)) {
		if err := private.WriteFile(filepath.Join(dataDir, KeyFile), b); err != nil {
			return fmt.Errorf("catalog key: %w", err)
		}
		if err := writePub(dataDir, next); err != nil {
			return err
		}
	}
	return os.Remove(path)
}

func privatePEM(key ed25519.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// parsePrivate reads a PEM PKCS #8 ed25519 private key (path names it in errors).
func parsePrivate(path string, b []byte) (ed25519.PrivateKey, error) {
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("catalog key %s: not a PEM PRIVATE KEY block", path)
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("catalog key %s: %w", path, err)
	}
	key, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("catalog key %s: a %T, not ed25519", path, k)
	}
	return key, nil
}

// SetRotations has the chain of the key's rotations published, retained, before each
// catalog the store publishes at start and on each connection (Publish). Call it before the
// first publish.
func (c *Catalog) SetRotations(chain wire.CatalogKeys) {
	c.replacing.Lock()
	defer c.replacing.Unlock()
	c.rotations = chain
}

// publishRotations publishes the chain, if the key was ever rotated (a store that never
// rotated publishes on no other topic than v0.1.0's). Called with the import lock held.
func (c *Catalog) publishRotations(pub Publisher) error {
	if len(c.rotations.Rotations) == 0 {
		return nil
	}
	body, err := json.Marshal(c.rotations)
	if err != nil {
		return err
	}
	return pub.PublishRetained(wire.CatalogKeysTopic(c.store), body)
}
