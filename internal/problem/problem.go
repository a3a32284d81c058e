// Package problem is lockd's one classification of errors at the HTTP
// edge: Of turns an error into its status, machine code, title and detail.
// The API writes the answer as application/problem+json
// (internal/server), the dashboard as its HTML error page (web), so an
// error maps to a status in one place and both say the same thing.
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

// Known is an error that already knows its answer: a request the edge
// refuses before the engine sees it (bad input, no credentials, a quota).
type Known interface {
	error
	Problem() Problem
}

// ErrShuttingDown answers requests that arrive while the server stops.
var ErrShuttingDown = errors.New("server is shutting down")

// Of is the answer to err, about the engine key (which may be ""): a lock
// key, or a semaphore's lock.SemaphoreKey, whose answers speak of permits
// and name the semaphore. A client that went away (context.Canceled) is
// the caller's to notice first: nobody reads that answer.
func Of(err error, key string) Problem {
	var known Known
	var held *lock.HeldError
	var queued *lock.QueuedError
	var mode *lock.ModeMismatchError
	var full *lock.TooManyHoldersError
	var recovering *lock.RecoveringError
	key, sem := lock.SplitKey(key)
	switch {
	case errors.As(err, &known):
		p := known.Problem()
		if (p.Status == http.StatusServiceUnavailable || p.Status == http.StatusTooManyRequests) && p.RetryAfter < 1 {
			p.RetryAfter = 1
		}
		return p
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
			Detail: detail, RetryAfter: ceilSeconds(queued.RetryAfter), Queued: queued}
	case errors.As(err, &held) && sem:
		return Problem{Status: http.StatusConflict, Code: api.ProblemCodeNoPermits, Title: "No permit is free",
			Detail:     fmt.Sprintf("every permit of %s is held; the first ends in %d ms (%s)", key, held.Remaining.Milliseconds(), held.Owner),
			RetryAfter: ceilSeconds(held.Remaining), Holder: held.Owner, Remaining: held.Remaining}
	case errors.As(err, &held):
		return Problem{Status: http.StatusConflict, Code: api.ProblemCodeLockHeld, Title: "Lock is held",
			Detail:     fmt.Sprintf("%s is held by %s for %d ms more", key, held.Owner, held.Remaining.Milliseconds()),
			RetryAfter: ceilSeconds(held.Remaining), Holder: held.Owner, Remaining: held.Remaining}
	case errors.Is(err, lock.ErrLeaseLost):
		return Problem{Status: http.StatusConflict, Code: api.ProblemCodeLeaseLost, Title: "Lease lost",
			Detail: "the token is not the live lease's token: stop the protected work"}
	case errors.Is(err, lock.ErrIdempotencyMismatch):
		return Problem{Status: http.StatusConflict, Code: api.ProblemCodeIdempotencyMismatch, Title: "Idempotency key reused",
			Detail: "this Idempotency-Key belongs to a live lease acquired with another owner, ttl_ms, mode or limit; nothing was changed"}
	case errors.As(err, &full):
		return Problem{Status: http.StatusConflict, Code: api.ProblemCodeTooManyHolders, Title: "Too many holders",
			Detail:     fmt.Sprintf("%s already has %d live holders, the most one key may have; retry when some have released", key, full.Holders),
			RetryAfter: 1}
	case errors.As(err, &mode):
		return Problem{Status: http.StatusConflict, Code: api.ProblemCodeModeMismatch, Title: "Mode mismatch",
			Detail: fmt.Sprintf("%s is held %s by this token; a re-entry keeps the lease's mode (leave mode out, or release and acquire %s); nothing was changed", key, mode.Held, mode.Asked),
			Field:  "mode"}
	case errors.Is(err, lock.ErrLimitMismatch):
		return Problem{Status: http.StatusConflict, Code: api.ProblemCodeLimitMismatch, Title: "Limit mismatch",
			Detail: fmt.Sprintf("%s is held with another limit; acquire with the limit its holders use (GET /v1/semaphores/%s shows it)", key, key)}
	case errors.Is(err, lock.ErrNoEventStream):
		return Problem{Status: http.StatusBadRequest, Code: api.ProblemCodeUnsupported, Title: "Not supported by this server",
			Detail: "this server runs Redlock, which has no event stream: each master records only the events it took part in, " +
				"so no one stream has them all; GET /v1/events, the dashboard's live updates and webhooks need one Redis, Sentinel or Cluster"}
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
				"nothing was granted or changed that Redis did not confirm",
			RetryAfter: 1}
	case errors.Is(err, lock.ErrClosed), errors.Is(err, ErrShuttingDown):
		return Problem{Status: http.StatusServiceUnavailable, Code: api.ProblemCodeBackendUnavailable, Title: "Shutting down",
			Detail: "the server is shutting down; retry on another replica or in a moment", RetryAfter: 1}
	default:
		return Problem{Status: http.StatusInternalServerError, Code: api.ProblemCodeInternal, Title: "Internal error",
			Detail: "internal error; the server logged it", Internal: true}
	}
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
