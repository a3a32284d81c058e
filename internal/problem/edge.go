package problem

import (
	"errors"
	"fmt"
	"time"
)

// The edge's refusals: requests turned away before the engine sees them.
// Each is a kind that Of maps to its status, code and title, as it maps
// the engine's errors; an *Error of that kind adds what the client is told
// about this request.
var (
	// ErrInvalid is a request that breaks the contract: 400
	// invalid_request, naming the field at fault (Error.Field).
	ErrInvalid = errors.New("invalid request")
	// ErrUnauthorized is a request without a valid API key: 401.
	ErrUnauthorized = errors.New("unauthorized")
	// ErrForbidden is a request its API key may not make (scope or
	// prefixes): 403.
	ErrForbidden = errors.New("forbidden")
	// ErrCrossOrigin is a state-changing request from another web site:
	// 403.
	ErrCrossOrigin = errors.New("cross-origin request refused")
	// ErrUnknownHost is a request to a Host name the server does not
	// answer to (DNS rebinding): 403, naming the Host header.
	ErrUnknownHost = errors.New("unknown host name")
	// ErrTooLarge is a body over the server's limit: 413.
	ErrTooLarge = errors.New("payload too large")
	// ErrMediaType is a body that is not JSON: 415.
	ErrMediaType = errors.New("unsupported media type")
	// ErrTooManyUnknownKeys is an address that sent too many unknown API
	// keys: 429, with the limiter's Retry-After.
	ErrTooManyUnknownKeys = errors.New("too many unknown API keys")
	// ErrTooManyHolds is a hold when the server keeps as many hold
	// streams open as it allows: 429.
	ErrTooManyHolds = errors.New("too many hold streams")
	// ErrTooManyStreams is an event stream when the server keeps as many
	// open as it allows: 429.
	ErrTooManyStreams = errors.New("too many event streams")
	// ErrQuota is a request beyond its API key's quota of hold streams,
	// waiting requests or event streams: 429.
	ErrQuota = errors.New("quota of the API key reached")
)

// Error is an error of a kind (one of the Err… above, or an engine
// sentinel such as lock.ErrLeaseLost) with what the client is told about
// this request. Of takes the status, code and title from the kind, and
// Detail, Field and RetryAfter from here where they are set.
type Error struct {
	Kind   error
	Detail string
	// Field names the request field or header at fault.
	Field string
	// Max is the largest value Field accepts, for a duration above its
	// bound (0: none said).
	Max time.Duration
	// RetryAfter is the Retry-After in seconds; 0 means the kind's.
	RetryAfter int
}

// Errorf is an error of kind whose detail is the formatted text.
func Errorf(kind error, format string, args ...any) *Error {
	return &Error{Kind: kind, Detail: fmt.Sprintf(format, args...)}
}

// Invalid is a 400 that names the field at fault.
func Invalid(field, format string, args ...any) *Error {
	return &Error{Kind: ErrInvalid, Field: field, Detail: fmt.Sprintf(format, args...)}
}

// Error is the detail: the text the client is shown.
func (e *Error) Error() string { return e.Detail }

// Unwrap is the kind, which errors.Is finds.
func (e *Error) Unwrap() error { return e.Kind }
