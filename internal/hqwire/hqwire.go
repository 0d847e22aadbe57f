// Package hqwire is the contract between a store's uploader (hq-sync upload, at the store)
// and headquarters (hq-sync serve): the batch a store uploads (its ledger's sales, refunds
// and day closes, its own declaration of each closed business day, and the state of the
// exceptions its ledger flagged), the limits on it, how a request is signed with the store's
// secret, the receipt HQ answers, and the error codes of HQ's refusals. Both sides import it,
// the store's ledger too (it writes the rows the uploader sends), so that the two ends of the
// protocol cannot drift apart.
//
// Money is int64 fen throughout; the package does no I/O.
package hqwire

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/posgate/posgate/internal/money"
)

// Version is the upload protocol version.
const Version = 1

// Limits on an upload.
const (
	MaxBatchBytes = 8 << 20 // one batch request body
	MaxBatchRows  = 5000    // rows in one batch
	MaxClockSkew  = 15 * time.Minute
	// MaxDayParts bounds the parts of one declaration in parts (StoreDay.Parts). A part
	// takes up to one batch (some 70,000 transactions), so this is far more than any
	// store's day.
	MaxDayParts = 1000
)

// MaxBatchExceptions bounds the exceptions in one batch.
const MaxBatchExceptions = 5000

// MaxHashLen bounds a row's hash (internal/wire writes 64 hex digits).
const MaxHashLen = 128

// Limits on an exception's text.
const (
	MaxCodeLen       = 64   // an exception's code, characters [a-z0-9_]
	MaxExceptionText = 1000 // an exception's detail, and its resolution, in bytes
)

// Row kinds.
const (
	KindSale     = "sale"
	KindRefund   = "refund"
	KindDayClose = "day_close" // a terminal's own declared totals for a business day
)

// Row is one ledger fact: a sale or refund (a transaction) or a terminal's day close. Rows
// are unique per (store, terminal, seq) at HQ across all batches.
type Row struct {
	Kind         string               `json:"kind"`
	Terminal     string               `json:"terminal"`
	Seq          int64                `json:"seq"`
	BusinessDate string               `json:"business_date"`
	FlowNo       int64                `json:"flow_no,omitempty"`
	At           time.Time            `json:"at"`
	Hash         string               `json:"hash"`                // the event's content hash (internal/wire)
	Amount       money.Fen            `json:"amount"`              // sale total or refund amount (0 for a day close)
	ByMethod     map[string]money.Fen `json:"by_method,omitempty"` // sale: per method, cash net of change; refund: its method
	Payload      json.RawMessage      `json:"payload"`             // the event's payload as the terminal sent it
}

// Key is a row's identity at HQ.
func (r *Row) Key(store string) string {
	return store + "/" + r.Terminal + "/" + strconv.FormatInt(r.Seq, 10)
}

// Exception kinds: what a store's ledger flagged for a manager.
const (
	// ExceptionOversell: an offline sale took a SKU's stock below zero (one per sale and SKU).
	ExceptionOversell = "oversell"
	// ExceptionRefund: an accepted refund the store's records of its sale do not cover.
	ExceptionRefund = "refund"
	// ExceptionPrice: an offline sale charged, for a SKU, another unit price than the store's
	// catalog (one per sale and SKU; the SKU escaped as an oversell's). Code is
	// price_changed (priced from an older catalog version) or price_mismatch (from the
	// store's version or none); Detail gives the prices, units and versions.
	ExceptionPrice = "price"
	// ExceptionParked: an event the store refused for good (bad input, a key used again with
	// other content), which the till kept: a sale or refund of the till's day close that
	// the ledger does not hold.
	ExceptionParked = "parked"
	// ExceptionSeqGap: a gap in a terminal's seq order the store took (its ledger restored
	// from a backup, or a data directory lost): the events From..To the till sent to a
	// ledger the store no longer holds. The till's day close counts them; the store's rows
	// do not. Seq is the gap's first seq, SKU empty; Code is its reason (SeqGapPruned). No
	// manager resolves one.
	ExceptionSeqGap = "seq_gap"
)

// Codes of a seq_gap exception: why the store's ledger lacks the events.
const (
	// SeqGapPruned: the ledger lost the events (restored from a backup, or started empty)
	// and the till, asked for them again, no longer held them.
	SeqGapPruned = "pruned"
)

// CodeOversold is the code of every oversell exception.
const CodeOversold = "oversold"

