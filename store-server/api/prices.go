package api

import (
	"net/http"

	"github.com/posgate/posgate/store-server/client"
)

// prices lists the price exceptions (GET /v1/price-exceptions?date=&all=).
func (s *Server) prices(r *http.Request) (any, error) {
	date, all, err := exceptionsQuery(r)
	if err != nil {
		return nil, err
	}
	x, err := s.Ledger.PriceExceptions(r.Context(), date, all)
	if x == nil {
		x = []client.PriceException{}
	}
	return client.PriceExceptionsAnswer{Prices: x}, err
}

// resolvePrice resolves one price exception (POST /v1/price-exceptions/resolve).
func (s *Server) resolvePrice(r *http.Request) (any, error) {
	var req client.ResolvePriceRequest
	if err := decode(r, &req); err != nil {
		return nil, err
	}
	x, applied, err := s.Ledger.ResolvePrice(r.Context(), req.Terminal, req.Seq, req.SKU, req.Note)
	if err != nil {
		return nil, err
	}
	return client.ResolvePriceAnswer{Price: x, Applied: applied}, nil
}

// flows lists the flow exceptions (GET /v1/flow-exceptions?date=&all=).
func (s *Server) flows(r *http.Request) (any, error) {
	date, all, err := exceptionsQuery(r)
	if err != nil {
		return nil, err
	}
	x, err := s.Ledger.FlowExceptions(r.Context(), date, all)
	if x == nil {
		x = []client.FlowException{}
	}
	return client.FlowExceptionsAnswer{Flows: x}, err
}

// resolveFlow resolves one flow exception (POST /v1/flow-exceptions/resolve).
func (s *Server) resolveFlow(r *http.Request) (any, error) {
	var req client.ResolveFlowRequest
	if err := decode(r, &req); err != nil {
		return nil, err
	}
	x, applied, err := s.Ledger.ResolveFlow(r.Context(), req.Terminal, req.Seq, req.Note)
	if err != nil {
		return nil, err
	}
	return client.ResolveFlowAnswer{Flow: x, Applied: applied}, nil
}
