package hqwire

import "time"

// A store's flow exceptions go to HQ on a route of their own (FlowsPath), beside the
// batches, as its stock moves do (MovesPath): a flow exception is a replayed sale or refund
// whose receipt prints a flow number the store had meanwhile given to another transaction of
// the date, so that two customers' receipts carry one number. They do not travel in a
// batch's Exceptions: a v0.1.0 serve refuses a batch holding an exception kind it does not
// know, and would then refuse the store's rows with it. A v0.1.0 serve answers FlowsPath 404
// not_found; the uploader keeps the flow exceptions and tries them again later.

// FlowsPath takes a signed FlowBatch (POST, as a batch: Idempotency-Key is its id); HQ
// answers a FlowReceipt signed as a batch's receipt (SignReceipt).
const FlowsPath = "/v1/flow-exceptions"

// MaxFlowBatch bounds the flow exceptions in one FlowBatch.
const MaxFlowBatch = 1000

// Kinds of the transaction a flow exception is of.
const (
	FlowSale   = "sale"
	FlowRefund = "refund"
)

// FlowException is the state of one flow exception as the store's ledger holds it after its
// change number Change: booked, or resolved by the store's manager with a note of how the two
// receipts were told apart. Its key at HQ is (store, Terminal, Seq), the replayed event's;
// HQ keeps, per key, the state with the highest Change. Flow exceptions are never withdrawn.
type FlowException struct {
	Change   int64  `json:"change"` // the ledger's change number, > 0
	Terminal string `json:"terminal"`
	Seq      int64  `json:"seq"`
	Kind     string `json:"kind"` // FlowSale or FlowRefund
	// FlowGiven is the number the store gave the event first (the customer's receipt
	// prints it); FlowBooked the one the ledger holds the event under (the date's next).
	FlowGiven  int64 `json:"flow_given"`
	FlowBooked int64 `json:"flow_booked"`
	// HeldBy is the transaction (terminal:seq) that held FlowGiven in the ledger when the
	// replay was booked (the store keeps it after the day's events are archived), empty if
	// none is known: the other customer's receipt.
	HeldBy       string    `json:"held_by,omitempty"`
	At           time.Time `json:"at"` // the event's business time
	BusinessDate string    `json:"business_date"`
	// Resolved says the store's manager dealt with it: when, and how.
	Resolved   bool      `json:"resolved,omitempty"`
	ResolvedAt time.Time `json:"resolved_at,omitzero"`
	Resolution string    `json:"resolution,omitempty"`
}

// FlowBatch is one upload of flow exception states: those the ledger changed after the last
// change HQ acknowledged, by Change. ID is stable as a Batch's is.
type FlowBatch struct {
	V          int             `json:"v"`
	Store      string          `json:"store"`
	ID         string          `json:"batch_id"`
	Exceptions []FlowException `json:"flow_exceptions"`
	SentAt     time.Time       `json:"sent_at"`
}

// FlowReceipt is HQ's answer to stored flow exceptions: how many the batch held and how many
// states HQ stored (one it already held at the same or a higher change number is left as it
// was and not counted).
type FlowReceipt struct {
	Store      string    `json:"store"`
	BatchID    string    `json:"batch_id"`
	Exceptions int       `json:"flow_exceptions"`
	Stored     int       `json:"stored"`
	StoredAt   time.Time `json:"stored_at"`
}
