// Package serve is HQ's receiver (hq-sync serve): the HTTP handler that takes a store's
// signed upload, checks it strictly and stores it idempotently through hqstore.Storage.
//
// POST /v1/batches takes one hqwire.Batch. The request must carry the store's id, a Unix
// timestamp within MaxClockSkew of HQ's clock, the batch id as Idempotency-Key and the
// HMAC-SHA256 signature of hqwire.Sign over the exact body. The path signed is "/v1/batches"
// or, for a handler mounted under a prefix with http.StripPrefix, the full path the
// request was sent to ("/hq/v1/batches"). A stored batch, or a replay of it, is answered 200 with
// the hqwire.Receipt; everything else is answered with an RFC 9457 problem document
// (application/problem+json) whose "code" is one of hqwire's Code constants, and changes
// nothing.
//
// The handler never stores a batch it has not fully checked, never trusts a field the
// signature does not cover, and never logs a client's mistake as an error.
package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	segjson "github.com/segmentio/encoding/json"

	"github.com/posgate/posgate/hq-sync/hqstore"
	"github.com/posgate/posgate/internal/guard"
	"github.com/posgate/posgate/internal/hqwire"
	"github.com/posgate/posgate/internal/perr"
	"github.com/posgate/posgate/internal/refusals"
)

// Paths the handler serves.
const (
	BatchesPath = "/v1/batches" // POST: one batch; also the path every signature covers
	HealthPath  = "/healthz"    // GET: 200 {"status":"ok"}
)

// statuses is the one table from codes to HTTP statuses. A batch id reused with other
// content is 422 (IETF Idempotency-Key draft, as in invariant 2). A row conflict is 409:
// the batch itself is new and well formed but clashes with a row HQ already holds, a
// conflict with the resource's state that the store must look into; like 422 it must not
// be retried as is.
var statuses = map[string]int{
	hqwire.CodeUnauthorized:           http.StatusUnauthorized,
	hqwire.CodeTooManyFailures:        http.StatusTooManyRequests,
	hqwire.CodeTimestampSkew:          http.StatusUnauthorized,
	hqwire.CodeContentHashMismatch:    http.StatusBadRequest,
	hqwire.CodeStoreMismatch:          http.StatusForbidden,
	hqwire.CodeIdempotencyKeyMismatch: http.StatusBadRequest,
	hqwire.CodeBodyTooLarge:           http.StatusRequestEntityTooLarge,
	hqwire.CodeJSONInvalid:            http.StatusBadRequest,
	hqwire.CodeBodyIncomplete:         http.StatusRequestTimeout,
	hqwire.CodeBatchInvalid:           http.StatusBadRequest,
	hqwire.CodeBatchIDReused:          http.StatusUnprocessableEntity,
	hqwire.CodeRowConflict:            http.StatusConflict,
	hqwire.CodeMoveConflict:           http.StatusConflict,
	hqwire.CodeExportInvalid:          http.StatusBadRequest,
	hqwire.CodeMethodNotAllowed:       http.StatusMethodNotAllowed,
	hqwire.CodeNotFound:               http.StatusNotFound,
	hqwire.CodeInternal:               http.StatusInternalServerError,
}

// titles are the problem documents' short, fixed summaries.
var titles = map[string]string{
	hqwire.CodeUnauthorized:           "Not signed by a store HQ knows",
	hqwire.CodeTooManyFailures:        "Too many failed attempts",
	hqwire.CodeTimestampSkew:          "Request timestamp out of range",
	hqwire.CodeContentHashMismatch:    "Body is not the one signed",
	hqwire.CodeStoreMismatch:          "Batch of another store",
	hqwire.CodeIdempotencyKeyMismatch: "Idempotency-Key does not match the batch id",
	hqwire.CodeBodyTooLarge:           "Request body too large",
	hqwire.CodeJSONInvalid:            "Malformed batch JSON",
	hqwire.CodeBodyIncomplete:         "Request body incomplete",
	hqwire.CodeBatchInvalid:           "Invalid batch",
	hqwire.CodeBatchIDReused:          "Batch id reused with other content",
	hqwire.CodeRowConflict:            "Row conflicts with a stored row",
	hqwire.CodeMoveConflict:           "Stock move conflicts with a stored move",
	hqwire.CodeExportInvalid:          "Invalid export request",
	hqwire.CodeMethodNotAllowed:       "Method not allowed",
	hqwire.CodeNotFound:               "Not found",
	hqwire.CodeInternal:               "Internal error",
}

