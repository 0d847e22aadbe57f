package serve

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/posgate/posgate/hq-sync/hqstore"
	"github.com/posgate/posgate/internal/hqwire"
	"github.com/posgate/posgate/internal/perr"
	"github.com/posgate/posgate/internal/wire"
)

// The refill routes (hqwire.MovesPath, hqwire.ExportPath): a store's stock moves in, and
// what HQ holds of a store out (its rows, moves, day declarations, exceptions and flow
// exceptions), page by page, to a store that lost its ledger with no backup
// (store-server restore --from-hq). Both are signed by the store as a batch is; the export
// answers only the signing store's own data, signed back with its secret.

// maxMoveDelta bounds a move's delta and count, as the store's ledger bounds them.
const maxMoveDelta = 1_000_000_000_000

func (h *handler) refill(w http.ResponseWriter, r *http.Request) {
	ref, ok := h.store.(hqstore.Refiller)
	if !ok {
		h.fail(w, r, "", perr.New(perr.NotFound, hqwire.CodeNotFound, "no such path %q", r.URL.Path))
		return
	}
	method := http.MethodPost
	if r.URL.Path == hqwire.ExportPath {
		method = http.MethodGet
	}
	if r.Method != method {
		w.Header().Set("Allow", method)
		h.fail(w, r, "", perr.New(perr.Invalid, hqwire.CodeMethodNotAllowed, "%s %s: use %s", r.Method, r.URL.Path, method))
		return
	}
	if method == http.MethodGet {
		h.export(w, r, ref)
		return
	}
	h.postMoves(w, r, ref)
}

// postMoves checks a MovesBatch as postBatch checks a batch (readSigned), stores it and
// answers a receipt signed as a batch's.
func (h *handler) postMoves(w http.ResponseWriter, r *http.Request, ref hqstore.Refiller) {
	b, store, secret, ok := readSigned(h, w, r, hqwire.MovesPath, "moves",
		func(b *hqwire.MovesBatch) (string, string) { return b.Store, b.ID })
	if !ok {
		return
	}
	if err := ValidateMoves(b); err != nil {
		h.fail(w, r, store, err)
		return
	}
	now := h.now().UTC()
	fresh, maxN, err := ref.PutMoves(r.Context(), store, b.ID, b.Moves, now)
	if err != nil {
		h.fail(w, r, store, err)
		return
	}
	h.log.Info("stock moves stored", "store", store, "batch", b.ID, "moves", len(b.Moves), "new_moves", fresh)
	writeSigned(w, secret, store, b.ID, hqwire.MovesReceipt{Store: store, BatchID: b.ID, Moves: len(b.Moves), New: fresh,
		MaxN: maxN, Stored: now})
}

// readSigned reads a signed POST to one of the stores' routes beside the batches as
// postBatch reads a batch: the signature from the headers (a known store, the timestamp),
// the body's size and that it is the body signed, strict JSON of a T (what names it in an
// error), and the store and idempotency key against the body's (head). On an error it has
// answered, and ok is false.
func readSigned[T any](h *handler, w http.ResponseWriter, r *http.Request, route, what string,
	head func(*T) (store, id string)) (b *T, store string, secret []byte, ok bool) {
	store, secret, err := h.authenticateAt(r, http.MethodPost, route)
	if err != nil {
		h.fail(w, r, store, err)
		return nil, store, nil, false
	}
	body, err := readBody(w, r)
	if err != nil {
		h.fail(w, r, store, err)
		return nil, store, nil, false
	}
	if hqwire.ContentHash(body) != r.Header.Get(hqwire.HeaderContentHash) {
		h.fail(w, r, store, perr.New(perr.Invalid, hqwire.CodeContentHashMismatch,
			"the body's SHA-256 is not the %s the request was signed with", hqwire.HeaderContentHash))
		return nil, store, nil, false
	}
	b = new(T)
	if err := decodeStrict(body, b); err != nil {
		h.fail(w, r, store, perr.New(perr.Invalid, hqwire.CodeJSONInvalid, "not one %s batch: %s", what, jsonDetail(err)))
		return nil, store, nil, false
	}
	bodyStore, id := head(b)
	switch {
	case bodyStore != store:
		h.fail(w, r, store, perr.New(perr.Unauthorized, hqwire.CodeStoreMismatch,
			"the %s are of store %q but were signed by store %s", what, clip(bodyStore), store))
		return nil, store, nil, false
	case r.Header.Get(hqwire.HeaderIdemKey) != id:
		h.fail(w, r, store, perr.New(perr.Invalid, hqwire.CodeIdempotencyKeyMismatch,
			"%s is not the batch_id %q", hqwire.HeaderIdemKey, clip(id)))
		return nil, store, nil, false
	}
	return b, store, secret, true
}

