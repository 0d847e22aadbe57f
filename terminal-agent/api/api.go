// Package api is the terminal-agent's local HTTP JSON API for the POS app: sales, lines,
// payments, refunds, day close and a supervisor's reopen, status and parked events
// (docs/terminal-api.md). Its request and answer types are those of terminal-agent/client,
// the API's Go client, so that the server and its callers cannot drift apart.
//
// Every state-changing request is committed to the outbox before it is answered; a request
// repeated with the same Idempotency-Key gets the first answer and changes nothing. Bad input
// gets a 4xx with a stable code and stores nothing. Every request but the health check and
// the OpenAPI document carries the install's API token, names the device in its Host
// header, and comes from no web page but those of the origins configured (Access).
package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/posgate/posgate/internal/disk"
	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/perr"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/terminal-agent/client"
	"github.com/posgate/posgate/terminal-agent/outbox"
	"github.com/posgate/posgate/terminal-agent/uplink"
)

// MaxBody is the largest request body the API reads.
const MaxBody = 64 << 10

// Server serves the local API.
type Server struct {
	store *outbox.Store
	up    *uplink.Uplink
	log   *slog.Logger
	now   func() time.Time
	mux   *http.ServeMux
	guard guard
}

// New returns the API server for an outbox and its uplink, open to the callers acc allows
// (it panics on an empty token).
func New(store *outbox.Store, up *uplink.Uplink, log *slog.Logger, acc Access) *Server {
	if log == nil {
		log = slog.Default()
	}
	s := &Server{store: store, up: up, log: log.With("component", "api"), now: store.Config().Now, mux: http.NewServeMux(),
		guard: newGuard(acc)}
	s.mux.HandleFunc("GET /v1/health", s.health)
	s.mux.HandleFunc("GET /v1/openapi.json", s.openapi)
	s.mux.HandleFunc("POST /v1/sales", s.openSale)
	s.mux.HandleFunc("GET /v1/sales/{id}", s.getSale)
	s.mux.HandleFunc("POST /v1/sales/{id}/lines", s.addLine)
	s.mux.HandleFunc("DELETE /v1/sales/{id}/lines/{line}", s.removeLine)
	s.mux.HandleFunc("POST /v1/sales/{id}/payments", s.pay)
	s.mux.HandleFunc("POST /v1/sales/{id}/cancel", s.cancel)
	s.mux.HandleFunc("POST /v1/refunds", s.refund)
	s.mux.HandleFunc("POST /v1/day-close", s.dayClose)
	s.mux.HandleFunc("POST /v1/day-close/reopen", s.dayReopen)
	s.mux.HandleFunc("GET /v1/day-totals", s.dayTotals)
	s.mux.HandleFunc("GET /v1/status", s.status)
	s.mux.HandleFunc("GET /v1/parked", s.parked)
	s.mux.HandleFunc("GET /v1/events/{seq}", s.event)
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, perr.New(perr.NotFound, "route_not_found", "no such endpoint: %s %s", r.Method, r.URL.Path))
	})
	return s
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		status, body = http.StatusInternalServerError, []byte(`{"code":"internal","message":"internal error"}`)
	}
	writeRaw(w, status, body)
}

func writeRaw(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(body)
	w.Write([]byte("\n"))
}

func errorAnswer(err error) (int, []byte) {
	e := perr.As(err)
	msg := e.Message
	if e.Kind == perr.Internal {
		msg = "the terminal had an internal error; try again"
	}
	body, _ := json.Marshal(client.ErrorBody{Code: e.Code, Message: msg, RetryAfterMs: e.RetryAfter.Milliseconds()})
	return perr.HTTPStatus(e.Kind), body
}

func writeError(w http.ResponseWriter, err error) {
	status, body := errorAnswer(err)
	if e := perr.As(err); e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.FormatInt(int64((e.RetryAfter+time.Second-1)/time.Second), 10))
	}
	writeRaw(w, status, body)
}