// Status returns the HTTP status of an answer with code: the table above, or the status
// of kind for a code it does not list.
func Status(code string, kind perr.Kind) int {
	if s, ok := statuses[code]; ok {
		return s
	}
	return perr.HTTPStatus(kind)
}

// ProblemTypePrefix prefixes the code in a problem document's "type".
const ProblemTypePrefix = "urn:posgate:hq:problem:"

// Problem is an error answer (RFC 9457).
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Code   string `json:"code"`
	Detail string `json:"detail"`
}

// Options configures the handler. The zero value is usable.
type Options struct {
	// Now is HQ's clock, for the timestamp check and the receipt; nil means time.Now.
	Now func() time.Time
	// Logger receives one line per request refused or stored; nil discards them.
	Logger *slog.Logger
	// MaxClockSkew bounds |HQ's clock - X-Posgate-Timestamp|; 0 means hqwire.MaxClockSkew.
	MaxClockSkew time.Duration
	// Metrics, if not nil, gets the handler's counters (see newMetrics).
	Metrics prometheus.Registerer
	// Guard counts failed authentications per client address and per store; nil means
	// five free failures, then a wait from 1 s doubling to 5 minutes.
	Guard *guard.Guard
}

// metrics count what HQ did with each store's uploads, since the process started. The
// store label is a known store's id, or "unknown" (anyone can send any header).
type metrics struct {
	batches *prometheus.CounterVec // store, result: stored, duplicate, or the refusal's code
	rows    *prometheus.CounterVec // store: rows new to HQ
	exports *prometheus.CounterVec // store, part: export pages answered
	flows   *prometheus.CounterVec // store: flow exception states stored
}

func newMetrics(reg prometheus.Registerer, h *handler) *metrics {
	m := &metrics{
		batches: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "posgate", Subsystem: "hq", Name: "batches_total",
			Help: "Upload requests by store and result (stored, duplicate, or the refusal's code)."}, []string{"store", "result"}),
		rows: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "posgate", Subsystem: "hq", Name: "rows_total",
			Help: "Rows new to HQ, by store."}, []string{"store"}),
		exports: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "posgate", Subsystem: "hq", Name: "export_pages_total",
			Help: "Pages of a store's export (GET /v1/export: a store refilling its ledger) answered, by store and part (rows, moves, days)."},
			[]string{"store", "part"}),
		flows: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "posgate", Subsystem: "hq", Name: "flow_exceptions_total",
			Help: "Flow exception states stored (a store's receipt flow number given twice, booked or resolved), by store."},
			[]string{"store"}),
	}
	reg.MustRegister(m.batches, m.rows, m.exports, m.flows, &lastBatches{h: h}, h.refused)
	return m
}

var lastBatchDesc = prometheus.NewDesc("posgate_hq_last_batch_timestamp_seconds",
	"When HQ last stored a new batch of the store (from the database: right after a restart, "+
		"and the same from every serve process sharing it).", []string{"store"}, nil)

// lastBatches reads each known store's last batch time from the database when scraped. A
// store that has never uploaded has no series. A database that cannot answer fails the
// scrape (so an alert on a quiet store cannot resolve itself while HQ's database is down).
type lastBatches struct{ h *handler }

func (c *lastBatches) Describe(ch chan<- *prometheus.Desc) { ch <- lastBatchDesc }

func (c *lastBatches) Collect(ch chan<- prometheus.Metric) {
	stores := slices.Sorted(maps.Keys(c.h.secrets))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	last, err := c.h.store.LastBatches(ctx, stores)
	if err != nil {
		c.h.log.Warn("metrics: the stores' last batches", "err", err)
		ch <- prometheus.NewInvalidMetric(lastBatchDesc, err)
		return
	}
	for st, t := range last {
		ch <- prometheus.MustNewConstMetric(lastBatchDesc, prometheus.GaugeValue, float64(t.UnixMilli())/1000, st)
	}
}

