// Package wire is posgate's MQTT protocol: the versioned JSON envelope a terminal publishes
// on its up topic, the batch that carries a backlog, the acks the store sends down, the
// retained catalog and presence messages, and the topics they travel on.
//
// Decoding is strict: an unknown version, a missing field, a wrong type, an unknown field or an
// oversize message is a coded *perr.Error, never a panic and never a silently accepted value.
// The package does no I/O.
package wire

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"strings"
	"time"
)

// Version is the protocol version this package speaks; a message of any other version is
// rejected with code "wire_version".
const Version = 1

// Size limits for messages on the wire.
const (
	MaxEventBytes   = 64 << 10 // one event envelope
	MaxMessageBytes = 4 << 20  // one up message (a batch of events) or one down message
	MaxBatchEvents  = 1000     // events in one batch message
	MaxIDLen        = 64       // store and terminal ids
	// MaxPacketBytes bounds an MQTT packet a store's broker reads: the largest message
	// (MaxMessageBytes) with room for the packet's header and topic. A broker refuses a
	// larger packet and drops the connection, so a terminal keeps every message it sends
	// under MaxMessageBytes: the two sides agree through these two figures.
	MaxPacketBytes = MaxMessageBytes + 64<<10
)

// Kind is the kind of an event.
type Kind string

// The event kinds.
const (
	KindScan      Kind = "scan"      // a line scanned into an open sale
	KindSale      Kind = "sale"      // a completed, paid sale
	KindRefund    Kind = "refund"    // a refund of (part of) a completed sale
	KindDayClose  Kind = "day_close" // the terminal's own totals for a business day
	KindHeartbeat Kind = "heartbeat" // the terminal's backlog figures
)

// KindBatch is the kind of an up message that carries several events.
const KindBatch = "batch"

// Valid reports whether k is a known event kind.
func (k Kind) Valid() bool {
	switch k {
	case KindScan, KindSale, KindRefund, KindDayClose, KindHeartbeat:
		return true
	}
	return false
}

// Envelope is one event as it travels from a terminal to its store. Its idempotency key is
// Terminal:Seq; Hash covers everything that is content (not the Offline flag, which says how
// the event is being delivered, not what happened).
type Envelope struct {
	V        int             `json:"v"`
	Kind     Kind            `json:"kind"`
	Store    string          `json:"store"`
	Terminal string          `json:"terminal"`
	Seq      int64           `json:"seq"`
	Key      string          `json:"key"`
	Hash     string          `json:"hash"`
	At       time.Time       `json:"at"`
	Offline  bool            `json:"offline,omitempty"`
	Payload  json.RawMessage `json:"payload"`
	// Replay marks an event sent again on the store's Resend, with the store's first answer
	// to it; LostFrom, if not 0, says that the terminal no longer holds its events from
	// LostFrom to Seq-1 (pruned). Neither is content (catchup.go).
	Replay   *Replay `json:"replay,omitempty"`
	LostFrom int64   `json:"lost_from,omitempty"`
}

// Key returns the idempotency key of a terminal's event.
func Key(terminal string, seq int64) string { return terminal + ":" + strconv.FormatInt(seq, 10) }

// Hash returns the content hash of an event: hex SHA-256 over the protocol version, kind,
// store, terminal, seq, business time (UTC, RFC 3339 with nanoseconds) and the payload in
// the form encoding/json writes a json.RawMessage (compact, with <, >, &, U+2028 and U+2029
// escaped), so that re-encoding an envelope never changes its hash.
func Hash(kind Kind, store, terminal string, seq int64, at time.Time, payload []byte) string {
	sum := hashSum(kind, store, terminal, seq, at, payload)
	return hex.EncodeToString(sum[:])
}

// HashIs reports whether h is the content hash of the event (Hash), without building the
// hash's text: HQ checks every row of every batch with it.
func HashIs(h string, kind Kind, store, terminal string, seq int64, at time.Time, payload []byte) bool {
	if len(h) != 2*sha256.Size {
		return false
	}
	sum := hashSum(kind, store, terminal, seq, at, payload)
	var text [2 * sha256.Size]byte
	hex.Encode(text[:], sum[:])
	return string(text[:]) == h
}

// hashSum is the SHA-256 behind Hash.
func hashSum(kind Kind, store, terminal string, seq int64, at time.Time, payload []byte) [sha256.Size]byte {
	// The text hashed is built in one buffer (on the stack for the usual event) and hashed
	// in one call: HQ hashes every row of every batch again.
	var buf [1024]byte
	b := append(buf[:0], "posgate/v"...)
	b = strconv.AppendInt(b, Version, 10)
	b = append(append(b, '\n'), kind...)
	b = append(append(b, '\n'), store...)
	b = append(append(b, '\n'), terminal...)
	b = strconv.AppendInt(append(b, '\n'), seq, 10)
	b = at.UTC().AppendFormat(append(b, '\n'), time.RFC3339Nano)
	b = append(append(b, '\n'), canonical(payload)...)
	return sha256.Sum256(b)
}

