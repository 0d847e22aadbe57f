package wire

import (
	"crypto/ed25519"
	"encoding/base64"
	"time"
)

// The rotations of a store's catalog key. A store that takes a new catalog key signs the
// change with the old one; the terminals follow the chain of changes from the key they
// pinned to the store's newest key. The chain travels on its own retained topic, not in the
// catalog: a v0.1.0 terminal refuses a catalog with a field it does not know, and subscribes
// to no other topic of the store than its down, catalog, settings and hq topics.

// Codes of a chain of rotations a terminal does not follow.
const (
	// CodeRotationInvalid: a step of the chain is not signed by the key before it, does
	// not start from the key the step before ended with, goes back in time or names a key
	// a second time.
	CodeRotationInvalid = "catalog_key_rotation_invalid"
	// CodeRotationUnknown: the chain names nowhere the key the terminal holds (another
	// store's chain, an old one replayed, or one that began after the terminal's key).
	CodeRotationUnknown = "catalog_key_rotation_unknown"
)

// MaxRotations bounds the steps of a chain, and MaxCatalogKeysBytes its message.
const (
	MaxRotations        = 256
	MaxCatalogKeysBytes = 128 << 10
)

// rotationSigContext starts every message a rotation's signature covers.
const rotationSigContext = "posgate/catalog-key-rotation/v1\n"

// KeyRotation is one step of a store's chain: the store's catalog key From (base64 ed25519
// public key) gave way to To at At, signed by From (Sig, base64) over the store, both keys
// and the time (SignRotation).
type KeyRotation struct {
	From string    `json:"from"`
	To   string    `json:"to"`
	At   time.Time `json:"at"`
	Sig  string    `json:"sig"`
}

// CatalogKeys is the store's retained message on CatalogKeysTopic: every rotation of its
// catalog key, oldest first. Each step starts from the key the step before ended with; the
// last one's To is the key the store's catalogs are signed with now.
type CatalogKeys struct {
	V         int           `json:"v"`
	Store     string        `json:"store"`
	Rotations []KeyRotation `json:"rotations"`
}

// CatalogKeysTopic carries the store's retained CatalogKeys message.
func CatalogKeysTopic(store string) string { return "pos/" + store + "/catalog-key" }

// rotationSigned returns what a rotation's signature covers.
func rotationSigned(store string, r KeyRotation) []byte {
	return []byte(rotationSigContext + store + "\n" + r.From + "\n" + r.To + "\n" + r.At.UTC().Format(time.RFC3339Nano))
}

// SignRotation returns the step from from's public key to to at at, signed by from.
func SignRotation(store string, from ed25519.PrivateKey, to ed25519.PublicKey, at time.Time) KeyRotation {
	r := KeyRotation{From: base64.StdEncoding.EncodeToString(from.Public().(ed25519.PublicKey)),
		To: base64.StdEncoding.EncodeToString(to), At: at.UTC()}
	r.Sig = base64.StdEncoding.EncodeToString(ed25519.Sign(from, rotationSigned(store, r)))
	return r
}

// DecodeCatalogKeys strictly decodes a CatalogKeys message and checks its form (not yet its
// signatures: Verify).
func DecodeCatalogKeys(b []byte) (CatalogKeys, error) {
	var k CatalogKeys
	if len(b) > MaxCatalogKeysBytes {
		return k, invalid(CodeOversize, "catalog keys message of %d bytes is over the %d byte limit", len(b), MaxCatalogKeysBytes)
	}
	if err := decodeStrict(b, &k); err != nil {
		return k, err
	}
	switch {
	case k.V != Version:
		return k, invalid(CodeVersion, "catalog keys protocol version %d is not supported", k.V)
	case !ValidID(k.Store):
		return k, invalid(CodeID, "catalog keys store id %q is not valid", k.Store)
	case len(k.Rotations) > MaxRotations:
		return k, invalid(CodePayload, "%d rotations of the catalog key, at most %d", len(k.Rotations), MaxRotations)
	}
	for i, r := range k.Rotations {
		if _, err := rotationKey(r.From); err != nil {
			return k, invalid(CodePayload, "rotation %d: from: %v", i+1, err)
		}
		if _, err := rotationKey(r.To); err != nil {
			return k, invalid(CodePayload, "rotation %d: to: %v", i+1, err)
		}
		if s, err := base64.StdEncoding.DecodeString(r.Sig); err != nil || len(s) != ed25519.SignatureSize {
			return k, invalid(CodePayload, "rotation %d: the signature is not %d bytes of base64", i+1, ed25519.SignatureSize)
		}
	}
	return k, nil
}