type handler struct {
	store   hqstore.Storage
	secrets map[string][]byte
	now     func() time.Time
	log     *slog.Logger
	skew    time.Duration
	met     *metrics // nil: none
	guard   *guard.Guard
	nobody  []byte         // the secret an unknown store's signature is checked against
	refused *refusals.Book // every refusal, counted and logged by code
}

// label is the store label of a request from store.
func (h *handler) label(store string) string {
	if _, ok := h.secrets[store]; ok {
		return store
	}
	return "unknown"
}

// count records one answered upload.
func (h *handler) count(store, result string) {
	if h.met != nil {
		h.met.batches.WithLabelValues(h.label(store), result).Inc()
	}
}

// New returns HQ's handler storing into store. secrets holds each known store's signing
// secret (a store with an empty secret is unknown); New keeps its own copy.
func New(store hqstore.Storage, secrets map[string][]byte, opts Options) http.Handler {
	h := &handler{store: store, secrets: make(map[string][]byte, len(secrets)), now: opts.Now,
		log: opts.Logger, skew: opts.MaxClockSkew, guard: opts.Guard, nobody: newNobody()}
	for id, s := range secrets {
		if len(s) > 0 {
			h.secrets[id] = bytes.Clone(s)
		}
	}
	if h.now == nil {
		h.now = time.Now
	}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	if h.guard == nil {
		h.guard = defaultGuard(h.now)
	}
	h.log = h.log.With("component", "hq-serve")
	h.refused = refusals.New(h.log, refusals.DefaultEvery, refusals.HQMetric)
	if h.skew <= 0 {
		h.skew = hqwire.MaxClockSkew
	}
	if opts.Metrics != nil {
		h.met = newMetrics(opts.Metrics, h)
	}
	return h
}

// ServeHTTP implements http.Handler.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case BatchesPath:
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			h.fail(w, r, "", perr.New(perr.Invalid, hqwire.CodeMethodNotAllowed, "%s %s: use POST", r.Method, BatchesPath))
			return
		}
		h.postBatch(w, r)
	case hqwire.MovesPath, hqwire.ExportPath:
		h.refill(w, r)
	case hqwire.FlowsPath:
		h.postFlows(w, r)
	case HealthPath:
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			h.fail(w, r, "", perr.New(perr.Invalid, hqwire.CodeMethodNotAllowed, "%s %s: use GET", r.Method, HealthPath))
			return
		}
		writeJSON(w, http.StatusOK, "application/json", map[string]string{"status": "ok"})
	default:
		h.fail(w, r, "", perr.New(perr.NotFound, hqwire.CodeNotFound, "no such path %q", r.URL.Path))
	}
}