// Exception is the state of one exception a store's ledger flagged, as the ledger holds it
// after its change number Change: an oversell line, a refund exception or a parked event,
// open or resolved by the store's manager, or withdrawn (the ledger no longer holds it: a refund its sale,
// arrived late, now covers). A store sends an exception again each time it changes; HQ keeps,
// per (store, kind, terminal, seq, sku), the state with the highest Change.
//
// Exceptions go to HQ beside the rows: they are the store's judgement on its rows, not rows,
// and they change after the fact (a resolution, a late sale), which rows never do.
type Exception struct {
	Change   int64  `json:"change"` // the ledger's change number, > 0
	Kind     string `json:"kind"`   // ExceptionOversell, ExceptionPrice, ExceptionRefund, ExceptionParked or ExceptionSeqGap
	Terminal string `json:"terminal"`
	Seq      int64  `json:"seq"` // the sale's (oversell), the refund's, the parked event or a seq gap's first
	// SKU is, for an oversell, the SKU taken below zero, with each NUL written as SUB "0"
	// and each SUB (0x1A) as two (EscapeSKU); for a refund, empty; for a parked event, empty
	// for the first content the store parked under its key and the content's hash for each
	// later one (a key reused with other content more than once: each content the till
	// kept is an exception of its own).
	SKU          string `json:"sku,omitempty"`
	BusinessDate string `json:"business_date"`
	// Withdrawn: the ledger no longer holds the exception; the fields below are empty (its
	// key and BusinessDate are set: HQ files it under the date it had).
	Withdrawn bool `json:"withdrawn,omitempty"`
	// Code is CodeOversold for an oversell; for a refund, what the ledger found
	// (refund_sale_unknown, refund_exceeds_sale), and Detail how; for a parked event, the
	// code it was refused with, and Detail what the event was (a sale's amount and tenders,
	// when its payload could be read) and why.
	Code     string    `json:"code,omitempty"`
	Detail   string    `json:"detail,omitempty"`
	QtyShort int64     `json:"qty_short,omitempty"` // oversell: units below zero
	At       time.Time `json:"at,omitzero"`         // the event's business time
	// Resolved says the store's manager explained it: when, and how.
	Resolved   bool      `json:"resolved,omitempty"`
	ResolvedAt time.Time `json:"resolved_at,omitzero"`
	Resolution string    `json:"resolution,omitempty"`
}

// MaxExceptionSKU bounds an exception's SKU: a SKU of the wire (at most 128 bytes) with
// every byte escaped.
const MaxExceptionSKU = 256

// EscapeSKU writes a SKU as an exception carries it: PostgreSQL text holds no NUL, so a NUL
// goes as SUB "0", and a SUB as two SUBs, which keeps every SKU's escape its own.
func EscapeSKU(sku string) string {
	if !strings.ContainsAny(sku, "\x00\x1a") {
		return sku
	}
	return strings.NewReplacer("\x1a", "\x1a\x1a", "\x00", "\x1a0").Replace(sku)
}

// UnescapeSKU reads back a SKU EscapeSKU wrote. ok is false for a text EscapeSKU cannot
// have written (a SUB followed by anything but a SUB or "0", or last).
func UnescapeSKU(s string) (sku string, ok bool) {
	if !strings.Contains(s, "\x1a") {
		return s, true
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != 0x1a {
			b.WriteByte(s[i])
			continue
		}
		if i++; i == len(s) {
			return "", false
		}
		switch s[i] {
		case 0x1a:
			b.WriteByte(0x1a)
		case '0':
			b.WriteByte(0)
		default:
			return "", false
		}
	}
	return b.String(), true
}

// Key is an exception's identity at HQ within its store.
func (x *Exception) Key() string {
	return x.Kind + "/" + x.Terminal + "/" + strconv.FormatInt(x.Seq, 10) + "/" + x.SKU
}

// Txn is one transaction in a store's declaration of a day: enough to name each difference.
type Txn struct {
	Terminal string               `json:"terminal"`
	Seq      int64                `json:"seq"`
	Kind     string               `json:"kind"` // sale or refund
	FlowNo   int64                `json:"flow_no"`
	Amount   money.Fen            `json:"amount"`
	ByMethod map[string]money.Fen `json:"by_method"`
}

// StoreDay is a store's declaration that a business day is closed: the ledger's list of the
// day's transactions. A store may declare a day again (late offline sales); the latest
// declaration (highest Revision) stands.
//
// A declaration larger than one batch may carry goes in parts: part k of n (1 ≤ k ≤ n ≤
// MaxDayParts) carries the k-th slice of the list, in the list's order, and the parts of a
// revision go in order, each in a later batch than the one before. HQ keeps the parts aside
// until the last one arrives; only then does the revision stand (HQ's storage never reads
// back a declaration in part). Part 1 starts a revision's parts over, whatever HQ kept aside of
// the day before. Every part of a split has the same Revision, ClosedAt, Parts and Split,
// an id the store gives each split of a list: HQ adds a part only to the parts of its own
// split, so two splits of one revision (the store split the day again, after HQ dropped a
// part) never mix. Part and Parts both 0 (or both 1) and no Split: the whole list in one.
type StoreDay struct {
	BusinessDate string    `json:"business_date"`
	Revision     int64     `json:"revision"`
	ClosedAt     time.Time `json:"closed_at"`
	Part         int       `json:"part,omitempty"`
	Parts        int       `json:"parts,omitempty"`
	Split        string    `json:"split,omitempty"`
	Txns         []Txn     `json:"txns"`
}

