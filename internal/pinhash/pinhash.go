// Package pinhash hashes supervisors' PINs with argon2id (golang.org/x/crypto/argon2) and
// checks a PIN against such a hash. The store-server hashes the PIN a manager sets and keeps
// only the hash; it publishes the hash with the store's settings (internal/wire.Settings),
// and each terminal-agent checks a supervisor's PIN against it locally, also offline.
//
// A hash is the PHC string $argon2id$v=19$m=<KiB>,t=<passes>,p=<lanes>$<salt>$<key>, salt
// and key in unpadded standard base64. Check bounds the parameters a hash may ask for, so
// that a settings message cannot make a till spend a gigabyte or a minute on one PIN.
package pinhash

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"

	"golang.org/x/crypto/argon2"
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

// The bounds Check puts on a hash's parameters.
const (
	MaxMemory = 64 * 1024 // KiB
	MaxPasses = 10
	MaxLanes  = 4
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
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s", argon2.Version, Memory, Passes, Lanes,
		enc.EncodeToString(salt), enc.EncodeToString(key)), nil
}

// parsed is a hash taken apart.
type parsed struct {
	memory, passes uint32
	lanes          uint8
	salt, key      []byte
}

// ErrHash is the error of a string that is not an argon2id hash within the bounds.
var ErrHash = errors.New("not an argon2id PIN hash within posgate's bounds")

func parse(h string) (parsed, error) {
	var p parsed
	parts := strings.Split(h, "$")
	if len(parts) != 6 || parts[0] != "" || parts[1] != "argon2id" || parts[2] != fmt.Sprintf("v=%d", argon2.Version) {
		return p, ErrHash
	}
	var lanes uint32
	if n, err := fmt.Sscanf(parts[3], "m=%d,t=%d,p=%d", &p.memory, &p.passes, &lanes); err != nil || n != 3 ||
		parts[3] != fmt.Sprintf("m=%d,t=%d,p=%d", p.memory, p.passes, lanes) {
		return p, ErrHash
	}
	var err error
	if p.salt, err = base64.RawStdEncoding.Strict().DecodeString(parts[4]); err != nil {
		return p, ErrHash
	}
	if p.key, err = base64.RawStdEncoding.Strict().DecodeString(parts[5]); err != nil {
		return p, ErrHash
	}
	switch {
	case lanes < 1 || lanes > MaxLanes, p.passes < 1 || p.passes > MaxPasses,
		p.memory < 8*lanes || p.memory > MaxMemory,
		len(p.salt) < 8 || len(p.salt) > 64, len(p.key) < 16 || len(p.key) > 64:
		return p, ErrHash
	}
	p.lanes = uint8(lanes)
	return p, nil
}

// Check checks that h is an argon2id hash within the bounds.
func Check(h string) error {
	_, err := parse(h)
	return err
}

// Verify reports whether pin is the PIN h was made from, comparing in constant time. A PIN
// ValidPIN refuses never matches; a hash Check refuses is an error.
func Verify(h, pin string) (bool, error) {
	p, err := parse(h)
	if err != nil {
		return false, err
	}
	if ValidPIN(pin) != nil {
		return false, nil
	}
	key := argon2.IDKey([]byte(pin), p.salt, p.passes, p.memory, p.lanes, uint32(len(p.key)))
	return subtle.ConstantTimeCompare(key, p.key) == 1, nil
}