// readBody reads a JSON request body strictly into v (v nil: the body must be empty or {}).
// Its Content-Type was checked before the route (ServeHTTP).
func readBody(w http.ResponseWriter, r *http.Request, v any) ([]byte, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBody))
	if err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			return nil, perr.New(perr.Invalid, "body_too_large", "the request body is over %d bytes", MaxBody)
		}
		return nil, perr.Wrap(err, perr.Invalid, "body_unreadable", "the request body could not be read")
	}
	if len(bytes.TrimSpace(body)) == 0 && v == nil {
		return body, nil
	}
	if v == nil {
		v = &struct{}{}
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return nil, jsonError(err)
	}
	if dec.More() {
		return nil, perr.New(perr.Invalid, "json_syntax", "the request body has data after the JSON object")
	}
	return body, nil
}

func jsonError(err error) error {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	var pe *perr.Error
	switch {
	case errors.As(err, &pe):
		return pe
	case errors.As(err, &te):
		return perr.New(perr.Invalid, "json_type", "field %q has the wrong type (want %s)", te.Field, te.Type)
	case errors.As(err, &se), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return perr.New(perr.Invalid, "json_syntax", "the request body is not valid JSON")
	case strings.HasPrefix(err.Error(), "json: unknown field"):
		return perr.New(perr.Invalid, "json_unknown_field", "%s", strings.TrimPrefix(err.Error(), "json: "))
	default:
		return perr.New(perr.Invalid, "json_syntax", "the request body is not valid JSON: %v", err)
	}
}

// mutation is one state-changing request: apply runs inside the outbox transaction and
// returns what it acted on; render builds the answer from the stored state.
type mutation struct {
	apply  func(*outbox.Tx) (ref string, err error)
	render func(ctx context.Context, ref string, ev *client.EventRef) (int, any, error)
}

// mutate runs a mutation: commit (with the client token), wait for the store's verdict on a
// live event, answer, and record the answer for retries.
func (s *Server) mutate(w http.ResponseWriter, r *http.Request, body []byte, m mutation) {
	ctx := r.Context()
	token := r.Header.Get("Idempotency-Key")
	fp := outbox.Fingerprint(r.Method, r.URL.Path, body)
	mode := s.up.Mode(ctx)
	ref, seq, prior, err := s.store.Do(ctx, token, fp, mode, m.apply)
	if err != nil {
		writeError(w, err)
		return
	}
	var verdict uplink.Verdict
	if prior != nil {
		if prior.Status != 0 {
			writeRaw(w, prior.Status, prior.Body)
			return
		}
		// Committed before, never answered (the agent stopped): answer from the stored state.
		ref, seq = prior.Ref, prior.Seq
		if seq > 0 {
			verdict = s.up.Await(ctx, seq)
		}
	} else if seq > 0 {
		s.up.Notify()
		if mode.Live {
			verdict = s.up.Await(ctx, seq)
		}
	}
	// The step is committed (or refused and undone): its answer no longer depends on the
	// client, which may have gone meanwhile.
	ctx = context.WithoutCancel(ctx)
	status, answer := s.answer(ctx, ref, seq, verdict, m.render)
	switch {
	case verdict.Refused && verdict.Ack.Status == wire.AckRateLimited:
		// The store said "not now" and the step was undone: the same request, sent again
		// with the same key after retry_after_ms, is a new attempt, not a replay.
		err = s.store.Forget(ctx, token)
	case status >= http.StatusInternalServerError:
		// Not recorded: a retry with the same key answers again from the stored state.
	default:
		err = s.store.Answer(ctx, token, status, answer)
	}
	if err != nil {
		s.log.Error("record answer", "err", err)
	}
	writeRaw(w, status, answer)
}