// canonical returns payload compacted and HTML-escaped, as json.Marshal emits a RawMessage;
// payloads already in that form (everything posgate encodes) are returned as they are.
func canonical(payload []byte) []byte {
	if isCanonical(payload) {
		return payload
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, payload); err != nil {
		return payload // not JSON: hashed as is, and rejected by the decoder anyway
	}
	var out bytes.Buffer
	json.HTMLEscape(&out, compact.Bytes())
	return out.Bytes()
}

// isCanonical reports whether payload, if it is valid JSON, is already in canonical form:
// no whitespace outside strings and nothing json.HTMLEscape would escape (<, >, &, U+2028,
// U+2029). It is a fast path only: for anything else canonical does the full work.
func isCanonical(payload []byte) bool {
	inString := false
	for i := 0; i < len(payload); i++ {
		for i < len(payload) && !canonicalSpecial[payload[i]] { // the common bytes, in a tight loop
			i++
		}
		if i == len(payload) {
			break
		}
		switch c := payload[i]; c {
		case '"':
			inString = !inString
		case '\\':
			if inString {
				i++ // the escaped character cannot end the string
			}
		case ' ', '\t', '\n', '\r':
			if !inString {
				return false
			}
		case '<', '>', '&':
			return false
		case 0xE2: // U+2028 and U+2029 are E2 80 A8 and E2 80 A9
			if i+2 < len(payload) && payload[i+1] == 0x80 && (payload[i+2] == 0xA8 || payload[i+2] == 0xA9) {
				return false
			}
		}
	}
	return true
}

// canonicalSpecial marks the bytes isCanonical looks at.
var canonicalSpecial = func() (t [256]bool) {
	for _, c := range []byte{'"', '\\', ' ', '\t', '\n', '\r', '<', '>', '&', 0xE2} {
		t[c] = true
	}
	return t
}()

// NewEnvelope builds a sealed envelope (key and hash filled in) for a payload already encoded.
func NewEnvelope(kind Kind, store, terminal string, seq int64, at time.Time, payload []byte) Envelope {
	return Envelope{
		V: Version, Kind: kind, Store: store, Terminal: terminal, Seq: seq,
		Key: Key(terminal, seq), Hash: Hash(kind, store, terminal, seq, at, payload),
		At: at, Payload: payload,
	}
}

// Batch is an up message carrying several events of one terminal, in seq order. The store
// answers it with one Acks message listing each event's result.
type Batch struct {
	V        int               `json:"v"`
	Kind     string            `json:"kind"` // always KindBatch
	Store    string            `json:"store"`
	Terminal string            `json:"terminal"`
	Events   []json.RawMessage `json:"events"`
}

// AckStatus is the store's verdict on one event.
type AckStatus string

// The ack statuses. Accepted and Duplicate carry a Result; the others carry a Code.
const (
	// AckAccepted: the event is committed to the store ledger.
	AckAccepted AckStatus = "accepted"
	// AckDuplicate: the event was already committed; Result is the original result.
	AckDuplicate AckStatus = "duplicate"
	// AckRejected: the store refused the event. For a live attempt of a scan or sale this is a
	// verdict (e.g. out of stock); for an offline attempt the event is invalid and is parked.
	AckRejected AckStatus = "rejected"
	// AckRateLimited: a live limit was hit; retry after RetryAfterMs.
	AckRateLimited AckStatus = "rate_limited"
	// AckConflict: the key was already used with other content; the original stands.
	AckConflict AckStatus = "conflict"
	// AckOutOfOrder: the store expects an earlier seq first (Expect); resend from there.
	AckOutOfOrder AckStatus = "out_of_order"
)

// Final reports whether an ack ends the terminal's duty to deliver the event.
func (s AckStatus) Final() bool {
	switch s {
	case AckAccepted, AckDuplicate, AckRejected, AckConflict:
		return true
	}
	return false
}

// Result is what the store recorded for an accepted event.
type Result struct {
	FlowNo       int64  `json:"flow_no,omitempty"`       // store flow number of a sale or refund
	BusinessDate string `json:"business_date,omitempty"` // YYYY-MM-DD in the store's time zone
	Oversold     bool   `json:"oversold,omitempty"`      // an offline sale took stock below zero
}

// Ack is the store's application-level answer to one event, sent after the ledger commit.
type Ack struct {
	Seq          int64     `json:"seq"`
	Key          string    `json:"key"`
	Status       AckStatus `json:"status"`
	Live         bool      `json:"live,omitempty"` // the verdict was on a live attempt
	Code         string    `json:"code,omitempty"`
	Message      string    `json:"message,omitempty"`
	RetryAfterMs int64     `json:"retry_after_ms,omitempty"`
	Expect       int64     `json:"expect,omitempty"`
	Result       *Result   `json:"result,omitempty"`
}

