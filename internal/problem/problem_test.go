package problem_test

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lockd/lockd/api"
	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/problem"
)

func wrapped(err error) error { return fmt.Errorf("lock: acquire k: %w", err) }
func held(owner string, d time.Duration) error {
	return &lock.HeldError{Resource: lock.Lock("k"), Owner: owner, Remaining: d}
}

// Every error lockd can meet has one answer, whoever renders it.
func TestOf(t *testing.T) {
	tests := []struct {
		name       string
		err        error
		status     int
		code       api.ProblemCode
		title      string
		detail     string // in Detail
		field      string
		retryAfter int
		internal   bool
	}{
		{"held", held("w7", 1500*time.Millisecond), 409, "lock_held", "Lock is held", "k is held by w7 for 1500 ms more", "", 2, false},
		{"held briefly", held("w7", 10*time.Millisecond), 409, "lock_held", "Lock is held", "for 10 ms more", "", 1, false},
		{"held, wrapped", wrapped(held("w8", 3*time.Second)), 409, "lock_held", "Lock is held", "held by w8", "", 3, false},
		{"queued", wrapped(&lock.QueuedError{Resource: lock.Lock("k"), Waiters: 3, Next: lock.Waiter{Owner: "w9", Since: time.UnixMilli(1_790_000_000_000)}, RetryAfter: 1600 * time.Millisecond}),
			409, "queued", "Queued behind earlier waiters", "k is free, but kept for 3 earlier waiters; next is w9", "", 2, false},
		{"queued, one", &lock.QueuedError{Resource: lock.Lock("k"), Waiters: 1, Next: lock.Waiter{Owner: "w9"}, RetryAfter: 300 * time.Millisecond},
			409, "queued", "Queued behind earlier waiters", "kept for 1 earlier waiter;", "", 1, false},
		{"mode mismatch", wrapped(&lock.ModeMismatchError{Held: lock.Shared, Asked: lock.Exclusive}),
			409, "mode_mismatch", "Mode mismatch", "k is held shared by this token", "mode", 0, false},
		{"lease lost", wrapped(lock.ErrLeaseLost), 409, "lease_lost", "Lease lost", "stop the protected work", "", 0, false},
		{"idempotency mismatch", lock.ErrIdempotencyMismatch, 409, "idempotency_mismatch", "Idempotency key reused", "nothing was changed", "", 0, false},
		{"not found", wrapped(lock.ErrNotFound), 404, "not_found", "No live lease", "k has no live lease", "", 0, false},
		{"invalid cursor", lock.ErrInvalidCursor, 400, "invalid_request", "Invalid request", "start again from the first page", "cursor", 0, false},
		{"bad event ID", wrapped(lock.ErrBadEventID), 400, "invalid_request", "Invalid request", "below 2^64", "Last-Event-ID", 0, false},
		{"too many waiters", lock.ErrTooManyWaiters, 429, "too_many_requests", "Too many waiting requests", "retry later", "", 1, false},
		{"recovering", wrapped(&lock.RecoveringError{Remaining: 4200 * time.Millisecond}), 503, "backend_recovering", "Recovering from a Redis data loss", "4200 ms more", "", 5, false},
		{"unavailable", wrapped(lock.ErrUnavailable), 503, "backend_unavailable", "Backend unavailable", "Redis cannot be reached", "", 1, false},
		{"engine closed", lock.ErrClosed, 503, "backend_unavailable", "Shutting down", "shutting down", "", 1, false},
		{"server shutting down", problem.ErrShuttingDown, 503, "backend_unavailable", "Shutting down", "shutting down", "", 1, false},
		// The edge's refusals: the kind gives status, code and title; the
		// *Error its detail, field and Retry-After.
		{"invalid", problem.Invalid("owner", "owner is too long"), 400, "invalid_request", "Invalid request", "owner is too long", "owner", 0, false},
		{"unauthorized", problem.ErrUnauthorized, 401, "unauthorized", "Unauthorized", "an API key is required: Authorization: Bearer <key>", "", 0, false},
		{"unknown key", problem.Errorf(problem.ErrUnauthorized, "unknown API key"), 401, "unauthorized", "Unauthorized", "unknown API key", "", 0, false},
		{"forbidden", problem.Errorf(problem.ErrForbidden, "API key ci lacks the admin scope"), 403, "forbidden", "Forbidden", "lacks the admin scope", "", 0, false},
		{"cross-origin", problem.ErrCrossOrigin, 403, "forbidden", "Cross-origin request refused", "from another web site", "", 0, false},
		{"unknown host", problem.ErrUnknownHost, 403, "forbidden", "Unknown host name", "--allowed-hosts", "Host", 0, false},
		{"too large", problem.Errorf(problem.ErrTooLarge, "the body is over 65536 bytes"), 413, "payload_too_large", "Payload too large", "over 65536 bytes", "", 0, false},
		{"media type", problem.Errorf(problem.ErrMediaType, "the body must be JSON"), 415, "unsupported_media_type", "Unsupported media type", "must be JSON", "", 0, false},
		{"429 gets a Retry-After", wrapped(problem.Errorf(problem.ErrTooManyHolds, "quota")), 429, "too_many_requests", "Too many holds", "quota", "", 1, false},
		{"event streams", problem.ErrTooManyStreams, 429, "too_many_requests", "Too many event streams", "event streams open", "", 1, false},
		{"quota", problem.Errorf(problem.ErrQuota, "API key ci already has 2 hold streams open"), 429, "too_many_requests", "Quota of the API key reached", "2 hold streams", "", 1, false},
		{"429 keeps its own Retry-After", &problem.Error{Kind: problem.ErrTooManyUnknownKeys, Detail: "d", RetryAfter: 7},
			429, "too_many_requests", "Too many failed sign-ins", "d", "", 7, false},
		{"engine kind, own detail", problem.Errorf(lock.ErrLeaseLost, "k is held, but by no holder with fence 4"), 409, "lease_lost", "Lease lost", "no holder with fence 4", "", 0, false},
		// An *Error of no known kind is internal: its detail is not shown.
		{"unknown kind", &problem.Error{Kind: errors.New("secret text of a kind"), Detail: "secret text"}, 500, "internal", "Internal error", "the server logged it", "", 0, true},
		{"anything else", errors.New("ERR redis internals: dial 10.0.0.7:6379"), 500, "internal", "Internal error", "the server logged it", "", 0, true},
		{"limit mismatch", wrapped(lock.ErrLimitMismatch), 409, "limit_mismatch", "Limit mismatch", "k is held with another limit", "", 0, false},
		{"shared unsupported", wrapped(lock.ErrUnsupported), 400, "unsupported", "Not supported by this server", "no shared holds", "mode", 0, false},
		{"elections unsupported", wrapped(lock.ErrNoElections), 400, "unsupported", "Not supported by this server", "has no elections", "", 0, false},
		{"lock-delay unsupported", wrapped(lock.ErrNoLockDelay), 400, "unsupported", "Not supported by this server", "has no lock-delay", "lock_delay_ms", 0, false},
		{"lock delay", wrapped(&lock.DelayError{Resource: lock.Lock("k"), Remaining: 1500 * time.Millisecond}), 409, "lock_delay", "Held off by a lock-delay", "for 1500 ms more", "", 2, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := problem.Of(tc.err, lock.Lock("k"))
			if p.Status != tc.status || p.Code != tc.code || p.Title != tc.title || p.Field != tc.field ||
				p.RetryAfter != tc.retryAfter || p.Internal != tc.internal {
				t.Fatalf("Of = %+v\nwant status %d code %s title %q field %q retry-after %d internal %v",
					p, tc.status, tc.code, tc.title, tc.field, tc.retryAfter, tc.internal)
			}
			if !strings.Contains(p.Detail, tc.detail) {
				t.Fatalf("detail %q, want it to say %q", p.Detail, tc.detail)
			}
			// An error's own text never reaches the client: it may hold
			// Redis addresses or internals.
			if strings.Contains(p.Detail, "10.0.0.7") || strings.Contains(p.Detail, "secret text") {
				t.Fatalf("detail %q shows the error's text", p.Detail)
			}
			if http.StatusText(p.Status) == "" {
				t.Fatalf("status %d is not an HTTP status", p.Status)
			}
		})
	}
}

