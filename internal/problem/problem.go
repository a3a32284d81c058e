// Package problem is lockd's one classification of errors at the HTTP
// edge: Of turns an error into its status, machine code, title and detail.
// The API writes the answer as application/problem+json
// (internal/server), the dashboard as its HTML error page (internal/web),
// so an error maps to a status in one place and both say the same thing.
// The engine's errors come from package lock; the edge's own refusals (bad
// input, no credentials, a cap or quota reached) are the kinds of edge.go,
// with an *Error to say what is wrong with this request.
//
// Caveat: only errors the table knows are shown as they are. Anything
// else is Internal: its text may hold details of Redis or of the process,
// so callers log it and show the generic detail.
package problem

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/lockd/lockd/api"
	"github.com/lockd/lockd/internal/lock"
)

// Problem is how lockd answers an error.
type Problem struct {
	Status int
	Code   api.ProblemCode
	Title  string
	Detail string
	// Field names the request field at fault, for a 400.
	Field string
	// Max is the largest value Field accepts (a duration above its bound).
	Max time.Duration
	// RetryAfter is the Retry-After header's seconds; 0 means none.
	RetryAfter int
	// Holder and Remaining describe the lease that holds the key (Code
	// lock_held), or the permit that ends first (Code no_permits).
	Holder    string
	Remaining time.Duration
	// Queued describes the waiters that come first (Code queued).
	Queued *lock.QueuedError
	// Internal marks an error nobody expected: log it, and show only
	// Detail, never the error's text.
	Internal bool
}

// ErrShuttingDown answers requests that arrive while the server stops.
var ErrShuttingDown = errors.New("server is shutting down")

// Of is the answer to err, about the resource the request named (the zero
// Resource when none): a semaphore's answers speak of permits. The kind of err (an edge refusal of edge.go or
// an engine error) gives the status, code and title; an *Error in err's
// chain adds its detail, field and Retry-After. A client that went away
// (context.Canceled) is the caller's to notice first: nobody reads that
// answer.
func Of(err error, res lock.Resource) Problem {
	p, ok := refusal(err)
	if !ok {
		p = engine(err, res)
	}
	var e *Error
	if p.Internal || !errors.As(err, &e) {
		return p
	}
	if e.Detail != "" {
		p.Detail = e.Detail
	}
	if e.Field != "" {
		p.Field, p.Max = e.Field, e.Max
	}
	if e.RetryAfter > 0 {
		p.RetryAfter = e.RetryAfter
	}
	return p
}

// refusal is the answer to the edge's refusals (edge.go), with the detail
// each kind has when its *Error gives none.
func refusal(err error) (Problem, bool) {
	tooMany := func(title, detail string) (Problem, bool) {
		return Problem{Status: http.StatusTooManyRequests, Code: api.ProblemCodeTooManyRequests, Title: title,
			Detail: detail, RetryAfter: 1}, true
	}
	switch {
	case errors.Is(err, ErrInvalid):
		return Problem{Status: http.StatusBadRequest, Code: api.ProblemCodeInvalidRequest, Title: "Invalid request",
			Detail: "the request does not follow the API's contract"}, true
	case errors.Is(err, ErrUnauthorized):
		return Problem{Status: http.StatusUnauthorized, Code: api.ProblemCodeUnauthorized, Title: "Unauthorized",
			Detail: "an API key is required: Authorization: Bearer <key>"}, true
	case errors.Is(err, ErrForbidden):
		return Problem{Status: http.StatusForbidden, Code: api.ProblemCodeForbidden, Title: "Forbidden",
			Detail: "this API key may not make this request"}, true
	case errors.Is(err, ErrCrossOrigin):
		return Problem{Status: http.StatusForbidden, Code: api.ProblemCodeForbidden, Title: "Cross-origin request refused",
			Detail: "this request came from another web site (Sec-Fetch-Site or Origin); nothing was changed"}, true
	case errors.Is(err, ErrUnknownHost):
		return Problem{Status: http.StatusForbidden, Code: api.ProblemCodeForbidden, Title: "Unknown host name", Field: "Host",
			Detail: "this server does not answer to the Host name in this request; use localhost or 127.0.0.1, or add the name with --allowed-hosts"}, true
	case errors.Is(err, ErrTooLarge):
		return Problem{Status: http.StatusRequestEntityTooLarge, Code: api.ProblemCodePayloadTooLarge, Title: "Payload too large",
			Detail: "the body is larger than this server takes"}, true
	case errors.Is(err, ErrMediaType):
		return Problem{Status: http.StatusUnsupportedMediaType, Code: api.ProblemCodeUnsupportedMediaType, Title: "Unsupported media type",
			Detail: "the body must be JSON (Content-Type: application/json)"}, true
	case errors.Is(err, ErrTooManyUnknownKeys):
		return tooMany("Too many failed sign-ins", "too many unknown API keys from this address; retry later")
	case errors.Is(err, ErrTooManyHolds):
		return tooMany("Too many holds", "this server already keeps as many hold streams open as it allows")
	case errors.Is(err, ErrTooManyStreams):
		return tooMany("Too many event streams", "this server already keeps as many event streams open as it allows")
	case errors.Is(err, ErrQuota):
		return tooMany("Quota of the API key reached", "this API key already uses its quota; retry later")
	}
	return Problem{}, false
}