// postBatch checks, in order: the signature from the headers (authenticate: a known store,
// the timestamp), the body's size and that it is the body signed, strict JSON, store and
// idempotency key against the body, the batch's rules; then stores, and answers a receipt
// signed with the store's secret.
func (h *handler) postBatch(w http.ResponseWriter, r *http.Request) {
	store, secret, err := h.authenticate(r)
	if err != nil {
		h.fail(w, r, store, err)
		return
	}
	body, err := readBody(w, r)
	if err != nil {
		h.fail(w, r, store, err)
		return
	}
	contentHash := hqwire.ContentHash(body) // signed, and the batch's identity in storage
	if contentHash != r.Header.Get(hqwire.HeaderContentHash) {
		h.fail(w, r, store, perr.New(perr.Invalid, hqwire.CodeContentHashMismatch,
			"the body's SHA-256 is not the %s the request was signed with", hqwire.HeaderContentHash))
		return
	}
	key, now := r.Header.Get(hqwire.HeaderIdemKey), h.now()
	b, err := DecodeBatch(body)
	if err != nil {
		h.fail(w, r, store, err)
		return
	}
	if b.Store != store {
		h.fail(w, r, store, perr.New(perr.Unauthorized, hqwire.CodeStoreMismatch,
			"the batch is of store %q but was signed by store %s", clip(b.Store), store))
		return
	}
	if key != b.ID {
		h.fail(w, r, store, perr.New(perr.Invalid, hqwire.CodeIdempotencyKeyMismatch,
			"%s %q is not the batch_id %q", hqwire.HeaderIdemKey, clip(key), clip(b.ID)))
		return
	}
	if err := Validate(b); err != nil {
		h.fail(w, r, store, err)
		return
	}
	rc, err := h.store.PutBatch(r.Context(), b, contentHash, now)
	if err != nil {
		h.fail(w, r, store, err)
		return
	}
	h.log.Info("batch stored", "store", store, "batch", b.ID, "rows", rc.Rows, "new_rows", rc.New,
		"days", rc.Days, "day_parts", rc.DayParts, "parts_dropped", len(rc.PartsDropped), "exceptions", rc.Exceptions,
		"duplicate", rc.Duplicate)
	if h.met != nil {
		if rc.Duplicate { // the original receipt: its new rows were counted then
			h.count(store, "duplicate")
		} else {
			h.count(store, "stored")
			h.met.rows.WithLabelValues(store).Add(float64(rc.New))
		}
	}
	writeReceipt(w, secret, store, b.ID, rc)
}

// writeReceipt answers rc signed with the store's secret (hqwire.SignReceipt).
func writeReceipt(w http.ResponseWriter, secret []byte, store, batchID string, rc hqwire.Receipt) {
	body, err := json.Marshal(rc)
	if err != nil { // a receipt always marshals
		writeJSON(w, http.StatusInternalServerError, "application/json", map[string]string{"code": hqwire.CodeInternal})
		return
	}
	body = append(body, '\n')
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set(hqwire.HeaderSignature, hqwire.SignReceipt(secret, store, batchID, body))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}

// readBody reads the whole body, refusing more than hqwire.MaxBatchBytes.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	tooLarge := func() error {
		return perr.New(perr.Invalid, hqwire.CodeBodyTooLarge, "the body is over the %d byte limit", hqwire.MaxBatchBytes)
	}
	if r.ContentLength > hqwire.MaxBatchBytes {
		return nil, tooLarge()
	}
	// Read into a buffer of the announced size (and one byte more, to see the end): a
	// batch of megabytes read into a growing one was copied and cleared over and over.
	var buf bytes.Buffer
	if r.ContentLength > 0 {
		buf.Grow(int(r.ContentLength) + 1)
	}
	_, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, hqwire.MaxBatchBytes))
	body := buf.Bytes()
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return nil, tooLarge()
	case err != nil:
		// The connection was too slow (the server's read timeout) or broke: nothing is
		// wrong with the batch, and the same batch sent again may arrive whole. 408 tells
		// the uploader to retry, where a 400 would hold the batch as refused.
		return nil, perr.Wrap(err, perr.Invalid, hqwire.CodeBodyIncomplete, "the body did not arrive whole: %v", err)
	}
	return body, nil
}

