package wire

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
)

// A supervisor's pin_hash (Settings) is the PHC string of an argon2id hash:
// $argon2id$v=19$m=<KiB>,t=<passes>,p=<lanes>$<salt>$<key>, salt and key in unpadded
// standard base64. internal/pinhash makes and checks them; the bounds below are the
// contract's, so that a settings message cannot make a till spend a gigabyte or a minute
// on one PIN.
const (
	PINHashVersion   = 19        // argon2 version 1.3
	MaxPINHashMemory = 64 * 1024 // KiB
	MaxPINHashPasses = 10
	MaxPINHashLanes  = 4
)

// PINHash is a pin_hash taken apart.
type PINHash struct {
	Memory, Passes uint32
	Lanes          uint8
	Salt, Key      []byte
}

// ErrPINHash is the error of a string that is not an argon2id hash within the bounds.
var ErrPINHash = errors.New("not an argon2id PIN hash within posgate's bounds")

// ParsePINHash takes a pin_hash apart, refusing one outside the bounds.
func ParsePINHash(h string) (PINHash, error) {
	var p PINHash
	parts := strings.Split(h, "$")
	if len(parts) != 6 || parts[0] != "" || parts[1] != "argon2id" || parts[2] != fmt.Sprintf("v=%d", PINHashVersion) {
		return p, ErrPINHash
	}
	var lanes uint32
	if n, err := fmt.Sscanf(parts[3], "m=%d,t=%d,p=%d", &p.Memory, &p.Passes, &lanes); err != nil || n != 3 ||
		parts[3] != fmt.Sprintf("m=%d,t=%d,p=%d", p.Memory, p.Passes, lanes) {
		return p, ErrPINHash
	}
	var err error
	if p.Salt, err = base64.RawStdEncoding.Strict().DecodeString(parts[4]); err != nil {
		return p, ErrPINHash
	}
	if p.Key, err = base64.RawStdEncoding.Strict().DecodeString(parts[5]); err != nil {
		return p, ErrPINHash
	}
	switch {
	case lanes < 1 || lanes > MaxPINHashLanes, p.Passes < 1 || p.Passes > MaxPINHashPasses,
		p.Memory < 8*lanes || p.Memory > MaxPINHashMemory,
		len(p.Salt) < 8 || len(p.Salt) > 64, len(p.Key) < 16 || len(p.Key) > 64:
		return p, ErrPINHash
	}
	p.Lanes = uint8(lanes)
	return p, nil
}