// engine is the answer to an engine error, or Internal for anything the
// table does not know.
func engine(err error, res lock.Resource) Problem {
	key, sem := res.Name, res.Kind == lock.KindSemaphore
	if p, ok := conflict(err, key, sem); ok {
		return p
	}
	var recovering *lock.RecoveringError
	var setInput *lock.SetInputError
	switch {
	case errors.As(err, &setInput):
		return Problem{Status: http.StatusBadRequest, Code: api.ProblemCodeInvalidRequest, Title: "Invalid request",
			Field: setInput.Field, Detail: setInput.Field + ": " + setInput.Reason}
	case errors.Is(err, lock.ErrNoLockSets):
		return Problem{Status: http.StatusNotImplemented, Code: api.ProblemCodeUnsupported, Title: "Not supported by this server",
			Detail: "this server runs Redlock, which has no lock sets: they need one Redis, Sentinel or Cluster"}
	case errors.Is(err, lock.ErrNoEventStream):
		return Problem{Status: http.StatusBadRequest, Code: api.ProblemCodeUnsupported, Title: "Not supported by this server",
			Detail: "this server runs Redlock, which has no event stream: each master records only the events it took part in, " +
				"so no one stream has them all; GET /v1/events, the dashboard's live updates and webhooks need one Redis, Sentinel or Cluster"}
	case errors.Is(err, lock.ErrNoElections):
		return Problem{Status: http.StatusBadRequest, Code: api.ProblemCodeUnsupported, Title: "Not supported by this server",
			Detail: "this server runs Redlock, which has no elections: they need one Redis, Sentinel or Cluster"}
	case errors.Is(err, lock.ErrNoReleaseRequests):
		return Problem{Status: http.StatusBadRequest, Code: api.ProblemCodeUnsupported, Title: "Not supported by this server",
			Detail: "this server runs Redlock, which has no release requests: a request lives in the lease, which each master keeps apart; they need one Redis, Sentinel or Cluster"}
	case errors.Is(err, lock.ErrNoSessions):
		return Problem{Status: http.StatusBadRequest, Code: api.ProblemCodeUnsupported, Title: "Not supported by this server",
			Detail: "this server runs Redlock, which has no sessions: they need one Redis, Sentinel or Cluster"}
	case errors.Is(err, lock.ErrSessionNotFound):
		return Problem{Status: http.StatusNotFound, Code: api.ProblemCodeSessionNotFound, Title: "No live session",
			Detail: "the session ended or lapsed (or never existed), and every grant in it with it"}
	case errors.Is(err, lock.ErrNoMinHold):
		return Problem{Status: http.StatusBadRequest, Code: api.ProblemCodeUnsupported, Title: "Not supported by this server",
			Field: "min_hold_ms", Detail: "this server runs Redlock, which has no hold windows: a release reaches each master apart; it needs one Redis, Sentinel or Cluster"}
	case errors.Is(err, lock.ErrNoLockDelay):
		return Problem{Status: http.StatusBadRequest, Code: api.ProblemCodeUnsupported, Title: "Not supported by this server",
			Field: "lock_delay_ms", Detail: "this server runs Redlock, which has no lock-delay: each master sees a lapse apart; it needs one Redis, Sentinel or Cluster"}
	case errors.Is(err, lock.ErrUnsupported) && (sem || errors.Is(err, lock.ErrNoSemaphores)):
		return Problem{Status: http.StatusBadRequest, Code: api.ProblemCodeUnsupported, Title: "Not supported by this server",
			Detail: "this server runs Redlock, which has no semaphores: they need one Redis, Sentinel or Cluster"}
	case errors.Is(err, lock.ErrUnsupported):
		return Problem{Status: http.StatusBadRequest, Code: api.ProblemCodeUnsupported, Title: "Not supported by this server",
			Field: "mode", Detail: "this server runs Redlock, which has no shared holds: they need one Redis, Sentinel or Cluster; use mode exclusive"}
	case errors.Is(err, lock.ErrNotFound) && sem:
		return Problem{Status: http.StatusNotFound, Code: api.ProblemCodeNotFound, Title: "No live lease",
			Detail: "semaphore " + key + " has no live permit"}
	case errors.Is(err, lock.ErrNotFound):
		return Problem{Status: http.StatusNotFound, Code: api.ProblemCodeNotFound, Title: "No live lease",
			Detail: key + " has no live lease"}
	case errors.Is(err, lock.ErrBadEventID):
		return Problem{Status: http.StatusBadRequest, Code: api.ProblemCodeInvalidRequest, Title: "Invalid request",
			Field: "Last-Event-ID", Detail: "Last-Event-ID must be an id the stream sent: <ms>-<seq>, two numbers below 2^64, e.g. 1763812345678-0"}
	case errors.Is(err, lock.ErrInvalidCursor):
		return Problem{Status: http.StatusBadRequest, Code: api.ProblemCodeInvalidRequest, Title: "Invalid request",
			Field: "cursor", Detail: "cursor is not one this server handed out (or it has expired): start again from the first page"}
	case errors.Is(err, lock.ErrTooManyWaiters):
		return Problem{Status: http.StatusTooManyRequests, Code: api.ProblemCodeTooManyRequests, Title: "Too many waiting requests",
			Detail:     "this server already has as many requests waiting as it allows; retry later or with wait_ms 0",
			RetryAfter: 1}
	case errors.As(err, &recovering):
		return Problem{Status: http.StatusServiceUnavailable, Code: api.ProblemCodeBackendRecovering, Title: "Recovering from a Redis data loss",
			Detail: fmt.Sprintf("Redis lost its data; no key is granted for %d ms more, until every lease it may have forgotten has expired",
				recovering.Remaining.Milliseconds()),
			RetryAfter: ceilSeconds(recovering.Remaining)}
	case errors.Is(err, lock.ErrUnavailable):
		return Problem{Status: http.StatusServiceUnavailable, Code: api.ProblemCodeBackendUnavailable, Title: "Backend unavailable",
			Detail: "Redis cannot be reached or cannot take writes now (read-only, out of memory, loading); " +
				"a request Redis did not answer may still take effect when it returns: an acquire is then given back by lockd, " +
				"or, sent with an Idempotency-Key, answered to a retry with the same key",
			RetryAfter: 1}
	case errors.Is(err, lock.ErrClosed), errors.Is(err, ErrShuttingDown):
		return Problem{Status: http.StatusServiceUnavailable, Code: api.ProblemCodeBackendUnavailable, Title: "Shutting down",
			Detail: "the server is shutting down; retry on another replica or in a moment", RetryAfter: 1}
	default:
		return Problem{Status: http.StatusInternalServerError, Code: api.ProblemCodeInternal, Title: "Internal error",
			Detail: "internal error; the server logged it", Internal: true}
	}
}

