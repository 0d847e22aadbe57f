// Package pinhash hashes supervisors' PINs with argon2id (golang.org/x/crypto/argon2) and
// checks a PIN against such a hash. The store-server hashes the PIN a manager sets and keeps
// only the hash; it publishes the hash with the store's settings (internal/wire.Settings),
// and each terminal-agent checks a supervisor's PIN against it locally, also offline.
//
// A hash is the PHC string $argon2id$v=19$m=<KiB>,t=<passes>,p=<lanes>$<salt>$<key>, salt
// and key in unpadded standard base64, whose form and bounds the wire contract holds
// (wire.ParsePINHash): a settings message cannot make a till spend a gigabyte or a minute
// on one PIN.
package pinhash

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"fmt"

	"golang.org/x/crypto/argon2"

	"github.com/posgate/posgate/internal/wire"
)

// The parameters Hash uses: the OWASP recommendation for argon2id (19 MiB, 2 passes, 1
// lane), about 30 ms a PIN on a till, which a brute force pays for every guess.
const (
	Memory  = 19 * 1024 // KiB
	Passes  = 2
	Lanes   = 1
	SaltLen = 16
	KeyLen  = 32
)

// PIN lengths a supervisor's PIN may have, in decimal digits.
const (
	MinPINLen = 6
	MaxPINLen = 12
)

// CodePINInvalid is the code of a PIN that is not MinPINLen to MaxPINLen decimal digits.
const CodePINInvalid = "supervisor_pin_invalid"

// ErrPIN is ValidPIN's error.
var ErrPIN = fmt.Errorf("%s: a supervisor's PIN is %d to %d digits", CodePINInvalid, MinPINLen, MaxPINLen)

// ValidPIN checks that pin is MinPINLen to MaxPINLen decimal digits.
func ValidPIN(pin string) error {
	if len(pin) < MinPINLen || len(pin) > MaxPINLen {
		return ErrPIN
	}
	for _, c := range pin {
		if c < '0' || c > '9' {
			return ErrPIN
		}
	}
	return nil
}

// Hash returns the argon2id hash of pin with a fresh random salt. It refuses a PIN that
// ValidPIN refuses.
func Hash(pin string) (string, error) {
	if err := ValidPIN(pin); err != nil {
		return "", err
	}
	salt := make([]byte, SaltLen)
	rand.Read(salt) // never returns an error (crypto/rand)
	key := argon2.IDKey([]byte(pin), salt, Passes, Memory, Lanes, KeyLen)
	enc := base64.RawStdEncoding
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s", wire.PINHashVersion, Memory, Passes, Lanes,
		enc.EncodeToString(salt), enc.EncodeToString(key)), nil
}

// ErrHash is the error of a string that is not an argon2id hash within the bounds.
var ErrHash = wire.ErrPINHash

// Check checks that h is an argon2id hash within the bounds (wire.ParsePINHash).
func Check(h string) error {
	_, err := wire.ParsePINHash(h)
	return err
}

// Verify reports whether pin is the PIN h was made from, comparing in constant time. A PIN
// ValidPIN refuses never matches; a hash Check refuses is an error.
func Verify(h, pin string) (bool, error) {
	p, err := wire.ParsePINHash(h)
	if err != nil {
		return false, err
	}
	if ValidPIN(pin) != nil {
		return false, nil
	}
	key := argon2.IDKey([]byte(pin), p.Salt, p.Passes, p.Memory, p.Lanes, uint32(len(p.Key)))
	return subtle.ConstantTimeCompare(key, p.Key) == 1, nil
}
