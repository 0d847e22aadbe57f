package hqwire

import (
	"crypto/hmac"
	"time"
)

// What HQ keeps so that a store that lost its ledger with no backup can be refilled from it
// (store-server restore --from-hq), beside the batches: the store's stock moves (sent on a
// route of their own, MovesPath) and, on request, the store's rows, moves and day
// declarations back (ExportPath). Both routes are additions a v0.1.0 serve answers 404
// not_found: a v0.1.0 serve takes the batches as before, and an uploader meeting such a
// serve keeps its moves and tries them again later.

// Paths of the refill routes.
const (
	// MovesPath takes a signed MovesBatch (POST, as a batch: Idempotency-Key is its id);
	// HQ answers a MovesReceipt signed as a batch's receipt (SignReceipt).
	MovesPath = "/v1/stock-moves"
	// ExportPath answers a signed GET with one page of what HQ holds of the signing store
	// (ExportPage), signed with SignExport. The query names the part and where the page
	// starts: part=rows&after_terminal=T&after_seq=N, part=moves&after=N, part=days,
	// part=exceptions&after_kind=K&after_terminal=T&after_seq=N&after_sku=S or
	// part=flows&after_terminal=T&after_seq=N; limit (1 to MaxExportPage) bounds a page of
	// rows, moves, exceptions or flow exceptions.
	ExportPath = "/v1/export"
)

// Limits of the refill routes.
const (
	MaxMovesBatch = 5000 // moves in one MovesBatch
	MaxExportPage = 5000 // rows or moves in one ExportPage
)

// Export parts.
const (
	PartRows  = "rows"
	PartMoves = "moves"
	PartDays  = "days"
	// PartExceptions and PartFlows give back the store's exceptions (those its batches
	// carried: oversells, price and refund exceptions, parked events, seq gaps) and its flow
	// exceptions (FlowsPath), each in the state HQ holds, so that a refilled ledger lists
	// them to the store's manager again. They are additions: a serve from before them
	// answers either part 400 CodeExportInvalid, and a restore goes on without them.
	PartExceptions = "exceptions"
	PartFlows      = "flows"
)

// Stock move reasons a store sends (its ledger's adjustments: opening stock and a manager's
// adjustment or count). The stock moves a ledger derives from its transactions (a sale's
// lines, a restocking refund) are not sent: HQ holds the transactions.
const (
	MoveOpening = "opening"
	MoveAdjust  = "adjust"
)

// StockMove is one of a store's stock adjustments as its ledger booked it: opening stock,
// an adjustment by a delta, or a shelf count (Counted set: the units counted, Delta what
// the count booked against the ledger's quantity then). ID is the adjustment's id at the
// store (the manager's idempotency key), unique per store at HQ; N is its order in the
// store's ledger (1, 2, ... with no holes in a ledger that never lost one), by which the
// uploader sends them and a restore books them again.
type StockMove struct {
	N       int64     `json:"n"`
	ID      string    `json:"id"`
	SKU     string    `json:"sku"`
	Delta   int64     `json:"delta"`
	Reason  string    `json:"reason"`
	At      time.Time `json:"at"`
	Counted *int64    `json:"counted,omitempty"`
}

// MovesBatch is one upload of stock moves: the moves after the last one HQ acknowledged,
// in N order. ID is stable as a Batch's is.
type MovesBatch struct {
	V      int         `json:"v"`
	Store  string      `json:"store"`
	ID     string      `json:"batch_id"`
	Moves  []StockMove `json:"moves"`
	SentAt time.Time   `json:"sent_at"`
}

// MovesReceipt is HQ's answer to stored moves: how many, how many were new (a move HQ held
// with the same content counts as held; with other content the batch is refused,
// CodeMoveConflict), and the highest N HQ holds of the store.
type MovesReceipt struct {
	Store   string    `json:"store"`
	BatchID string    `json:"batch_id"`
	Moves   int       `json:"moves"`
	New     int       `json:"new_moves"`
	MaxN    int64     `json:"max_n"`
	Stored  time.Time `json:"stored_at"`
}

// CodeMoveConflict (409, perr.Conflict): a move's id is stored with other content; nothing
// of the batch is stored.
const CodeMoveConflict = "move_conflict"

// CodeExportInvalid (400, perr.Invalid): the export's query is not one ExportPath takes.
const CodeExportInvalid = "export_invalid"

// ExportDay is a store's declaration of a business day as HQ holds it: its revision and
// how many transactions it lists.
type ExportDay struct {
	BusinessDate string    `json:"business_date"`
	Revision     int64     `json:"revision"`
	ClosedAt     time.Time `json:"closed_at"`
	Txns         int       `json:"txns"`
}

// ExportPage is one page of what HQ holds of a store. Rows come in (terminal, seq) order,
// each as the store sent it: a sale or refund carries its payload (the lines and payments;
// its hash, recomputed by HQ from it on arrival, proves it), except one HQ received before
// it kept payloads (payload null: it cannot be booked from HQ). Moves come in N order.
// Exceptions come in (kind, terminal, seq, sku) byte order, each in the state HQ holds
// (Change the store's change number of it; withdrawn ones too, Withdrawn set), the SKU as
// the store sent it (EscapeSKU); flow exceptions in (terminal, seq) order, each in the
// state HQ holds. More says another page follows: ask again after the page's last row,
// move, exception or flow exception. Dropped lists the business days HQ no longer holds
// (dropped by its retention): a restore cannot take their rows from HQ.
type ExportPage struct {
	Store      string          `json:"store"`
	Part       string          `json:"part"`
	Rows       []Row           `json:"rows,omitempty"`
	Moves      []StockMove     `json:"moves,omitempty"`
	Days       []ExportDay     `json:"days,omitempty"`
	Dropped    []string        `json:"dropped,omitempty"`
	Exceptions []Exception     `json:"exceptions,omitempty"`
	Flows      []FlowException `json:"flow_exceptions,omitempty"`
	More       bool            `json:"more"`
}

// SignExport returns HQ's signature of an export page it answers: hex HMAC-SHA256 with the
// store's secret over "posgate-hq-export/v1\n{store}\n{request target}\n{hex sha256 of the
// body}", where the request target is the path and query the request was sent to. The
// store takes a page only so signed for the request it made: nothing between it and HQ can
// answer in HQ's name, or give one page for another.
func SignExport(secret []byte, store, target string, body []byte) string {
	return mac(secret, "posgate-hq-export/v1\n"+store+"\n"+target+"\n"+ContentHash(body))
}

// VerifyExport reports whether sig is HQ's signature of an export page (constant time).
func VerifyExport(secret []byte, sig, store, target string, body []byte) bool {
	return hmac.Equal([]byte(SignExport(secret, store, target, body)), []byte(sig))
}
