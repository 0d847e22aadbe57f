package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"time"

	"github.com/posgate/posgate/internal/perr"
	segjson "github.com/segmentio/encoding/json"
)

// Codes of the decoding errors. Each is a perr.Invalid error.
const (
	CodeSyntax       = "wire_syntax"        // not JSON, or trailing data
	CodeType         = "wire_type"          // a field has the wrong JSON type
	CodeUnknownField = "wire_unknown_field" // a field this version does not define
	CodeMissing      = "wire_missing_field" // a required field is absent or empty
	CodeVersion      = "wire_version"       // a protocol version other than Version
	CodeKind         = "wire_kind"          // an unknown kind
	CodeOversize     = "wire_oversize"      // a message or batch over the size limits
	CodeID           = "wire_id"            // a store or terminal id that is not [A-Za-z0-9_-]{1,64}
	CodeSeq          = "wire_seq"           // seq not positive
	CodeKey          = "wire_key"           // key is not terminal:seq
	CodeHash         = "wire_hash"          // hash does not match the content
	CodeMismatch     = "wire_mismatch"      // an event's store/terminal differs from its batch's
	CodeTime         = "wire_time"          // a business time outside the years 1970-9998
)

func invalid(code, format string, args ...any) *perr.Error {
	return perr.New(perr.Invalid, code, format, args...)
}

// decodeStrict decodes exactly one JSON value from b into v, refusing unknown fields and
// trailing data, and translates json errors into coded errors.
//
// segmentio/encoding/json decodes first, about twice as fast as encoding/json, and checks
// the syntax as it goes (a separate validation pass first cost a seventh of decoding a
// sale). Whatever it refuses goes through encoding/json again, which says why: with several
// defects in one document the two can name different ones, and the codes are encoding/
// json's. A fuzz target holds the two to the same results, invalid documents included.
func decodeStrict(b []byte, v any) error {
	rest, err := segjson.Parse(b, v, segjson.DisallowUnknownFields)
	if err == nil && len(rest) == 0 {
		return nil
	}
	reflect.ValueOf(v).Elem().SetZero()
	return stdStrict(b, v)
}

// stdStrict is decodeStrict with encoding/json.
func stdStrict(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return invalid(CodeSyntax, "trailing data after the JSON value")
	}
	return nil
}

func jsonError(err error) error {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	var pe *perr.Error
	switch {
	case errors.As(err, &pe):
		return pe
	case errors.As(err, &te):
		return invalid(CodeType, "field %q must be a JSON %s, not %s", te.Field, te.Type, te.Value)
	case errors.As(err, &se):
		return invalid(CodeSyntax, "malformed JSON at byte %d", se.Offset)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return invalid(CodeSyntax, "empty or truncated JSON")
	case strings.HasPrefix(err.Error(), "json: unknown field"):
		return invalid(CodeUnknownField, "%s", strings.TrimPrefix(err.Error(), "json: "))
	case strings.Contains(err.Error(), "Time.UnmarshalJSON"), strings.Contains(err.Error(), "parsing time"):
		return invalid(CodeType, "a time must be an RFC 3339 string: %v", err)
	default:
		return invalid(CodeSyntax, "malformed JSON: %v", err)
	}
}