// The holder is given for a held key, so both edges can show it.
func TestOfHeldCarriesHolder(t *testing.T) {
	p := problem.Of(held("deploy-bot", 2*time.Second), lock.Lock("k"))
	if p.Holder != "deploy-bot" || p.Remaining != 2*time.Second {
		t.Fatalf("holder %q remaining %v", p.Holder, p.Remaining)
	}
}

// About a semaphore the answers speak of permits and name the semaphore,
// never its Redis key part (sem/…).
func TestOfSemaphore(t *testing.T) {
	key := lock.Semaphore("render:pool")
	for _, tc := range []struct {
		name       string
		err        error
		status     int
		code       api.ProblemCode
		detail     string
		field      string
		retryAfter int
	}{
		{"no permits", wrapped(&lock.HeldError{Resource: key, Owner: "w2", Remaining: 4200 * time.Millisecond}), 409, "no_permits",
			"every permit of render:pool is held; the first ends in 4200 ms (w2)", "", 5},
		{"limit mismatch", lock.ErrLimitMismatch, 409, "limit_mismatch", "render:pool is held with another limit", "", 0},
		{"unsupported", wrapped(lock.ErrUnsupported), 400, "unsupported", "has no semaphores", "", 0},
		{"not found", lock.ErrNotFound, 404, "not_found", "semaphore render:pool has no live permit", "", 0},
		{"lease lost", lock.ErrLeaseLost, 409, "lease_lost", "stop the protected work", "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := problem.Of(tc.err, key)
			if p.Status != tc.status || p.Code != tc.code || p.Field != tc.field || p.RetryAfter != tc.retryAfter || p.Internal {
				t.Fatalf("Of = %+v", p)
			}
			if !strings.Contains(p.Detail, tc.detail) || strings.Contains(p.Detail, "sem/") {
				t.Fatalf("detail %q, want it to say %q and not sem/", p.Detail, tc.detail)
			}
		})
	}
	if p := problem.Of(&lock.HeldError{Resource: key, Owner: "w2", Remaining: time.Second}, key); p.Holder != "w2" || p.Remaining != time.Second {
		t.Fatalf("no_permits holder %q remaining %v", p.Holder, p.Remaining)
	}
}