// InParts reports whether d is one part of a declaration in parts (Parts > 1).
func (d *StoreDay) InParts() bool { return d.Parts > 1 }

// Batch is one upload. Its ID is stable: a retry after any failure resends the same rows
// under the same ID, and the same ID never names other rows.
type Batch struct {
	V     int        `json:"v"`
	Store string     `json:"store"`
	ID    string     `json:"batch_id"`
	Rows  []Row      `json:"rows"`
	Days  []StoreDay `json:"days,omitempty"`
	// Exceptions are the states of the exceptions the store's ledger changed since the last
	// batch HQ acknowledged (or the part of them this batch has room for).
	Exceptions []Exception `json:"exceptions,omitempty"`
	SentAt     time.Time   `json:"sent_at"`
}

// Receipt is HQ's answer to a stored batch.
type Receipt struct {
	Store     string    `json:"store"`
	BatchID   string    `json:"batch_id"`
	Rows      int       `json:"rows"`      // rows in the batch
	New       int       `json:"new_rows"`  // rows HQ did not have before
	Days      int       `json:"days"`      // day declarations stored
	Duplicate bool      `json:"duplicate"` // the batch was stored before; this is the original receipt
	StoredAt  time.Time `json:"stored_at"`

	// DaysHeld lists the declarations of the batch HQ did not store because it already holds
	// the day at a revision at least as high: business date → the revision it holds. An
	// uploader whose state was lost starts again from revision 1; this is how it learns to
	// declare above what HQ holds.
	DaysHeld map[string]int64 `json:"days_held,omitempty"`

	// DayParts counts the parts of declarations in parts that HQ kept aside, waiting for
	// their last part (a last part counts in Days, when its revision became the day's).
	DayParts int `json:"day_parts,omitempty"`

	// PartsDropped lists the parts of the batch HQ did not keep because they do not follow
	// the parts it holds of the day (a part k > 1 that is not the next part of the same
	// revision, number of parts and split): business date → the part's revision. HQ keeps
	// nothing of such a part; the store declares the day again from part 1.
	PartsDropped map[string]int64 `json:"parts_dropped,omitempty"`

	// Exceptions counts the exception states of the batch HQ stored; one HQ already held at
	// the same or a higher change number is left as it was and not counted.
	Exceptions int `json:"exceptions,omitempty"`
}

// ContentHash is the hex SHA-256 of a batch body, used to tell a replay from a reuse of the
// batch ID with other content.
func ContentHash(body []byte) string {
	s := sha256.Sum256(body)
	return hex.EncodeToString(s[:])
}

// Request headers of an upload, and the signature header of HQ's receipt.
const (
	HeaderStore     = "X-Posgate-Store"
	HeaderTimestamp = "X-Posgate-Timestamp" // Unix seconds
	HeaderSignature = "X-Posgate-Signature" // hex HMAC-SHA256: Sign on a request, SignReceipt on a receipt
	HeaderIdemKey   = "Idempotency-Key"     // the batch ID
	// HeaderContentHash is the body's ContentHash, which the signature covers: HQ checks
	// the signature from the headers alone, before it reads a byte of the body, and then
	// that the body is the one signed.
	HeaderContentHash = "X-Posgate-Content-SHA256"
)

// Sign returns the signature of a request: hex HMAC-SHA256 with the store's secret over
// "posgate-hq/v1\n{method}\n{path}\n{store}\n{timestamp}\n{idempotency key}\n{hex sha256 of body}".
func Sign(secret []byte, method, path, store, timestamp, idemKey string, body []byte) string {
	return SignHash(secret, method, path, store, timestamp, idemKey, ContentHash(body))
}

// SignHash is Sign of a body whose ContentHash is contentHash.
func SignHash(secret []byte, method, path, store, timestamp, idemKey, contentHash string) string {
	return mac(secret, "posgate-hq/v1\n"+method+"\n"+path+"\n"+store+"\n"+timestamp+"\n"+idemKey+"\n"+contentHash)
}