// ValidID reports whether s is a valid store or terminal id: 1 to MaxIDLen characters of
// [A-Za-z0-9_-], so that it is safe inside an MQTT topic.
func ValidID(s string) bool {
	if len(s) == 0 || len(s) > MaxIDLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// DecodeEnvelope strictly decodes and checks one event envelope: size, version, required
// fields, kind, ids, key and content hash. It does not look inside the payload; see
// DecodePayload.
func DecodeEnvelope(b []byte) (Envelope, error) {
	var e Envelope
	if len(b) > MaxEventBytes {
		return e, invalid(CodeOversize, "event of %d bytes is over the %d byte limit", len(b), MaxEventBytes)
	}
	if err := decodeStrict(b, &e); err != nil {
		return e, err
	}
	return e, e.Check()
}

// Check verifies a decoded envelope: version, required fields, kind, ids, key and hash.
func (e *Envelope) Check() error {
	switch {
	case e.V == 0:
		return invalid(CodeMissing, "field \"v\" is missing")
	case e.V != Version:
		return invalid(CodeVersion, "protocol version %d is not supported (this store speaks %d)", e.V, Version)
	case e.Kind == "":
		return invalid(CodeMissing, "field \"kind\" is missing")
	case !e.Kind.Valid():
		return invalid(CodeKind, "unknown event kind %q", e.Kind)
	case e.Store == "":
		return invalid(CodeMissing, "field \"store\" is missing")
	case e.Terminal == "":
		return invalid(CodeMissing, "field \"terminal\" is missing")
	case !ValidID(e.Store) || !ValidID(e.Terminal):
		return invalid(CodeID, "store and terminal ids must be 1-%d characters of A-Z a-z 0-9 _ -", MaxIDLen)
	case e.Seq <= 0:
		return invalid(CodeSeq, "seq must be a positive integer, got %d", e.Seq)
	case e.Key == "":
		return invalid(CodeMissing, "field \"key\" is missing")
	case e.Key != Key(e.Terminal, e.Seq):
		return invalid(CodeKey, "key %q is not %q", e.Key, Key(e.Terminal, e.Seq))
	case e.Hash == "":
		return invalid(CodeMissing, "field \"hash\" is missing")
	case e.At.IsZero():
		return invalid(CodeMissing, "field \"at\" is missing")
	case e.At.UTC().Year() < 1970 || e.At.UTC().Year() > 9998:
		return invalid(CodeTime, "business time %s is outside the years 1970-9998", e.At.Format(time.RFC3339))
	case len(e.Payload) == 0 || string(e.Payload) == "null":
		return invalid(CodeMissing, "field \"payload\" is missing")
	case e.Payload[0] != '{':
		return invalid(CodeType, "field \"payload\" must be a JSON object")
	}
	if want := Hash(e.Kind, e.Store, e.Terminal, e.Seq, e.At, e.Payload); e.Hash != want {
		return invalid(CodeHash, "content hash does not match the event")
	}
	return e.checkReplay()
}

// Item is one event of an up message: the decoded envelope, or the error that rejects it.
// Seq and Key are filled in as far as they could be read, so that even a bad event can be
// acked.
type Item struct {
	Env Envelope
	Err error
	Seq int64
	Key string
}

// Up is a decoded up message: a single event or a batch.
type Up struct {
	Batch    bool
	Store    string
	Terminal string
	Items    []Item
}

// DecodeUp decodes an up message: a single envelope or a batch of them. An error is returned
// only when the message as a whole cannot be read (the store then cannot tell which events it
// held); a bad event inside a good batch is reported in its Item.Err and the others flow.
func DecodeUp(b []byte) (Up, error) {
	var up Up
	if len(b) > MaxMessageBytes {
		return up, invalid(CodeOversize, "message of %d bytes is over the %d byte limit", len(b), MaxMessageBytes)
	}
	// Only the kind is read here (the other members are skipped, not copied): it says
	// whether the message is one event or a batch.
	var head struct {
		Kind json.RawMessage `json:"kind"`
	}
	if !segjson.Valid(b) || segjson.Unmarshal(b, &head) != nil {
		if err := json.Unmarshal(b, &head); err != nil { // encoding/json says why
			return up, jsonError(err)
		}
	}
	if string(head.Kind) != `"`+KindBatch+`"` {
		it := decodeItem(b)
		up.Store, up.Terminal = it.Env.Store, it.Env.Terminal
		up.Items = []Item{it}
		return up, nil
	}
	var bt Batch
	if err := decodeStrict(b, &bt); err != nil {
		return up, err
	}
	switch {
	case bt.V != Version:
		return up, invalid(CodeVersion, "protocol version %d is not supported (this store speaks %d)", bt.V, Version)
	case !ValidID(bt.Store) || !ValidID(bt.Terminal):
		return up, invalid(CodeID, "batch store and terminal ids must be 1-%d characters of A-Z a-z 0-9 _ -", MaxIDLen)
	case len(bt.Events) == 0:
		return up, invalid(CodeMissing, "batch has no events")
	case len(bt.Events) > MaxBatchEvents:
		return up, invalid(CodeOversize, "batch of %d events is over the %d event limit", len(bt.Events), MaxBatchEvents)
	}
	up.Batch, up.Store, up.Terminal = true, bt.Store, bt.Terminal
	up.Items = make([]Item, len(bt.Events))
	for i, raw := range bt.Events {
		it := decodeItem(raw)
		if it.Err == nil && (it.Env.Store != bt.Store || it.Env.Terminal != bt.Terminal) {
			it.Err = invalid(CodeMismatch, "event %s is not from the batch's store and terminal", it.Key)
		}
		up.Items[i] = it
	}
	return up, nil
}

// decodeItem decodes one event; on failure it still recovers seq and key if it can.
func decodeItem(b []byte) Item {
	env, err := DecodeEnvelope(b)
	if err == nil {
		return Item{Env: env, Seq: env.Seq, Key: env.Key}
	}
	it := Item{Env: env, Err: err}
	var loose struct {
		Terminal string `json:"terminal"`
		Seq      int64  `json:"seq"`
	}
	if json.Unmarshal(b, &loose) == nil && loose.Seq > 0 { // b is bounded by MaxMessageBytes
		it.Seq = loose.Seq
		it.Key = Key(loose.Terminal, loose.Seq)
		it.Env.Terminal, it.Env.Seq = loose.Terminal, loose.Seq
	}
	return it
}

// MaxPresenceBytes bounds a status or backlog message (either is under 200 bytes).
const MaxPresenceBytes = 4 << 10

// DecodePresence strictly decodes a terminal's status message.
func DecodePresence(b []byte) (Presence, error) {
	var p Presence
	if len(b) > MaxPresenceBytes {
		return p, invalid(CodeOversize, "status message of %d bytes is over the %d byte limit", len(b), MaxPresenceBytes)
	}
	if err := decodeStrict(b, &p); err != nil {
		return p, err
	}
	switch {
	case p.V != Version:
		return p, invalid(CodeVersion, "protocol version %d is not supported", p.V)
	case !ValidID(p.Terminal):
		return p, invalid(CodeID, "status terminal id %q is not valid", p.Terminal)
	}
	return p, nil
}

// DecodeBacklog strictly decodes a terminal's backlog report.
func DecodeBacklog(b []byte) (Backlog, error) {
	var r Backlog
	if len(b) > MaxPresenceBytes {
		return r, invalid(CodeOversize, "backlog report of %d bytes is over the %d byte limit", len(b), MaxPresenceBytes)
	}
	if err := decodeStrict(b, &r); err != nil {
		return r, err
	}
	switch {
	case r.V != Version:
		return r, invalid(CodeVersion, "protocol version %d is not supported", r.V)
	case !ValidID(r.Terminal):
		return r, invalid(CodeID, "backlog terminal id %q is not valid", r.Terminal)
	case r.CatalogVersion < 0:
		return r, invalid(CodePayload, "backlog report's catalog version %d is negative", r.CatalogVersion)
	case r.Events < 0 || r.OldestMs < 0 || r.Seq < 0 || (r.Events == 0 && r.OldestMs != 0):
		return r, invalid(CodePayload, "backlog report of %d events, the oldest %d ms old, is not a count", r.Events, r.OldestMs)
	case r.At.IsZero():
		return r, invalid(CodeMissing, "field \"at\" is missing")
	case r.At.UTC().Year() < 1970 || r.At.UTC().Year() > 9998:
		return r, invalid(CodeTime, "backlog time %s is outside the years 1970-9998", r.At.Format(time.RFC3339))
	}
	return r, nil
}

// DecodeAcks strictly decodes a down message.
func DecodeAcks(b []byte) (Acks, error) {
	var a Acks
	if len(b) > MaxMessageBytes {
		return a, invalid(CodeOversize, "message of %d bytes is over the %d byte limit", len(b), MaxMessageBytes)
	}
	if err := decodeStrict(b, &a); err != nil {
		return a, err
	}
	switch {
	case a.V != Version:
		return a, invalid(CodeVersion, "protocol version %d is not supported", a.V)
	case a.Kind != KindAcks:
		return a, invalid(CodeKind, "down message kind %q is not %q", a.Kind, KindAcks)
	}
	for _, ack := range a.Acks {
		if ack.Seq <= 0 || ack.Status == "" {
			return a, invalid(CodeMissing, "ack without seq or status")
		}
	}
	return a, nil
}

// MarshalBatch encodes events (envelopes already encoded by json.Marshal) as one batch
// message. The events are copied as they are: encoding/json would compact and re-validate
// every one of them again, which was most of the cost of publishing a backlog.
func MarshalBatch(store, terminal string, events []json.RawMessage) ([]byte, error) {
	if len(events) > MaxBatchEvents {
		return nil, invalid(CodeOversize, "batch of %d events is over the %d event limit", len(events), MaxBatchEvents)
	}
	if !ValidID(store) || !ValidID(terminal) {
		return nil, invalid(CodeID, "store and terminal ids must be 1-%d characters of A-Z a-z 0-9 _ -", MaxIDLen)
	}
	n := 64 + len(store) + len(terminal)
	for _, e := range events {
		n += len(e) + 1
	}
	b := make([]byte, 0, n)
	// Valid ids need no escaping.
	b = fmt.Appendf(b, `{"v":%d,"kind":%q,"store":%q,"terminal":%q,"events":[`, Version, KindBatch, store, terminal)
	for i, e := range events {
		if !json.Valid(e) {
			return nil, invalid(CodeSyntax, "event %d of the batch is not JSON", i)
		}
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, e...)
	}
	return append(b, "]}"...), nil
}