func (s *Server) answer(ctx context.Context, ref string, seq int64, v uplink.Verdict,
	render func(context.Context, string, *client.EventRef) (int, any, error)) (int, []byte) {
	if v.Refused {
		a := v.Ack
		e := perr.New(perr.Refused, a.Code, "%s", a.Message)
		if a.Status == wire.AckRateLimited {
			e.Kind, e.RetryAfter = perr.RateLimited, time.Duration(a.RetryAfterMs)*time.Millisecond
			if e.Code == "" {
				e.Code = "rate_limited"
			}
		}
		if e.Message == "" {
			e.Message = "the store refused this step"
		}
		return errorAnswer(e)
	}
	var ev *client.EventRef
	if seq > 0 {
		ev = &client.EventRef{Seq: seq, Key: wire.Key(s.store.Config().Terminal, seq), Offline: v.Ack == nil || v.Parked,
			Parked: v.Parked}
		if v.Ack != nil && v.Ack.Result != nil {
			ev.FlowNo = v.Ack.Result.FlowNo
		}
	}
	status, out, err := render(ctx, ref, ev)
	if err != nil {
		return errorAnswer(err)
	}
	body, err := json.Marshal(out)
	if err != nil {
		return errorAnswer(err)
	}
	return status, body
}

func (s *Server) renderSale(status int) func(context.Context, string, *client.EventRef) (int, any, error) {
	return func(ctx context.Context, ref string, ev *client.EventRef) (int, any, error) {
		id, line, _ := strings.Cut(ref, "#")
		sale, err := s.store.Sale(ctx, id)
		if err != nil {
			return 0, nil, err
		}
		n, _ := strconv.Atoi(line)
		return status, client.SaleAnswer{Sale: sale, Event: ev, Line: n}, nil
	}
}

func (s *Server) openSale(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(w, r, nil)
	if err != nil {
		writeError(w, err)
		return
	}
	s.mutate(w, r, body, mutation{
		apply:  func(t *outbox.Tx) (string, error) { return t.OpenSale() },
		render: s.renderSale(http.StatusCreated),
	})
}

func (s *Server) getSale(w http.ResponseWriter, r *http.Request) {
	sale, err := s.store.Sale(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, client.SaleAnswer{Sale: sale})
}

func (s *Server) addLine(w http.ResponseWriter, r *http.Request) {
	var req client.AddLineRequest
	body, err := readBody(w, r, &req)
	if err != nil {
		writeError(w, err)
		return
	}
	id := r.PathValue("id")
	s.mutate(w, r, body, mutation{
		apply: func(t *outbox.Tx) (string, error) {
			line, err := t.AddLine(id, req.SKU, req.Barcode, req.Qty)
			return id + "#" + strconv.Itoa(line), err
		},
		render: s.renderSale(http.StatusOK),
	})
}

func (s *Server) removeLine(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(w, r, nil)
	if err != nil {
		writeError(w, err)
		return
	}
	id := r.PathValue("id")
	line, err := strconv.Atoi(r.PathValue("line"))
	if err != nil || line <= 0 {
		writeError(w, perr.New(perr.Invalid, "line_invalid", "line %q is not a positive number", r.PathValue("line")))
		return
	}
	s.mutate(w, r, body, mutation{
		apply:  func(t *outbox.Tx) (string, error) { return id, t.RemoveLine(id, line) },
		render: s.renderSale(http.StatusOK),
	})
}

func (s *Server) pay(w http.ResponseWriter, r *http.Request) {
	var req client.PayRequest
	body, err := readBody(w, r, &req)
	if err != nil {
		writeError(w, err)
		return
	}
	amount, err := money.ParsePositive(req.Amount)
	if err != nil {
		writeError(w, err)
		return
	}
	id := r.PathValue("id")
	s.settle(r.Context(), id)
	s.mutate(w, r, body, mutation{
		apply:  func(t *outbox.Tx) (string, error) { return id, t.Pay(id, req.Method, amount, req.Reference) },
		render: s.renderSale(http.StatusOK),
	})
}

func (s *Server) cancel(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(w, r, nil)
	if err != nil {
		writeError(w, err)
		return
	}
	id := r.PathValue("id")
	s.mutate(w, r, body, mutation{
		apply:  func(t *outbox.Tx) (string, error) { return id, t.Cancel(id) },
		render: s.renderSale(http.StatusOK),
	})
}