func rotationKey(s string) (ed25519.PublicKey, error) {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil || len(b) != ed25519.PublicKeySize {
		return nil, invalid(CodePayload, "not an ed25519 public key in base64")
	}
	return ed25519.PublicKey(b), nil
}

// Verify checks the whole chain: each step signed by its From over the store, its keys and
// its time; each step starting from the key the one before ended with, later than it; no key
// named twice (a chain never leads back to a key it left).
func (k CatalogKeys) Verify() error {
	seen := map[string]bool{}
	for i, r := range k.Rotations {
		from, err := rotationKey(r.From)
		if err != nil {
			return invalid(CodeRotationInvalid, "rotation %d: from: %v", i+1, err)
		}
		if _, err := rotationKey(r.To); err != nil {
			return invalid(CodeRotationInvalid, "rotation %d: to: %v", i+1, err)
		}
		if i > 0 {
			prev := k.Rotations[i-1]
			if r.From != prev.To {
				return invalid(CodeRotationInvalid, "rotation %d starts from key %s, not from %s where rotation %d ended",
					i+1, keyIDOf(r.From), keyIDOf(prev.To), i)
			}
			if !r.At.After(prev.At) {
				return invalid(CodeRotationInvalid, "rotation %d (%s) is not later than rotation %d (%s)", i+1,
					r.At.Format(time.RFC3339Nano), i, prev.At.Format(time.RFC3339Nano))
			}
		} else {
			seen[r.From] = true
		}
		if seen[r.To] {
			return invalid(CodeRotationInvalid, "rotation %d goes back to key %s", i+1, keyIDOf(r.To))
		}
		seen[r.To] = true
		sig, err := base64.StdEncoding.DecodeString(r.Sig)
		if err != nil || !ed25519.Verify(from, rotationSigned(k.Store, r), sig) {
			return invalid(CodeRotationInvalid, "rotation %d (%s to %s) is not signed by %s", i+1, keyIDOf(r.From),
				keyIDOf(r.To), keyIDOf(r.From))
		}
	}
	return nil
}

// Newest returns the key the chain ends with (nil for an empty chain).
func (k CatalogKeys) Newest() ed25519.PublicKey {
	if len(k.Rotations) == 0 {
		return nil
	}
	key, _ := rotationKey(k.Rotations[len(k.Rotations)-1].To)
	return key
}

// Follow returns the key a terminal holding pinned moves to: the chain's newest key when
// pinned is one the chain rotated away from, pinned itself when it is the newest or the
// chain is empty. A chain that does not verify (Verify), or names pinned nowhere, is refused.
func (k CatalogKeys) Follow(pinned ed25519.PublicKey) (ed25519.PublicKey, error) {
	if len(k.Rotations) == 0 {
		return pinned, nil
	}
	if err := k.Verify(); err != nil {
		return pinned, err
	}
	p := base64.StdEncoding.EncodeToString(pinned)
	for _, r := range k.Rotations {
		if r.From == p {
			return k.Newest(), nil
		}
	}
	if k.Rotations[len(k.Rotations)-1].To == p {
		return pinned, nil
	}
	return pinned, invalid(CodeRotationUnknown, "the chain of %d rotations (to %s) does not name the pinned key %s",
		len(k.Rotations), KeyID(k.Newest()), KeyID(pinned))
}

// keyIDOf is KeyID of a base64 key ("?" if it is not one).
func keyIDOf(s string) string {
	k, err := rotationKey(s)
	if err != nil {
		return "?"
	}
	return KeyID(k)
}
