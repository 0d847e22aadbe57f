// Package hq is the contract between a store's uploader and headquarters: the batch a store
// uploads (its ledger's sales, refunds and day closes, and its own declaration of each
// closed business day), how a request is signed with the store's secret, the receipt HQ
// answers, and the Storage interface that HQ's engines (SQLite, PostgreSQL) implement.
//
// Money is int64 fen throughout; the package does no I/O.
package hq

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strconv"
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
type StoreDay struct {
	BusinessDate string    `json:"business_date"`
	Revision     int64     `json:"revision"`
	ClosedAt     time.Time `json:"closed_at"`
	Txns         []Txn     `json:"txns"`
}

// Batch is one upload. Its ID is stable: a retry after any failure resends the same rows
// under the same ID, and the same ID never names other rows.
type Batch struct {
	V      int        `json:"v"`
	Store  string     `json:"store"`
	ID     string     `json:"batch_id"`
	Rows   []Row      `json:"rows"`
	Days   []StoreDay `json:"days,omitempty"`
	SentAt time.Time  `json:"sent_at"`
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
}

// ContentHash is the hex SHA-256 of a batch body, used to tell a replay from a reuse of the
// batch ID with other content.
func ContentHash(body []byte) string {
	s := sha256.Sum256(body)
	return hex.EncodeToString(s[:])
}

// Request headers of an upload.
const (
	HeaderStore     = "X-Posgate-Store"
	HeaderTimestamp = "X-Posgate-Timestamp" // Unix seconds
	HeaderSignature = "X-Posgate-Signature" // hex HMAC-SHA256, see Sign
	HeaderIdemKey   = "Idempotency-Key"     // the batch ID
)

// Sign returns the signature of a request: hex HMAC-SHA256 with the store's secret over
// "posgate-hq/v1\n{method}\n{path}\n{store}\n{timestamp}\n{idempotency key}\n{hex sha256 of body}".
func Sign(secret []byte, method, path, store, timestamp, idemKey string, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("posgate-hq/v1\n" + method + "\n" + path + "\n" + store + "\n" + timestamp + "\n" + idemKey + "\n" + ContentHash(body)))
	return hex.EncodeToString(m.Sum(nil))
}

// Verify reports whether sig is the signature of the request (constant time).
func Verify(secret []byte, sig, method, path, store, timestamp, idemKey string, body []byte) bool {
	want := Sign(secret, method, path, store, timestamp, idemKey, body)
	return hmac.Equal([]byte(want), []byte(sig))
}

// StoredRow is a row as HQ holds it, for reconciliation.
type StoredRow struct {
	Store, Terminal string
	Seq             int64
	Kind            string
	BusinessDate    string
	FlowNo          int64
	Amount          money.Fen
	ByMethod        map[string]money.Fen
	ReceivedAt      time.Time
	Payload         json.RawMessage // day_close rows only (the declared totals); nil otherwise
}

// StoredDay is a store's latest declaration of a day as HQ holds it.
type StoredDay struct {
	Store      string
	Day        StoreDay
	ReceivedAt time.Time // when HQ received this revision
	FirstAt    time.Time // when HQ received the first declaration of the day ("closed")
}

// Storage is HQ's database. Both engines (SQLite, PostgreSQL) pass the same test suite.
type Storage interface {
	// PutBatch stores a batch in one transaction. A batch ID seen before with the same
	// content hash returns the original receipt with Duplicate set and changes nothing; with
	// another hash it is a *perr.Error of kind perr.Conflict, code "batch_id_reused", and
	// changes nothing. A row whose (store, terminal, seq) HQ already holds is not stored again
	// (with the same hash it counts as old; with another hash the whole batch is refused with
	// perr.Conflict "row_conflict").
	PutBatch(ctx context.Context, b *Batch, contentHash string, at time.Time) (Receipt, error)
	// Rows returns every stored sale, refund and day-close row of a business date (of one
	// store, or of all stores when store is "").
	Rows(ctx context.Context, date, store string) ([]StoredRow, error)
	// Days returns the latest declaration of a business date of each store (or one store).
	Days(ctx context.Context, date, store string) ([]StoredDay, error)
	// Close closes the database.
	Close() error
}
