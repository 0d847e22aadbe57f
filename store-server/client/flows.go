package client

import (
	"context"
	"net/http"
	"time"
)

// FlowException is a sale or refund a till sent again after the store lost it (catch-up,
// docs/store-server.md "Backup and restore") whose flow number the store had given again
// meanwhile (in degrade mode, or on a Redis that lost its counters too): the customer's
// receipt prints FlowGiven, which HeldBy (terminal:seq) holds in the ledger; the ledger
// booked this event under FlowBooked, the date's next number. The sale stands.
type FlowException struct {
	Terminal string `json:"terminal"`
	Seq      int64  `json:"seq"`
	Kind     string `json:"kind"` // sale or refund
	// FlowGiven is the number the store gave the event first (its receipt's), FlowBooked the
	// one the ledger holds it under.
	FlowGiven  int64 `json:"flow_given"`
	FlowBooked int64 `json:"flow_booked"`
	// HeldBy is the event (terminal:seq) that held FlowGiven in the ledger when the replay was
	// booked (empty in the rare flow exception booked before the ledger kept it, whose day
	// was archived first).
	HeldBy       string    `json:"held_by,omitempty"`
	At           time.Time `json:"at"`
	BusinessDate string    `json:"business_date"`
	// Resolved says a manager dealt with it: when, and how.
	Resolved   bool      `json:"resolved"`
	ResolvedAt time.Time `json:"resolved_at,omitzero"`
	Resolution string    `json:"resolution,omitempty"`
}

// FlowExceptionsAnswer is the answer of GET /v1/flow-exceptions, by date, terminal and seq.
type FlowExceptionsAnswer struct {
	Flows []FlowException `json:"flow_exceptions"`
}

// ResolveFlowRequest resolves one flow exception with a note (POST
// /v1/flow-exceptions/resolve).
type ResolveFlowRequest struct {
	Terminal string `json:"terminal"`
	Seq      int64  `json:"seq"`
	Note     string `json:"note"`
}

// ResolveFlowAnswer is the exception as resolved, and whether this request resolved it
// (false: an earlier one did, and its resolution stands).
type ResolveFlowAnswer struct {
	Flow    FlowException `json:"flow_exception"`
	Applied bool          `json:"applied"`
}

// FlowExceptions lists the flow exceptions of a business date (YYYY-MM-DD; empty: every
// date), the open ones, or with all the resolved ones too (GET /v1/flow-exceptions).
func (c *Client) FlowExceptions(ctx context.Context, date string, all bool) (FlowExceptionsAnswer, error) {
	var a FlowExceptionsAnswer
	return a, c.do(ctx, http.MethodGet, "/v1/flow-exceptions"+query(date, all), nil, &a)
}

// ResolveFlow closes one flow exception with a note (POST /v1/flow-exceptions/resolve).
func (c *Client) ResolveFlow(ctx context.Context, req ResolveFlowRequest) (ResolveFlowAnswer, error) {
	var a ResolveFlowAnswer
	return a, c.do(ctx, http.MethodPost, "/v1/flow-exceptions/resolve", jsonBody(req), &a)
}
