package wire

import (
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"

	"github.com/posgate/posgate/internal/perr"
)

// Codes of a catalog whose signature does not hold.
const (
	// CodeCatalogUnsigned: the catalog carries no key or no signature.
	CodeCatalogUnsigned = "catalog_unsigned"
	// CodeCatalogForged: the catalog is not signed by the store's key the terminal holds
	// (another key, or a signature that does not verify).
	CodeCatalogForged = "catalog_signature_invalid"
)

// catalogSigContext starts every message a catalog's signature covers: a catalog's
// signature is never one over anything else.
const catalogSigContext = "posgate/catalog/v1\n"

// catalogSigned returns what a catalog's signature covers: the context, then the catalog
// with its Sig empty as encoding/json writes it. Both ends write it from the same struct:
// a terminal verifies the catalog it decoded, written again, not the bytes it got.
func catalogSigned(c Catalog) ([]byte, error) {
	c.Sig = ""
	b, err := json.Marshal(c)
	if err != nil {
		return nil, err
	}
	return append([]byte(catalogSigContext), b...), nil
}

// SignCatalog sets c's Key to key's public key and signs c with key (ed25519).
func SignCatalog(c *Catalog, key ed25519.PrivateKey) error {
	c.Key = base64.StdEncoding.EncodeToString(key.Public().(ed25519.PublicKey))
	msg, err := catalogSigned(*c)
	if err != nil {
		return err
	}
	c.Sig = base64.StdEncoding.EncodeToString(ed25519.Sign(key, msg))
	return nil
}

// CatalogKey returns the public key a catalog names as its signer (not yet verified).
func CatalogKey(c Catalog) (ed25519.PublicKey, error) {
	if c.Key == "" || c.Sig == "" {
		return nil, invalid(CodeCatalogUnsigned, "catalog version %d is not signed", c.Version)
	}
	k, err := base64.StdEncoding.DecodeString(c.Key)
	if err != nil || len(k) != ed25519.PublicKeySize {
		return nil, invalid(CodeCatalogForged, "catalog version %d names no ed25519 key", c.Version)
	}
	return ed25519.PublicKey(k), nil
}

// VerifyCatalog checks that c is signed by pub: it names pub as its key and its signature
// verifies.
func VerifyCatalog(c Catalog, pub ed25519.PublicKey) error {
	k, err := CatalogKey(c)
	if err != nil {
		return err
	}
	if !k.Equal(pub) {
		return invalid(CodeCatalogForged, "catalog version %d is signed by key %s, not the store's %s", c.Version,
			KeyID(k), KeyID(pub))
	}
	sig, err := base64.StdEncoding.DecodeString(c.Sig)
	if err != nil {
		return invalid(CodeCatalogForged, "catalog version %d: the signature is not base64", c.Version)
	}
	msg, err := catalogSigned(c)
	if err != nil {
		return err
	}
	if !ed25519.Verify(pub, msg, sig) {
		return invalid(CodeCatalogForged, "catalog version %d: the signature does not verify with the store's key %s",
			c.Version, KeyID(pub))
	}
	return nil
}

// KeyID names a public key in logs: the first 8 bytes of its SHA-256, in hex.
func KeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return hex.EncodeToString(sum[:8])
}

// MarshalStoreKey writes a store's public catalog key as a PEM "PUBLIC KEY" block (PKIX),
// the file a terminal is given with --store-key.
func MarshalStoreKey(pub ed25519.PublicKey) ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), nil
}

// ParseStoreKey reads a store's public catalog key written by MarshalStoreKey.
func ParseStoreKey(b []byte) (ed25519.PublicKey, error) {
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "PUBLIC KEY" {
		return nil, perr.New(perr.Invalid, "store_key_invalid", "not a PEM PUBLIC KEY block")
	}
	k, err := x509.ParsePKIXPublicKey(blk.Bytes)
	if err != nil {
		return nil, perr.Wrap(err, perr.Invalid, "store_key_invalid", "the store key: %v", err)
	}
	pub, ok := k.(ed25519.PublicKey)
	if !ok {
		return nil, perr.New(perr.Invalid, "store_key_invalid", "the store key is a %T, not ed25519", k)
	}
	return pub, nil
}