// writeSigned answers 200 with receipt rc as JSON, signed with the store's secret as a
// batch's receipt is.
func writeSigned(w http.ResponseWriter, secret []byte, store, id string, rc any) {
	js, _ := json.Marshal(rc)
	js = append(js, '\n')
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set(hqwire.HeaderSignature, hqwire.SignReceipt(secret, store, id, js))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(js)
}

// ValidateMoves checks a moves batch: v is hqwire.Version, an id as wire.ValidID defines
// it, at most hqwire.MaxMovesBatch moves, each with n > 0, an id and a sku of 1 to
// wire.MaxTextLen bytes without NUL, reason opening or adjust, a time, a delta within ±10^12,
// counted (a count's) 0 to 10^12 on an adjustment only, and no id or n twice in the batch.
func ValidateMoves(b *hqwire.MovesBatch) error {
	bad := func(format string, args ...any) error {
		return perr.New(perr.Invalid, hqwire.CodeBatchInvalid, format, args...)
	}
	switch {
	case b.V != hqwire.Version:
		return bad("protocol version %d is not supported (HQ speaks %d)", b.V, hqwire.Version)
	case !wire.ValidID(b.ID):
		return bad("batch_id %q is not an id of 1 to %d characters [A-Za-z0-9_-]", clip(b.ID), wire.MaxIDLen)
	case len(b.Moves) > hqwire.MaxMovesBatch:
		return bad("%d moves are over the %d move limit of a batch", len(b.Moves), hqwire.MaxMovesBatch)
	}
	ids, ns := map[string]int{}, map[int64]int{}
	for i := range b.Moves {
		m := &b.Moves[i]
		text := func(s string) bool { return s != "" && len(s) <= wire.MaxTextLen && !strings.ContainsRune(s, 0) }
		var why string
		switch {
		case m.N <= 0:
			why = fmt.Sprintf("n %d is not positive", m.N)
		case !text(m.ID) || !text(m.SKU):
			why = fmt.Sprintf("id and sku must be 1 to %d bytes without NUL", wire.MaxTextLen)
		case m.Reason != hqwire.MoveOpening && m.Reason != hqwire.MoveAdjust:
			why = fmt.Sprintf("reason %q is not opening or adjust", clip(m.Reason))
		case m.At.IsZero():
			why = "at is missing"
		case m.Delta > maxMoveDelta || m.Delta < -maxMoveDelta:
			why = fmt.Sprintf("delta %d is beyond ±%d", m.Delta, int64(maxMoveDelta))
		case m.Counted != nil && (m.Reason != hqwire.MoveAdjust || *m.Counted < 0 || *m.Counted > maxMoveDelta):
			why = "counted is a count's units, 0 to 10^12, on an adjustment"
		}
		if j, dup := ids[m.ID]; why == "" && dup {
			why = fmt.Sprintf("the same id as moves[%d]", j)
		}
		if j, dup := ns[m.N]; why == "" && dup {
			why = fmt.Sprintf("the same n as moves[%d]", j)
		}
		if why != "" {
			return bad("moves[%d] (id %q): %s", i, clip(m.ID), why)
		}
		ids[m.ID], ns[m.N] = i, i
	}
	return nil
}

