package api

import (
	"context"
	"encoding/json"

	"github.com/posgate/posgate/terminal-agent/client"
)

// approve checks the PIN of the supervisor a request names (none: nil) against the store's
// settings, and returns who approved ("" for none).
func (s *Server) approve(ctx context.Context, sv *client.Supervisor) (string, error) {
	if sv == nil {
		return "", nil
	}
	return s.store.Approve(ctx, sv.Name, sv.PIN)
}

// withoutPIN is the body a request carrying a supervisor's PIN is fingerprinted by for its
// Idempotency-Key: the request as decoded (*req, which sv points into) with the PIN left
// out. The fingerprint is kept in the outbox, and a PIN of a few digits would be found
// from its hash at once. A request without a supervisor keeps its body as sent.
func withoutPIN[T any](body []byte, req *T, sv **client.Supervisor) []byte {
	if *sv == nil {
		return body
	}
	named := **sv
	named.PIN = ""
	saved := *sv
	*sv = &named
	b, err := json.Marshal(req)
	*sv = saved
	if err != nil {
		return nil // never: the request decoded from JSON
	}
	return b
}
