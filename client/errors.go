package client

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/lockd/lockd/api"
)

// Sentinel errors: test with errors.Is.
var (
	// ErrHeld means another lease holds the key (after the wait, if any).
	// The error is a *HeldError.
	ErrHeld = errors.New("lockd: lock held")
	// ErrQueued means nobody holds what was asked for, but requests that
	// began to wait earlier come first (after the wait, if any): retry
	// after the error's RetryAfter, or wait. The error is a *QueuedError.
	ErrQueued = errors.New("lockd: queued behind earlier waiters")
	// ErrLockDelay means the key's last lease ended by expiry or
	// force-release and its lock-delay has not passed: retry after the
	// error's RetryAfter, or wait.
	ErrLockDelay = errors.New("lockd: held off by a lock-delay")
	// ErrMinHold means the key's holder released it inside its hold
	// window (AcquireOptions.MinHold), which keeps it taken, by nobody,
	// until it ends: retry after the error's RetryAfter, or wait.
	ErrMinHold = errors.New("lockd: kept until its hold window ends")
	// ErrNoPermits means every permit of the semaphore is held (after the
	// wait, if any). The error is a *NoPermitsError.
	ErrNoPermits = errors.New("lockd: no permit free")
	// ErrLimitMismatch means the semaphore's permits are held with another
	// limit than the one asked for: every holder of a semaphore must use
	// the same limit.
	ErrLimitMismatch = errors.New("lockd: semaphore held with another limit")
	// ErrModeMismatch means a re-entry asked for another mode than the
	// lease's (a shared holder cannot upgrade to exclusive by re-entering).
	ErrModeMismatch = errors.New("lockd: re-entry with another mode than the lease's")
	// ErrNotExclusive means a request that the holder step aside
	// (RequestRelease) found the key held shared, whose holders hold
	// together; nobody was asked.
	ErrNotExclusive = errors.New("lockd: the key is not held exclusively")
	// ErrNotCandidate means a handover (Lease.Handover) named a candidate
	// that is not campaigning; the leader still leads.
	ErrNotCandidate = errors.New("lockd: the candidate is not campaigning")
	// ErrInLockSet means one key of a lock set was renewed, released or
	// re-entered alone with the set's token: a set is held whole (LockSet's
	// Renew and Release); nothing was changed.
	ErrInLockSet = errors.New("lockd: the key is part of a lock set")
	// ErrTooManyHolders means the key has as many live shared holders or
	// permits as the server allows for one key.
	ErrTooManyHolders = errors.New("lockd: too many holders of one key")
	// ErrLeaseLost means the lease is no longer ours: its token is not the
	// live one, the key has no live lease on renew or release, or it could
	// not be renewed before it expired. Stop the protected work.
	ErrLeaseLost = errors.New("lockd: lease lost")
	// ErrNotFound means the key has no live lease (status, force-release).
	ErrNotFound = errors.New("lockd: no live lease")
	// ErrUnavailable means the server could not be reached or answered 5xx
	// (503: its Redis is down). These are the errors worth retrying.
	ErrUnavailable = errors.New("lockd: server unavailable")
	// ErrUnauthorized means the API key is missing or unknown (401).
	ErrUnauthorized = errors.New("lockd: unauthorized")
	// ErrForbidden means the API key lacks the scope or the key prefix (403).
	ErrForbidden = errors.New("lockd: forbidden")
	// ErrInvalid means the server rejected the request as malformed (400,
	// 413, 415): a bad key, TTL or wait out of range.
	ErrInvalid = errors.New("lockd: invalid request")
	// ErrUnsupported means the server cannot do what was asked: a server
	// in Redlock mode has neither shared holds nor semaphores (400).
	ErrUnsupported = errors.New("lockd: not supported by this server")
	// ErrReleased is the cause of a lease's Context after Release.
	ErrReleased = errors.New("lockd: lease released")
)

// APIError is an error answer of the server: its status and its RFC 9457
// problem body. It unwraps to the matching sentinel error.
type APIError struct {
	Status  int
	Problem api.Problem
	// RetryAfter is the server's Retry-After header, or 0.
	RetryAfter time.Duration
}

// Error gives the problem's detail and code.
func (e *APIError) Error() string {
	msg := e.Problem.Title
	if e.Problem.Detail != nil && *e.Problem.Detail != "" {
		msg = *e.Problem.Detail
	}
	if msg == "" {
		msg = http.StatusText(e.Status)
	}
	code := string(e.Problem.Code)
	if code == "" {
		code = strconv.Itoa(e.Status)
	} else {
		code = strconv.Itoa(e.Status) + " " + code
	}
	return fmt.Sprintf("%s (%s)", msg, code)
}