// Acks is a down message: the acks for one up message (one ack for a single event, one per
// event for a batch).
type Acks struct {
	V        int    `json:"v"`
	Kind     string `json:"kind"` // always "acks"
	Store    string `json:"store"`
	Terminal string `json:"terminal"`
	Acks     []Ack  `json:"acks"`
}

// KindAcks is the kind of a down message carrying acks.
const KindAcks = "acks"

// Topics. Every topic is per store; up, down, status and backlog are per terminal too.

// UpTopic is where a terminal publishes its events.
func UpTopic(store, terminal string) string { return "pos/" + store + "/" + terminal + "/up" }

// DownTopic is where the store sends a terminal its acks.
func DownTopic(store, terminal string) string { return "pos/" + store + "/" + terminal + "/down" }

// StatusTopic carries a terminal's retained presence (and its last will).
func StatusTopic(store, terminal string) string {
	return "pos/" + store + "/" + terminal + "/status"
}

// BacklogTopic carries a terminal's retained report of the events it holds that the store
// has not acknowledged (Backlog). It goes beside the events, not behind them, so that the
// store sees what a till holds while the till is still sending it.
func BacklogTopic(store, terminal string) string {
	return "pos/" + store + "/" + terminal + "/backlog"
}

// SettingsTopic carries the store's retained, versioned settings for its terminals
// (Settings): supervisors and the refund rules.
func SettingsTopic(store string) string { return "pos/" + store + "/settings" }

// CatalogTopic carries the store's retained, versioned catalog.
func CatalogTopic(store string) string { return "pos/" + store + "/catalog" }

// UpWildcard subscribes to every terminal's up topic of a store.
func UpWildcard(store string) string { return "pos/" + store + "/+/up" }

// StatusWildcard subscribes to every terminal's status topic of a store.
func StatusWildcard(store string) string { return "pos/" + store + "/+/status" }

// BacklogWildcard subscribes to every terminal's backlog topic of a store.
func BacklogWildcard(store string) string { return "pos/" + store + "/+/backlog" }

// ParseUpTopic returns the store and terminal of an up topic.
func ParseUpTopic(topic string) (store, terminal string, ok bool) {
	return parseTerminalTopic(topic, "up")
}

// ParseStatusTopic returns the store and terminal of a status topic.
func ParseStatusTopic(topic string) (store, terminal string, ok bool) {
	return parseTerminalTopic(topic, "status")
}

// ParseBacklogTopic returns the store and terminal of a backlog topic.
func ParseBacklogTopic(topic string) (store, terminal string, ok bool) {
	return parseTerminalTopic(topic, "backlog")
}

// parseTerminalTopic splits pos/{store}/{terminal}/{leaf}. It runs for every message a
// store hears, so it allocates nothing.
func parseTerminalTopic(topic, leaf string) (store, terminal string, ok bool) {
	rest, ok := strings.CutPrefix(topic, "pos/")
	if !ok {
		return "", "", false
	}
	store, rest, _ = strings.Cut(rest, "/")
	terminal, rest, _ = strings.Cut(rest, "/")
	if rest != leaf || store == "" || terminal == "" {
		return "", "", false
	}
	return store, terminal, true
}

// Presence is the retained message on a terminal's status topic.
type Presence struct {
	V        int       `json:"v"`
	Terminal string    `json:"terminal"`
	Online   bool      `json:"online"`
	At       time.Time `json:"at,omitzero"`
}

// Backlog is the retained message on a terminal's backlog topic: what the terminal holds
// that the store has not acknowledged, as it counted it at At (its own clock). A terminal
// publishes it when it connects and whenever the figures change, at QoS 0: a report lost
// with a connection is sent again on the next one, and a store whose broker does not know
// the topic drops it without closing the terminal's connection.
type Backlog struct {
	V        int    `json:"v"`
	Terminal string `json:"terminal"`
	Events   int64  `json:"events"` // events not acknowledged, in flight ones included
	// Seq is the highest seq the terminal had given an event when it counted (0: none):
	// a heartbeat of a higher seq was taken after the report.
	Seq      int64     `json:"seq"`
	OldestMs int64     `json:"oldest_age_ms,omitempty"` // age of the oldest of them at At
	At       time.Time `json:"at"`
	// CatalogVersion is the version of the store's catalog the terminal holds (0: none yet);
	// a new one goes in a new report.
	CatalogVersion int64 `json:"catalog_version,omitempty"`
}

// BacklogRefresh is how often, at least, a terminal publishes its backlog report while
// online, changed or not.
const BacklogRefresh = time.Minute