// settle waits for the store's verdict on each step of the sale sent live that has none yet
// (the POS app took a payment while a scan waited for its verdict), at most the verdict
// timeout each: past it the step is decided locally, and the store can no longer refuse
// it. A payment or refund is built on the sale only once nothing under it can be undone
// (outbox.CodeVerdictPending otherwise).
func (s *Server) settle(ctx context.Context, saleID string) {
	seqs, err := s.store.Undecided(ctx, saleID)
	if err != nil {
		return // the step's own transaction looks again
	}
	for _, seq := range seqs {
		s.up.Await(ctx, seq)
	}
}

func (s *Server) refund(w http.ResponseWriter, r *http.Request) {
	var req client.RefundRequest
	body, err := readBody(w, r, &req)
	if err != nil {
		writeError(w, err)
		return
	}
	if req.SaleID == "" {
		writeError(w, perr.New(perr.Invalid, "sale_id_required", "name the sale to refund"))
		return
	}
	restock := req.Restock == nil || *req.Restock
	approvedBy, err := s.approve(r.Context(), req.Supervisor)
	if err != nil {
		writeError(w, err)
		return
	}
	s.settle(r.Context(), req.SaleID)
	s.mutate(w, r, withoutPIN(body, &req, &req.Supervisor), mutation{
		apply: func(t *outbox.Tx) (string, error) {
			return t.Refund(req.SaleID, req.Lines, req.Method, req.Reference, restock, approvedBy)
		},
		render: func(ctx context.Context, ref string, ev *client.EventRef) (int, any, error) {
			rf, err := s.store.Refund(ctx, ref)
			return http.StatusCreated, client.RefundAnswer{Refund: rf, Event: ev}, err
		},
	})
}

func (s *Server) dayClose(w http.ResponseWriter, r *http.Request) {
	var req client.DayCloseRequest
	body, err := readBody(w, r, &req)
	if err != nil {
		writeError(w, err)
		return
	}
	date := req.BusinessDate
	var noDay error // refused in the transaction: a retry of a close already made is answered first
	if date == "" {
		// The one open day, not today's date, which just after midnight is a new day with
		// nothing, or little, on it yet (outbox.DayToClose).
		date, noDay = s.store.DayToClose(r.Context(), s.now())
	}
	// A sale or refund still waiting for the store's live verdict is decided first: a close
	// that counted it would be wrong once the store refused it.
	if seqs, err := s.store.UndecidedSteps(r.Context()); err == nil {
		for _, seq := range seqs {
			s.up.Await(r.Context(), seq)
		}
	}
	var totals wire.DayClosePayload
	s.mutate(w, r, body, mutation{
		apply: func(t *outbox.Tx) (string, error) {
			if noDay != nil {
				return "", noDay
			}
			var err error
			totals, err = t.DayClose(date)
			return date, err
		},
		render: func(ctx context.Context, ref string, ev *client.EventRef) (int, any, error) {
			if totals.BusinessDate == "" {
				// A retry of a close committed but not answered (the agent stopped, or the
				// first click still waits): the totals queued for the store, not the day's
				// as it stands now, which later sales may have changed.
				var err error
				if ev != nil {
					totals, err = s.store.DayClosed(ctx, ev.Seq)
				}
				if ev == nil || perr.KindOf(err) == perr.NotFound { // pruned since it synced
					totals, err = s.store.DayTotals(ctx, ref)
				}
				if err != nil {
					return 0, nil, err
				}
			}
			return http.StatusOK, client.DayCloseAnswer{Totals: totals, Event: ev}, nil
		},
	})
}

func (s *Server) dayReopen(w http.ResponseWriter, r *http.Request) {
	var req client.DayReopenRequest
	body, err := readBody(w, r, &req)
	if err != nil {
		writeError(w, err)
		return
	}
	if req.BusinessDate == "" {
		// Named, never guessed: the wrong day reopened would take trade it should not.
		writeError(w, perr.New(perr.Invalid, "business_date_required", "name the business day to reopen (business_date)"))
		return
	}
	if req.Supervisor == nil {
		writeError(w, perr.New(perr.Forbidden, outbox.CodeSupervisorRequired, "a day's reopen needs a supervisor's name and PIN"))
		return
	}
	supervisor, err := s.approve(r.Context(), req.Supervisor)
	if err != nil {
		writeError(w, err)
		return
	}
	s.mutate(w, r, withoutPIN(body, &req, &req.Supervisor), mutation{
		apply: func(t *outbox.Tx) (string, error) { return t.DayReopen(req.BusinessDate, req.Reason, supervisor) },
		render: func(ctx context.Context, ref string, _ *client.EventRef) (int, any, error) {
			ro, err := s.store.DayReopenByRef(ctx, ref)
			return http.StatusOK, client.DayReopenAnswer{Reopen: ro}, err
		},
	})
}