// SignRequest sets on req the headers of a request signed for HQ: the store, the time
// (now, in Unix seconds), the idempotency key (none if idemKey is empty), body's content
// hash and the signature over req's method, path (as HQ sees it: with the query, if any)
// and all of these. body is the request's body (nil for none).
func SignRequest(req *http.Request, secret []byte, path, store, idemKey string, now time.Time, body []byte) {
	ts := strconv.FormatInt(now.Unix(), 10)
	hash := ContentHash(body)
	req.Header.Set(HeaderStore, store)
	req.Header.Set(HeaderTimestamp, ts)
	if idemKey != "" {
		req.Header.Set(HeaderIdemKey, idemKey)
	}
	req.Header.Set(HeaderContentHash, hash)
	req.Header.Set(HeaderSignature, SignHash(secret, req.Method, path, store, ts, idemKey, hash))
}

// Verify reports whether sig is the signature of the request (constant time).
func Verify(secret []byte, sig, method, path, store, timestamp, idemKey string, body []byte) bool {
	return VerifyHash(secret, sig, method, path, store, timestamp, idemKey, ContentHash(body))
}

// VerifyHash reports whether sig is the signature of a request whose body's ContentHash is
// contentHash (constant time).
func VerifyHash(secret []byte, sig, method, path, store, timestamp, idemKey, contentHash string) bool {
	want := SignHash(secret, method, path, store, timestamp, idemKey, contentHash)
	return hmac.Equal([]byte(want), []byte(sig))
}

// SignReceipt returns HQ's signature of a receipt it answers a store's batch with: hex
// HMAC-SHA256 with the store's secret over
// "posgate-hq-receipt/v1\n{store}\n{batch id}\n{hex sha256 of the receipt's body}". The
// uploader takes a batch as stored only on a receipt so signed: nothing between it and HQ can
// answer in HQ's name.
func SignReceipt(secret []byte, store, batchID string, body []byte) string {
	return mac(secret, "posgate-hq-receipt/v1\n"+store+"\n"+batchID+"\n"+ContentHash(body))
}

// VerifyReceipt reports whether sig is HQ's signature of the receipt body (constant time).
func VerifyReceipt(secret []byte, sig, store, batchID string, body []byte) bool {
	return hmac.Equal([]byte(SignReceipt(secret, store, batchID, body)), []byte(sig))
}

func mac(secret []byte, msg string) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(msg))
	return hex.EncodeToString(m.Sum(nil))
}

// Stable error codes of HQ's answers: the "code" member of the problem document (RFC 9457)
// HQ answers a request it refuses with, and the code of the error HQ's storage returns for
// a batch it cannot store. Each is listed with the HTTP status HQ answers it with. An
// uploader retries 5xx, 408 and 429 as they are; any other 4xx is a refusal that sending the
// batch again as it is would meet again.
const (
	// CodeUnauthorized (401): the request is not signed by a store HQ knows, or a header the
	// signature needs is missing. One code for every such case, so that an answer never
	// tells a guesser which store ids exist.
	CodeUnauthorized = "unauthorized"
	// CodeTooManyFailures (429, with Retry-After): too many requests from the address, or
	// for the store, failed to authenticate; wait before the next.
	CodeTooManyFailures        = "too_many_failures"
	CodeTimestampSkew          = "timestamp_skew"           // 401: signed, but X-Posgate-Timestamp is too far from HQ's clock
	CodeContentHashMismatch    = "content_hash_mismatch"    // 400: the body is not the one X-Posgate-Content-SHA256 names
	CodeStoreMismatch          = "store_mismatch"           // 403: the body's store is not the signing store
	CodeIdempotencyKeyMismatch = "idempotency_key_mismatch" // 400: Idempotency-Key is not the body's batch_id
	CodeBodyTooLarge           = "body_too_large"           // 413: the body is over MaxBatchBytes
	CodeJSONInvalid            = "json_invalid"             // 400: not one strict JSON Batch
	CodeBodyIncomplete         = "body_incomplete"          // 408: the body did not arrive whole; send it again
	// CodeBatchInvalid (400, perr.Invalid): a rule of the batch is broken, or the batch
	// cannot be stored as it is (no store or id, an unknown payment method, ...); the
	// detail names the row.
	CodeBatchInvalid = "batch_invalid"
	// CodeBatchIDReused (422, perr.Conflict): the batch id was stored before with other
	// content; the original stands. An uploader that meets it for a batch it recorded
	// itself shares its batch ids with another state (restored from a backup).
	CodeBatchIDReused = "batch_id_reused"
	// CodeRowConflict (409, perr.Conflict): a row's (store, terminal, seq) is stored with
	// another hash; nothing of the batch is stored.
	CodeRowConflict      = "row_conflict"
	CodeMethodNotAllowed = "method_not_allowed" // 405
	CodeNotFound         = "not_found"          // 404: no such path
	CodeInternal         = "internal"           // 500: HQ failed; retry later
)
