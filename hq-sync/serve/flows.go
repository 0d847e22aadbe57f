package serve

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/posgate/posgate/internal/hqwire"
	"github.com/posgate/posgate/internal/perr"
	"github.com/posgate/posgate/internal/wire"
)

// The flow exceptions route (hqwire.FlowsPath): a store's flow exceptions in, beside its
// batches, signed as a batch is. They do not travel in a batch: a v0.1.0 serve refuses a
// batch holding an exception kind it does not know. A serve of v0.1.0 answers this route
// 404, and the uploader keeps them for later.

// postFlows checks a FlowBatch as postBatch checks a batch (readSigned), stores it and
// answers a receipt signed as a batch's.
func (h *handler) postFlows(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		h.fail(w, r, "", perr.New(perr.Invalid, hqwire.CodeMethodNotAllowed, "%s %s: use POST", r.Method, r.URL.Path))
		return
	}
	b, store, secret, ok := readSigned(h, w, r, hqwire.FlowsPath, "flow exceptions",
		func(b *hqwire.FlowBatch) (string, string) { return b.Store, b.ID })
	if !ok {
		return
	}
	if err := ValidateFlows(b); err != nil {
		h.fail(w, r, store, err)
		return
	}
	now := h.now().UTC()
	stored, err := h.store.PutFlowExceptions(r.Context(), store, b.ID, b.Exceptions, now)
	if err != nil {
		h.fail(w, r, store, err)
		return
	}
	h.log.Info("flow exceptions stored", "store", store, "batch", b.ID, "flow_exceptions", len(b.Exceptions), "stored", stored)
	if h.met != nil {
		h.met.flows.WithLabelValues(store).Add(float64(stored))
	}
	writeSigned(w, secret, store, b.ID, hqwire.FlowReceipt{Store: store, BatchID: b.ID, Exceptions: len(b.Exceptions),
		Stored: stored, StoredAt: now})
}

// ValidateFlows checks a flow exceptions batch: v is hqwire.Version, an id as wire.ValidID
// defines it, 1 to hqwire.MaxFlowBatch flow exceptions, each of a terminal id, a positive seq
// and change, kind sale or refund, positive flow numbers that differ, a business date, a
// time, held_by empty or terminal:seq, a resolution of at most hqwire.MaxExceptionText bytes
// of UTF-8 without NUL and a resolved_at on a resolved one only, and no (terminal, seq)
// twice in the batch.
func ValidateFlows(b *hqwire.FlowBatch) error {
	bad := func(format string, args ...any) error {
		return perr.New(perr.Invalid, hqwire.CodeBatchInvalid, format, args...)
	}
	switch {
	case b.V != hqwire.Version:
		return bad("protocol version %d is not supported (HQ speaks %d)", b.V, hqwire.Version)
	case !wire.ValidID(b.ID):
		return bad("batch_id %q is not an id of 1 to %d characters [A-Za-z0-9_-]", clip(b.ID), wire.MaxIDLen)
	case len(b.Exceptions) == 0:
		return bad("no flow exceptions")
	case len(b.Exceptions) > hqwire.MaxFlowBatch:
		return bad("%d flow exceptions are over the %d limit of a batch", len(b.Exceptions), hqwire.MaxFlowBatch)
	}
	seen := map[string]int{}
	for i := range b.Exceptions {
		x := &b.Exceptions[i]
		why := checkFlow(x)
		k := wire.Key(x.Terminal, x.Seq)
		if j, dup := seen[k]; why == "" && dup {
			why = fmt.Sprintf("the same terminal and seq as flow_exceptions[%d]", j)
		}
		if why != "" {
			return bad("flow_exceptions[%d] (%s): %s", i, clip(k), why)
		}
		seen[k] = i
	}
	return nil
}

// checkFlow returns what is wrong with x, "" if nothing.
func checkFlow(x *hqwire.FlowException) string {
	switch {
	case !wire.ValidID(x.Terminal):
		return fmt.Sprintf("terminal is not an id of 1 to %d characters [A-Za-z0-9_-]", wire.MaxIDLen)
	case x.Seq <= 0:
		return fmt.Sprintf("seq %d is not positive", x.Seq)
	case x.Change <= 0:
		return fmt.Sprintf("change %d is not positive", x.Change)
	case x.Kind != hqwire.FlowSale && x.Kind != hqwire.FlowRefund:
		return fmt.Sprintf("kind %q is not sale or refund", clip(x.Kind))
	case x.FlowGiven <= 0 || x.FlowBooked <= 0 || x.FlowGiven == x.FlowBooked:
		return fmt.Sprintf("flow_given %d and flow_booked %d are not two positive numbers", x.FlowGiven, x.FlowBooked)
	case !validDate(x.BusinessDate):
		return fmt.Sprintf("business_date %q is not YYYY-MM-DD", clip(x.BusinessDate))
	case x.At.IsZero():
		return "at is missing"
	case !validHeldBy(x.HeldBy):
		return fmt.Sprintf("held_by %q is not terminal:seq", clip(x.HeldBy))
	case len(x.Resolution) > hqwire.MaxExceptionText || !utf8.ValidString(x.Resolution) ||
		strings.ContainsRune(x.Resolution, 0):
		return fmt.Sprintf("resolution is not at most %d bytes of UTF-8 without NUL", hqwire.MaxExceptionText)
	case !x.Resolved && (x.Resolution != "" || !x.ResolvedAt.IsZero()):
		return "a resolution without resolved"
	}
	return ""
}

// validHeldBy reports whether s is empty or terminal:seq.
func validHeldBy(s string) bool {
	if s == "" {
		return true
	}
	term, seq, ok := strings.Cut(s, ":")
	n, err := strconv.ParseInt(seq, 10, 64)
	return ok && wire.ValidID(term) && err == nil && n > 0 && strconv.FormatInt(n, 10) == seq
}