// DecodeBatch strictly decodes one batch: exactly one JSON object, no unknown field at
// any depth, no trailing data, money as "12.30" strings. Errors are perr.Invalid with code
// json_invalid.
//
// segmentio/encoding/json decodes first: a batch of 5,000 sales took a third of the time
// encoding/json took (measured: 37 ms against 115 ms on a loaded machine), and decoding is
// most of serve's own work per row. Whatever it refuses goes through encoding/json again,
// which says why (the codes and words of the answers are encoding/json's); FuzzDecodeBatchLikeEncodingJSON
// holds the two to the same verdicts.
//
// The batch's strings and payloads are the body's own bytes (segjson.ZeroCopy: a string
// with escapes is unescaped into a copy), not copies, one allocation less for each: body
// must not change while the batch is in use, and whatever keeps a string of the batch
// longer keeps the body (the PostgreSQL engine's days, which it clones).
func DecodeBatch(body []byte) (*hqwire.Batch, error) {
	var b hqwire.Batch
	// The rows decoded into an array of about their number (counted by their kinds): grown
	// from 10 by doubling, copying the rows each time, it cost as much as a tenth of the
	// decoding.
	if n := bytes.Count(body, []byte(`"kind":`)); n > 0 {
		b.Rows = make([]hqwire.Row, 0, min(n, hqwire.MaxBatchRows+1))
	}
	if rest, err := segjson.Parse(body, &b, segjson.DisallowUnknownFields|segjson.ZeroCopy); err == nil && len(bytes.TrimSpace(rest)) == 0 {
		if len(b.Rows) == 0 && !bytes.Contains(body, []byte(`"rows"`)) {
			b.Rows = nil // no rows member: as encoding/json leaves it
		}
		for i := range b.Rows { // an append to a payload must not write into the body
			p := b.Rows[i].Payload
			b.Rows[i].Payload = p[:len(p):len(p)]
		}
		return &b, nil
	}
	b = hqwire.Batch{}
	if err := decodeStrict(body, &b); err != nil {
		return nil, perr.Wrap(err, perr.Invalid, hqwire.CodeJSONInvalid, "%s", jsonDetail(err))
	}
	return &b, nil
}

// decodeStrict decodes exactly one JSON value from data into v, refusing unknown fields
// and trailing data.
func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("trailing data after the JSON value")
	}
	return nil
}

// jsonDetail turns a decoding error into a sentence for the client.
func jsonDetail(err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	var pe *perr.Error
	switch {
	case errors.As(err, &se):
		return fmt.Sprintf("malformed JSON at byte %d: %v", se.Offset, se)
	case errors.As(err, &te) && te.Field == "":
		return fmt.Sprintf("the body must be a JSON object (a batch), not %s", te.Value)
	case errors.As(err, &te):
		return fmt.Sprintf("field %q must be a JSON %s, not %s", te.Field, te.Type, te.Value)
	case errors.As(err, &pe):
		return pe.Message
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "empty or truncated JSON"
	default:
		return strings.TrimPrefix(err.Error(), "json: ")
	}
}

// fail answers err as a problem document. Internal errors are logged as errors and their
// cause is never shown; a client's mistake is logged at info.
func (h *handler) fail(w http.ResponseWriter, r *http.Request, store string, err error) {
	e := perr.As(err)
	code, status, detail := e.Code, Status(e.Code, e.Kind), e.Message
	switch {
	case r.Context().Err() != nil:
		// The client is gone; nothing was stored unless PutBatch committed, which a retry
		// of the same batch will tell.
		h.log.Info("request canceled", "method", r.Method, "path", r.URL.Path, "store", store, "err", err)
		code, status, detail = hqwire.CodeInternal, http.StatusServiceUnavailable, "the request was canceled"
	case e.Kind == perr.Internal || e.Kind == perr.Unavailable:
		h.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "store", store, "err", err)
		code, status = hqwire.CodeInternal, http.StatusInternalServerError
		detail = "HQ could not store the batch; retry later with the same batch id"
	case code == hqwire.CodeUnauthorized:
		// Booked by authenticate, with its real reason.
	default:
		h.refused.Note(slog.LevelWarn, code, "request refused", "method", r.Method, "path", clip(r.URL.Path),
			"store", clip(store), "status", status, "detail", detail)
	}
	if r.URL.Path == BatchesPath && r.Method == http.MethodPost {
		h.count(store, code)
	}
	title := titles[code]
	if title == "" {
		title = http.StatusText(status)
	}
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(max(1, e.RetryAfter.Round(time.Second)/time.Second))))
	}
	writeJSON(w, status, "application/problem+json", Problem{Type: ProblemTypePrefix + code, Title: title,
		Status: status, Code: code, Detail: detail})
}

func writeJSON(w http.ResponseWriter, status int, contentType string, v any) {
	body, err := json.Marshal(v)
	if err != nil { // the types answered always marshal
		body = []byte(`{"code":"internal"}`)
		status = http.StatusInternalServerError
	}
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}

// clip shortens client-supplied text quoted in a message.
func clip(s string) string {
	const limit = 80
	if len(s) > limit {
		return s[:limit] + "…"
	}
	return s
}