// export answers one page of what HQ holds of the signing store, signed with its secret
// over the request target (hqwire.SignExport). The request is signed as a batch is, over
// GET and the path with its query, with the SHA-256 of an empty body.
func (h *handler) export(w http.ResponseWriter, r *http.Request, ref hqstore.Refiller) {
	route := hqwire.ExportPath
	if r.URL.RawQuery != "" {
		route += "?" + r.URL.RawQuery
	}
	store, secret, err := h.authenticateAt(r, http.MethodGet, route)
	if err != nil {
		h.fail(w, r, store, err)
		return
	}
	if r.Header.Get(hqwire.HeaderContentHash) != hqwire.ContentHash(nil) || r.ContentLength > 0 {
		h.fail(w, r, store, perr.New(perr.Invalid, hqwire.CodeContentHashMismatch, "an export request has no body"))
		return
	}
	page, err := h.exportPage(r, ref, store, r.URL.Query())
	if err != nil {
		h.fail(w, r, store, err)
		return
	}
	h.log.Info("export page answered", "store", store, "part", page.Part, "rows", len(page.Rows),
		"moves", len(page.Moves), "days", len(page.Days), "exceptions", len(page.Exceptions),
		"flow_exceptions", len(page.Flows), "more", page.More)
	if h.met != nil {
		h.met.exports.WithLabelValues(store, page.Part).Inc()
	}
	body, _ := json.Marshal(page)
	body = append(body, '\n')
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set(hqwire.HeaderSignature, hqwire.SignExport(secret, store, r.RequestURI, body))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}

func (h *handler) exportPage(r *http.Request, ref hqstore.Refiller, store string, q url.Values) (*hqwire.ExportPage, error) {
	bad := func(format string, args ...any) error {
		return perr.New(perr.Invalid, hqwire.CodeExportInvalid, format, args...)
	}
	num := func(name string, def int64) (int64, error) {
		v := q.Get(name)
		if v == "" {
			return def, nil
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return 0, bad("%s %q is not a number ≥ 0", name, clip(v))
		}
		return n, nil
	}
	limit, err := num("limit", hqwire.MaxExportPage)
	if err != nil {
		return nil, err
	}
	if limit < 1 || limit > hqwire.MaxExportPage {
		return nil, bad("limit %d is not 1 to %d", limit, hqwire.MaxExportPage)
	}
	page := &hqwire.ExportPage{Store: store, Part: q.Get("part")}
	ctx := r.Context()
	n := int(limit)
	seq, err := num("after_seq", 0) // of a row's, an exception's or a flow exception's key
	if err != nil {
		return nil, err
	}
	terminal := q.Get("after_terminal")
	// Each part but days is read one more than asked: it tells whether another page follows.
	switch page.Part {
	case hqwire.PartRows:
		rows, err := ref.ExportRows(ctx, store, terminal, seq, n+1)
		if err != nil {
			return nil, err
		}
		page.Rows, page.More = upTo(rows, n)
	case hqwire.PartExceptions:
		after := hqstore.ExceptionKey{Kind: q.Get("after_kind"), Terminal: terminal, Seq: seq, SKU: q.Get("after_sku")}
		xs, err := ref.ExportExceptions(ctx, store, after, n+1)
		if err != nil {
			return nil, err
		}
		page.Exceptions, page.More = upTo(xs, n)
	case hqwire.PartFlows:
		xs, err := ref.ExportFlows(ctx, store, terminal, seq, n+1)
		if err != nil {
			return nil, err
		}
		page.Flows, page.More = upTo(xs, n)
	case hqwire.PartMoves:
		after, err := num("after", 0)
		if err != nil {
			return nil, err
		}
		moves, err := ref.ExportMoves(ctx, store, after, n+1)
		if err != nil {
			return nil, err
		}
		page.Moves, page.More = upTo(moves, n)
	case hqwire.PartDays:
		if page.Days, page.Dropped, err = ref.ExportDays(ctx, store); err != nil {
			return nil, err
		}
	default:
		return nil, bad("part %q is not rows, moves, days, exceptions or flows", clip(page.Part))
	}
	return page, nil
}

// upTo returns the first limit of xs, read with one more than limit, and whether more
// follow.
func upTo[T any](xs []T, limit int) ([]T, bool) {
	if len(xs) > limit {
		return xs[:limit], true
	}
	return xs, false
}
