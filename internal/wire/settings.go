package wire

import (
	"strings"
	"unicode/utf8"

	"github.com/posgate/posgate/internal/money"
)

// Bounds of a settings message.
const (
	MaxSettingsBytes  = 256 << 10
	MaxSupervisors    = 200
	MaxSupervisorName = 64 // characters
)

// Supervisor is one person who may approve what a cashier alone may not: a day's reopen, a
// refund above the store's threshold, a refund made offline. The terminal checks the PIN
// the supervisor types against PINHash (internal/pinhash: argon2id); the PIN itself never
// leaves the store-server's manager API.
type Supervisor struct {
	Name    string `json:"name"`
	PINHash string `json:"pin_hash"`
}

// Settings is the store's retained settings message for its terminals, published on
// SettingsTopic like the catalog. Terminals keep the highest Version they have seen and
// apply it, also offline.
type Settings struct {
	V           int          `json:"v"`
	Store       string       `json:"store"`
	Version     int64        `json:"version"`
	Supervisors []Supervisor `json:"supervisors"`
	// RefundSupervisorAbove: a refund of more than this amount needs a supervisor; absent,
	// no refund needs one for its amount.
	RefundSupervisorAbove *money.Fen `json:"refund_supervisor_above,omitempty"`
	// OfflineRefunds allows refunds while the store is unreachable, each approved by a
	// supervisor.
	OfflineRefunds bool `json:"offline_refunds"`
}

// Supervisor returns the supervisor of that name.
func (s *Settings) Supervisor(name string) (Supervisor, bool) {
	for _, sv := range s.Supervisors {
		if sv.Name == name {
			return sv, true
		}
	}
	return Supervisor{}, false
}

// ValidSupervisorName reports whether name can name a supervisor: 1 to MaxSupervisorName
// characters of valid UTF-8, no control characters, no blanks at either end.
func ValidSupervisorName(name string) bool {
	if name == "" || !utf8.ValidString(name) || utf8.RuneCountInString(name) > MaxSupervisorName ||
		strings.TrimSpace(name) != name {
		return false
	}
	for _, r := range name {
		if r < 0x20 || r == 0x7f {
			return false
		}
	}
	return true
}

// DecodeSettings strictly decodes and checks a settings message.
func DecodeSettings(b []byte) (Settings, error) {
	var s Settings
	if len(b) > MaxSettingsBytes {
		return s, invalid(CodeOversize, "settings of %d bytes is over the %d byte limit", len(b), MaxSettingsBytes)
	}
	if err := decodeStrict(b, &s); err != nil {
		return s, err
	}
	return s, s.Validate()
}

// Validate checks settings: version, supervisors named once each with a PIN hash within
// ParsePINHash's bounds, a threshold not negative.
func (s *Settings) Validate() error {
	switch {
	case s.V != Version:
		return invalid(CodeVersion, "settings protocol version %d is not supported", s.V)
	case !ValidID(s.Store):
		return invalid(CodeID, "settings store id %q is not valid", s.Store)
	case s.Version <= 0:
		return invalid(CodePayload, "settings version must be positive")
	case len(s.Supervisors) > MaxSupervisors:
		return invalid(CodePayload, "settings list %d supervisors, over %d", len(s.Supervisors), MaxSupervisors)
	case s.RefundSupervisorAbove != nil && *s.RefundSupervisorAbove < 0:
		return invalid(CodeAmount, "refund_supervisor_above must not be negative")
	case s.RefundSupervisorAbove != nil && *s.RefundSupervisorAbove > MaxAmount:
		return tooLarge("refund_supervisor_above", *s.RefundSupervisorAbove)
	}
	names := make(map[string]bool, len(s.Supervisors))
	for _, sv := range s.Supervisors {
		switch {
		case !ValidSupervisorName(sv.Name):
			return invalid(CodePayload, "supervisor name %q: 1 to %d characters, no control characters or blanks at the ends",
				sv.Name, MaxSupervisorName)
		case names[sv.Name]:
			return invalid(CodePayload, "settings list supervisor %q twice", sv.Name)
		case func() bool { _, err := ParsePINHash(sv.PINHash); return err != nil }():
			return invalid(CodePayload, "supervisor %q: %v", sv.Name, ErrPINHash)
		}
		names[sv.Name] = true
	}
	return nil
}
