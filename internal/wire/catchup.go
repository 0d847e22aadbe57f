package wire

import (
	"encoding/json"
	"time"

	segjson "github.com/segmentio/encoding/json"
)

// Catch-up: when a store's ledger lacks events a terminal sent (it was restored from a
// backup, or started empty), the store asks the terminal on its down topic to send them
// again (Resend); the terminal replays what it still holds, in order, each event marked
// with what the store answered it the first time (Envelope.Replay), and says where it no
// longer holds an event (Envelope.LostFrom).

// KindResend is the kind of a down message asking a terminal to send events again.
const KindResend = "resend"

// Resend is a down message: the store's ledger lacks the terminal's events From..To (it
// met event To+1 first); the terminal is to send them again, in order, as replays.
type Resend struct {
	V        int    `json:"v"`
	Kind     string `json:"kind"` // always KindResend
	Store    string `json:"store"`
	Terminal string `json:"terminal"`
	From     int64  `json:"from_seq"`
	To       int64  `json:"to_seq"`
}

// ReplayStatus is what the terminal holds of an event it replays.
type ReplayStatus string

// The replay statuses.
const (
	// ReplayAccepted: the store accepted the event (Replay's FlowNo, BusinessDate and
	// Oversold are its original result).
	ReplayAccepted ReplayStatus = "accepted"
	// ReplayParked: the store refused the event for good (rejected or conflict, Code); the
	// terminal keeps it parked.
	ReplayParked ReplayStatus = "parked"
	// ReplayRefused: a live verdict refused the event (Code) and the terminal undid the step.
	ReplayRefused ReplayStatus = "refused"
)

// Replay marks an event a terminal sends again on a store's Resend: the store's answer to
// it the first time, as the terminal recorded it. Like Offline, it is not content: it says
// how the event is delivered, and the event's hash is unchanged.
type Replay struct {
	Status       ReplayStatus `json:"status"`
	Code         string       `json:"code,omitempty"`
	FlowNo       int64        `json:"flow_no,omitempty"`
	BusinessDate string       `json:"business_date,omitempty"`
	Oversold     bool         `json:"oversold,omitempty"`
}

// checkReplay checks the catch-up members of an envelope.
func (e *Envelope) checkReplay() error {
	if e.LostFrom < 0 || (e.LostFrom > 0 && e.LostFrom >= e.Seq) {
		return invalid(CodeSeq, "lost_from %d must be below the event's seq %d", e.LostFrom, e.Seq)
	}
	r := e.Replay
	if r == nil {
		return nil
	}
	switch {
	case r.Status != ReplayAccepted && r.Status != ReplayParked && r.Status != ReplayRefused:
		return invalid(CodePayload, "unknown replay status %q", r.Status)
	case r.FlowNo < 0:
		return invalid(CodePayload, "replay flow number %d is negative", r.FlowNo)
	case r.BusinessDate != "" && !validDate(r.BusinessDate):
		return invalid(CodePayload, "replay business date %q is not YYYY-MM-DD", r.BusinessDate)
	case !e.Offline:
		return invalid(CodePayload, "a replayed event is sent offline")
	}
	return nil
}

// Down is a decoded down message: acks, or a resend request.
type Down struct {
	Acks   *Acks
	Resend *Resend
}

// DecodeDown strictly decodes a down message of either kind.
func DecodeDown(b []byte) (Down, error) {
	if len(b) > MaxMessageBytes {
		return Down{}, invalid(CodeOversize, "message of %d bytes is over the %d byte limit", len(b), MaxMessageBytes)
	}
	// Only the kind is read here (segmentio skips the other members; encoding/json says
	// why a document is refused).
	var head struct {
		Kind string `json:"kind"`
	}
	if segjson.Unmarshal(b, &head) != nil {
		if err := json.Unmarshal(b, &head); err != nil {
			return Down{}, jsonError(err)
		}
	}
	if head.Kind != KindResend {
		a, err := DecodeAcks(b)
		return Down{Acks: &a}, err
	}
	var r Resend
	if err := decodeStrict(b, &r); err != nil {
		return Down{}, err
	}
	switch {
	case r.V != Version:
		return Down{}, invalid(CodeVersion, "protocol version %d is not supported", r.V)
	case !ValidID(r.Store) || !ValidID(r.Terminal):
		return Down{}, invalid(CodeID, "resend store and terminal ids must be 1-%d characters of A-Z a-z 0-9 _ -", MaxIDLen)
	case r.From <= 0 || r.To < r.From:
		return Down{}, invalid(CodeSeq, "resend of seqs %d..%d is not a range", r.From, r.To)
	}
	return Down{Resend: &r}, nil
}

// MarshalResend encodes a resend request.
func MarshalResend(store, terminal string, from, to int64) ([]byte, error) {
	return json.Marshal(Resend{V: Version, Kind: KindResend, Store: store, Terminal: terminal, From: from, To: to})
}

func validDate(s string) bool {
	_, err := time.Parse(BusinessDate, s)
	return err == nil
}
