package serve

import (
	"crypto/rand"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/posgate/posgate/internal/guard"
	"github.com/posgate/posgate/internal/hqwire"
	"github.com/posgate/posgate/internal/perr"
)

// authenticate checks that r is signed by a store HQ knows, from its headers alone, before
// a byte of its body is read: the signature covers the body's hash (hqwire.HeaderContentHash),
// which postBatch then checks the body against. It returns the store and its secret.
//
// Every failure is answered alike (hqwire.CodeUnauthorized: missing headers, an unknown
// store and a wrong signature are one answer, so it names no store id that exists), logged
// with its real reason, and counted against the client's address and the store: past a few,
// each waits a doubling delay (hqwire.CodeTooManyFailures with Retry-After) before its next
// attempt is checked. An unknown store's signature is checked all the same, against a
// secret no store has, so that its answer takes the time a known store's does.
func (h *handler) authenticate(r *http.Request) (string, []byte, error) {
	return h.authenticateAt(r, http.MethodPost, BatchesPath)
}

// authenticateAt is authenticate of a request signed over method and path (the route's
// own path, or the one the request line names: see verify).
func (h *handler) authenticateAt(r *http.Request, method, path string) (string, []byte, error) {
	store := r.Header.Get(hqwire.HeaderStore)
	ts := r.Header.Get(hqwire.HeaderTimestamp)
	sig := r.Header.Get(hqwire.HeaderSignature)
	key := r.Header.Get(hqwire.HeaderIdemKey)
	hash := r.Header.Get(hqwire.HeaderContentHash)
	addr := clientAddr(r)
	if wait := max(h.guard.Wait("addr:"+addr), h.guard.Wait("store:"+store)); wait > 0 {
		return store, nil, tooMany(wait)
	}
	secret, known := h.secrets[store]
	if !known {
		secret = h.nobody
	}
	reason := ""
	switch {
	case store == "" || ts == "" || sig == "" || hash == "":
		reason = fmt.Sprintf("the %s, %s, %s and %s headers are required", hqwire.HeaderStore,
			hqwire.HeaderTimestamp, hqwire.HeaderSignature, hqwire.HeaderContentHash)
	case !h.verify(secret, sig, r, method, path, store, ts, key, hash) || !known:
		reason = "the signature is not a known store's over this request"
		if !known {
			reason = fmt.Sprintf("store %q is not known to HQ", clip(store))
		}
	}
	if reason != "" {
		wait := max(h.guard.Fail("addr:"+addr), h.guard.Fail("store:"+store))
		h.refused.Note(slog.LevelWarn, hqwire.CodeUnauthorized, "request not authenticated", "store", clip(store), "addr", addr,
			"reason", reason, "wait", wait)
		return store, nil, perr.New(perr.Unauthorized, hqwire.CodeUnauthorized,
			"the request is not signed by a store HQ knows")
	}
	h.guard.Succeed("addr:" + addr)
	h.guard.Succeed("store:" + store)
	secs, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return store, nil, perr.New(perr.Unauthorized, hqwire.CodeUnauthorized, "%s %q is not Unix seconds",
			hqwire.HeaderTimestamp, clip(ts))
	}
	if d := h.now().Sub(time.Unix(secs, 0)); d > h.skew || d < -h.skew {
		how := fmt.Sprintf("%v behind", d.Round(time.Second))
		if d < 0 {
			how = fmt.Sprintf("%v ahead of", (-d).Round(time.Second))
		}
		return store, nil, perr.New(perr.Unauthorized, hqwire.CodeTimestampSkew,
			"%s is %s HQ's clock; at most %v either way is accepted", hqwire.HeaderTimestamp, how, h.skew)
	}
	return store, secret, nil
}

// verify checks sig over the route's path (BatchesPath, MovesPath, FlowsPath; the export's with its
// query), or over the path of the request line as the client sent it, for a handler
// mounted under a prefix (http.StripPrefix rewrites r.URL.Path, never r.RequestURI).
func (h *handler) verify(secret []byte, sig string, r *http.Request, method, route, store, ts, key, hash string) bool {
	if hqwire.VerifyHash(secret, sig, method, route, store, ts, key, hash) {
		return true
	}
	path := r.RequestURI
	if method == http.MethodPost {
		path, _, _ = strings.Cut(path, "?")
	}
	return path != "" && path != route && hqwire.VerifyHash(secret, sig, method, path, store, ts, key, hash)
}

// tooMany is the answer to a client or store that must wait before its next attempt.
func tooMany(wait time.Duration) error {
	return &perr.Error{Kind: perr.RateLimited, Code: hqwire.CodeTooManyFailures,
		Message:    fmt.Sprintf("too many failed attempts; try again in %v", wait.Round(time.Second)),
		RetryAfter: wait}
}

// clientAddr is the address r came from, without its port.
func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// newNobody returns a secret no store has, to check an unknown store's signature against.
func newNobody() []byte {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return b
}

// defaultGuard is the failures a client address or a store may make before it waits.
func defaultGuard(now func() time.Time) *guard.Guard {
	return guard.New(guard.Config{Free: 5, Base: time.Second, Max: 5 * time.Minute, Now: now})
}