// Unwrap maps the problem code (or, for answers that are not problem+json,
// the status) to a sentinel error.
func (e *APIError) Unwrap() error {
	switch e.Problem.Code {
	case api.ProblemCodeLockHeld:
		return ErrHeld
	case api.ProblemCodeQueued:
		return ErrQueued
	case api.ProblemCodeLockDelay:
		return ErrLockDelay
	case api.ProblemCodeMinHold:
		return ErrMinHold
	case api.ProblemCodeNoPermits:
		return ErrNoPermits
	case api.ProblemCodeLimitMismatch:
		return ErrLimitMismatch
	case api.ProblemCodeModeMismatch:
		return ErrModeMismatch
	case api.ProblemCodeNotExclusive:
		return ErrNotExclusive
	case api.ProblemCodeNotCandidate:
		return ErrNotCandidate
	case api.ProblemCodeInLockSet:
		return ErrInLockSet
	case api.ProblemCodeTooManyHolders:
		return ErrTooManyHolders
	case api.ProblemCodeUnsupported:
		return ErrUnsupported
	case api.ProblemCodeLeaseLost:
		return ErrLeaseLost
	case api.ProblemCodeNotFound:
		return ErrNotFound
	case api.ProblemCodeSessionNotFound:
		return ErrSessionNotFound
	case api.ProblemCodeUnauthorized:
		return ErrUnauthorized
	case api.ProblemCodeForbidden:
		return ErrForbidden
	case api.ProblemCodeInvalidRequest, api.ProblemCodePayloadTooLarge, api.ProblemCodeUnsupportedMediaType:
		return ErrInvalid
	}
	switch {
	case e.Status >= 500:
		return ErrUnavailable
	case e.Status == http.StatusUnauthorized:
		return ErrUnauthorized
	case e.Status == http.StatusForbidden:
		return ErrForbidden
	case e.Status == http.StatusNotFound:
		return ErrNotFound
	}
	return nil
}

// HeldError is the answer to an acquire that lost to another holder.
type HeldError struct {
	APIError
	Key       string
	Holder    string
	Remaining time.Duration
}

// Error says who holds the key.
func (e *HeldError) Error() string {
	return fmt.Sprintf("%s is held by %s for %v more", e.Key, e.Holder, e.Remaining)
}

// Unwrap makes errors.Is(err, ErrHeld) true.
func (e *HeldError) Unwrap() error { return ErrHeld }

// QueuedError is the answer to an acquire that found what it asked for
// free, but kept for requests that began to wait earlier. It names no
// holder: a waiter holds nothing.
type QueuedError struct {
	APIError
	Key string
	// Waiters is how many requests are queued for the key.
	Waiters int
	// Next is the owner of the first of them, and since when it waits.
	Next      string
	NextSince time.Time
}

// Error says who comes first.
func (e *QueuedError) Error() string {
	return fmt.Sprintf("%s is kept for %d earlier waiter(s); next is %s", e.Key, e.Waiters, e.Next)
}

// Unwrap makes errors.Is(err, ErrQueued) true.
func (e *QueuedError) Unwrap() error { return ErrQueued }

// NoPermitsError is the answer to a semaphore acquire that found every
// permit held. Holder and Remaining describe the permit that ends first:
// the earliest a permit may come free without a release.
type NoPermitsError struct {
	APIError
	Name      string
	Holder    string
	Remaining time.Duration
}

// Error says when a permit may come free.
func (e *NoPermitsError) Error() string {
	return fmt.Sprintf("every permit of %s is held; the first ends in %v (%s)", e.Name, e.Remaining, e.Holder)
}

// Unwrap makes errors.Is(err, ErrNoPermits) true.
func (e *NoPermitsError) Unwrap() error { return ErrNoPermits }

// retryAfter is the server's Retry-After in err, or 0.
func retryAfter(err error) time.Duration {
	var ae *APIError
	if errors.As(err, &ae) {
		return ae.RetryAfter
	}
	var he *HeldError
	if errors.As(err, &he) {
		return he.RetryAfter
	}
	var ne *NoPermitsError
	if errors.As(err, &ne) {
		return ne.RetryAfter
	}
	var qe *QueuedError
	if errors.As(err, &qe) {
		return qe.RetryAfter
	}
	return 0
}

// parseRetryAfter reads delay-seconds or an HTTP date.
func parseRetryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	if n, err := strconv.Atoi(v); err == nil && n >= 0 {
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(0, time.Until(t))
	}
	return 0
}
