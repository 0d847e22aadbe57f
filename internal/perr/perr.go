// Package perr is posgate's one error type: every error that crosses a boundary (the
// terminal's local API, an MQTT ack, the manager API, an HQ answer) carries a Kind, which
// decides the HTTP status or ack status, and a stable Code that clients may switch on.
//
// Adapters translate driver errors into *Error at the boundary; anything that is not an
// *Error is an internal error. The package never logs.
package perr

import (
	"errors"
	"fmt"
	"net/http"
	"time"
)

// Kind is the class of an error. Kinds map to HTTP statuses and ack statuses in one table.
type Kind string

// The kinds of error posgate reports.
const (
	Invalid      Kind = "invalid"      // the input is wrong; retrying the same input fails again
	NotFound     Kind = "not_found"    // the thing named does not exist
	Conflict     Kind = "conflict"     // the request clashes with stored state (same key, other content)
	Refused      Kind = "refused"      // a business rule says no (out of stock, offline cap, sale closed)
	RateLimited  Kind = "rate_limited" // too many requests; retry after RetryAfter
	Unavailable  Kind = "unavailable"  // a dependency is down; retrying later may succeed
	Unauthorized Kind = "unauthorized" // missing or wrong credentials
	Forbidden    Kind = "forbidden"    // the caller is known, and this step needs more (a supervisor's approval)
	Internal     Kind = "internal"     // a bug or an unexpected failure
)

// Error is an error with a Kind, a stable machine-readable Code and a Message a cashier or
// a manager can read.
type Error struct {
	Kind       Kind
	Code       string
	Message    string
	RetryAfter time.Duration // set for RateLimited and sometimes Unavailable
	Err        error         // the underlying cause, if any; never shown to clients
}

// New returns an *Error of kind k with a stable code and a readable message.
func New(k Kind, code, format string, args ...any) *Error {
	return &Error{Kind: k, Code: code, Message: fmt.Sprintf(format, args...)}
}

// Wrap returns an *Error of kind k that keeps err as its cause.
func Wrap(err error, k Kind, code, format string, args ...any) *Error {
	return &Error{Kind: k, Code: code, Message: fmt.Sprintf(format, args...), Err: err}
}

// Error implements error.
func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: %s: %v", e.Code, e.Message, e.Err)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// As returns the *Error in err's chain, or an Internal *Error wrapping err.
func As(err error) *Error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{Kind: Internal, Code: "internal", Message: "internal error", Err: err}
}

// KindOf returns the Kind of err (Internal for errors that are not *Error, "" for nil).
func KindOf(err error) Kind {
	if err == nil {
		return ""
	}
	return As(err).Kind
}

// CodeOf returns the stable Code of err ("internal" for errors that are not *Error, "" for nil).
func CodeOf(err error) string {
	if err == nil {
		return ""
	}
	return As(err).Code
}

// HTTPStatus returns the HTTP status for a Kind.
func HTTPStatus(k Kind) int {
	switch k {
	case Invalid:
		return http.StatusBadRequest
	case NotFound:
		return http.StatusNotFound
	case Conflict:
		return http.StatusUnprocessableEntity
	case Refused:
		return http.StatusConflict
	case RateLimited:
		return http.StatusTooManyRequests
	case Unavailable:
		return http.StatusServiceUnavailable
	case Unauthorized:
		return http.StatusUnauthorized
	case Forbidden:
		return http.StatusForbidden
	default:
		return http.StatusInternalServerError
	}
}