// conflict is the answer to the engine's 409s: the key is held or kept
// for waiters, or the request does not fit the live lease. key is the
// name (of a semaphore, when sem).
func conflict(err error, key string, sem bool) (Problem, bool) {
	var held *lock.HeldError
	var queued *lock.QueuedError
	var mode *lock.ModeMismatchError
	var full *lock.TooManyHoldersError
	var delay *lock.DelayError
	var window *lock.MinHoldError
	var inSet *lock.InSetError
	switch {
	case errors.As(err, &inSet):
		return Problem{Status: http.StatusConflict, Code: api.ProblemCodeInLockSet, Title: "Part of a lock set",
			Detail: fmt.Sprintf("%s is part of a lock set of %d keys, which is held whole: renew, release or hold the set with its token "+
				"(POST /v1/lock-sets/renew, /v1/lock-sets/release or /v1/lock-sets/hold); nothing was changed", key, inSet.Keys)}, true
	case errors.As(err, &window):
		return Problem{Status: http.StatusConflict, Code: api.ProblemCodeMinHold, Title: "Kept by a hold window",
			Detail: fmt.Sprintf("%s was released by %s inside its hold window, which keeps it for %d ms more", key, window.Owner,
				window.Remaining.Milliseconds()),
			RetryAfter: ceilSeconds(window.Remaining), Remaining: window.Remaining}, true
	case errors.As(err, &delay):
		return Problem{Status: http.StatusConflict, Code: api.ProblemCodeLockDelay, Title: "Held off by a lock-delay",
			Detail: fmt.Sprintf("%s's last lease ended by expiry or force-release; its lock-delay holds the key off for %d ms more, "+
				"so that a holder that has not noticed the loss finishes first", key, delay.Remaining.Milliseconds()),
			RetryAfter: ceilSeconds(delay.Remaining), Remaining: delay.Remaining}, true
	case errors.As(err, &queued):
		what := "is free"
		if sem {
			what = "has a free permit"
		}
		detail := fmt.Sprintf("%s %s, but kept for %d earlier %s", key, what, queued.Waiters, plural(queued.Waiters, "waiter", "waiters"))
		if queued.Next.Owner != "" {
			detail += fmt.Sprintf("; next is %s, waiting since %s", queued.Next.Owner, queued.Next.Since.Format(time.RFC3339Nano))
		}
		return Problem{Status: http.StatusConflict, Code: api.ProblemCodeQueued, Title: "Queued behind earlier waiters",
			Detail: detail, RetryAfter: ceilSeconds(queued.RetryAfter), Queued: queued}, true
	case errors.As(err, &held) && sem:
		return Problem{Status: http.StatusConflict, Code: api.ProblemCodeNoPermits, Title: "No permit is free",
			Detail:     fmt.Sprintf("every permit of %s is held; the first ends in %d ms (%s)", key, held.Remaining.Milliseconds(), held.Owner),
			RetryAfter: ceilSeconds(held.Remaining), Holder: held.Owner, Remaining: held.Remaining}, true
	case errors.As(err, &held):
		return Problem{Status: http.StatusConflict, Code: api.ProblemCodeLockHeld, Title: "Lock is held",
			Detail:     fmt.Sprintf("%s is held by %s for %d ms more", key, held.Owner, held.Remaining.Milliseconds()),
			RetryAfter: ceilSeconds(held.Remaining), Holder: held.Owner, Remaining: held.Remaining}, true
	case errors.Is(err, lock.ErrLeaseLost):
		return Problem{Status: http.StatusConflict, Code: api.ProblemCodeLeaseLost, Title: "Lease lost",
			Detail: "the token is not the live lease's token: stop the protected work"}, true
	case errors.Is(err, lock.ErrIdempotencyMismatch):
		return Problem{Status: http.StatusConflict, Code: api.ProblemCodeIdempotencyMismatch, Title: "Idempotency key reused",
			Detail: "this Idempotency-Key belongs to a live lease acquired with another owner, ttl_ms, mode or limit; nothing was changed"}, true
	case errors.As(err, &full):
		return Problem{Status: http.StatusConflict, Code: api.ProblemCodeTooManyHolders, Title: "Too many holders",
			Detail:     fmt.Sprintf("%s already has %d live holders, the most one key may have; retry when some have released", key, full.Holders),
			RetryAfter: 1}, true
	case errors.As(err, &mode):
		return Problem{Status: http.StatusConflict, Code: api.ProblemCodeModeMismatch, Title: "Mode mismatch",
			Detail: fmt.Sprintf("%s is held %s by this token; a re-entry keeps the lease's mode (leave mode out, or release and acquire %s); nothing was changed", key, mode.Held, mode.Asked),
			Field:  "mode"}, true
	case errors.Is(err, lock.ErrNotExclusive):
		return Problem{Status: http.StatusConflict, Code: api.ProblemCodeNotExclusive, Title: "Not held exclusively",
			Detail: fmt.Sprintf("%s is held shared: its holders hold together, so a request to step aside would ask nobody in particular; nobody was asked (force-release breaks them)", key)}, true
	case errors.Is(err, lock.ErrNotCandidate):
		return Problem{Status: http.StatusConflict, Code: api.ProblemCodeNotCandidate, Title: "Not a candidate",
			Detail: fmt.Sprintf("nobody of that name campaigns for %s now; the leader still leads (GET /v1/elections/%s lists the candidates)", key, key),
			Field:  "to"}, true
	case errors.Is(err, lock.ErrLimitMismatch):
		return Problem{Status: http.StatusConflict, Code: api.ProblemCodeLimitMismatch, Title: "Limit mismatch",
			Detail: fmt.Sprintf("%s is held with another limit; acquire with the limit its holders use (GET /v1/semaphores/%s shows it)", key, key)}, true
	}
	return Problem{}, false
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// ceilSeconds is d in whole seconds, rounded up, at least 1: a client that
// retries after Retry-After must not come back before d is over.
func ceilSeconds(d time.Duration) int {
	return max(1, int(math.Ceil(d.Seconds())))
}