func (s *Server) dayTotals(w http.ResponseWriter, r *http.Request) {
	date := r.URL.Query().Get("date")
	if date == "" {
		date = s.store.BusinessDate(s.now())
	}
	if _, err := time.Parse(wire.BusinessDate, date); err != nil {
		writeError(w, perr.New(perr.Invalid, "business_date_invalid", "business date %q is not YYYY-MM-DD", date))
		return
	}
	t, err := s.store.DayTotals(r.Context(), date)
	if err != nil {
		writeError(w, err)
		return
	}
	a := client.DayTotalsAnswer{DayClosePayload: t}
	if a.ClosedSeq, err = s.store.DayCloseSeq(r.Context(), date); err != nil {
		writeError(w, err)
		return
	}
	if a.Reopens, err = s.store.DayReopens(r.Context(), date); err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, a)
}

func (s *Server) status(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	b, err := s.store.Backlog(ctx)
	if err != nil {
		writeError(w, err)
		return
	}
	cv, err := s.store.CatalogVersion(ctx)
	if err != nil {
		writeError(w, err)
		return
	}
	refused, err := s.store.KV(ctx, outbox.KVCatalogsRefused)
	if err != nil {
		writeError(w, err)
		return
	}
	old, err := s.store.OldOpenDays(ctx, s.now())
	if err != nil {
		writeError(w, err)
		return
	}
	apart, err := s.store.DatesApart(ctx)
	if err != nil {
		writeError(w, err)
		return
	}
	set, _, err := s.store.Settings(ctx)
	if err != nil {
		writeError(w, err)
		return
	}
	st := s.up.Status()
	cfg := s.store.Config()
	a := client.StatusAnswer{Store: cfg.Store, Terminal: cfg.Terminal, Online: st.Online, Backlog: b.Count,
		OldestSeq: b.OldestSeq, StoredCard: b.StoredCard, Parked: b.Parked, InFlight: st.InFlight, CatalogVersion: cv,
		CatalogsRefused: refused, SettingsVersion: set.Version, OldOpenDays: old, DatesApart: apart}
	if !b.OldestAt.IsZero() {
		a.OldestAgeMs = max(0, s.now().Sub(b.OldestAt).Milliseconds())
	}
	if !st.OfflineSince.IsZero() {
		a.OfflineSince = &st.OfflineSince
	}
	if !st.LastAck.IsZero() {
		a.LastAckAt = &st.LastAck
	}
	if sp, err := disk.Of(s.store.Dir()); err == nil {
		a.DiskFree = &sp.Free
	}
	held, err := s.store.Held(ctx)
	if err != nil {
		writeError(w, err)
		return
	}
	a.Held, a.HQThrough = held.Events, held.HQThrough
	if !held.Oldest.IsZero() {
		a.HeldSince = &held.Oldest
	}
	writeJSON(w, http.StatusOK, a)
}

func (s *Server) parked(w http.ResponseWriter, r *http.Request) {
	p, err := s.store.Parked(r.Context(), 1000)
	if err != nil {
		writeError(w, err)
		return
	}
	if p == nil {
		p = []client.Parked{}
	}
	writeJSON(w, http.StatusOK, client.ParkedAnswer{Parked: p})
}

func (s *Server) event(w http.ResponseWriter, r *http.Request) {
	seq, err := strconv.ParseInt(r.PathValue("seq"), 10, 64)
	if err != nil || seq <= 0 {
		writeError(w, perr.New(perr.Invalid, "seq_invalid", "seq %q is not a positive number", r.PathValue("seq")))
		return
	}
	st, err := s.store.EventState(r.Context(), seq)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}
