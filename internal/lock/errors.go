package lock

import (
	"errors"
	"fmt"
	"time"
)

var (
	// ErrHeld means another lease holds the key. The error is a *HeldError.
	ErrHeld = errors.New("lock: held by another lease")
	// ErrQueued means nobody holds what was asked for, but requests that
	// began to wait earlier come first (the queue is FIFO). The error is a
	// *QueuedError.
	ErrQueued = errors.New("lock: queued behind earlier waiters")
	// ErrLeaseLost means the token given is not the live lease's token.
	ErrLeaseLost = errors.New("lock: lease lost")
	// ErrNotFound means the key has no live lease.
	ErrNotFound = errors.New("lock: no live lease")
	// ErrUnavailable means Redis could not be reached or did not answer in time.
	ErrUnavailable = errors.New("lock: backend unavailable")
	// ErrRecovering means Redis lost its data and lockd grants nothing
	// until every lease that could have been live then has expired. The
	// error is a *RecoveringError.
	ErrRecovering = errors.New("lock: recovering from a loss of Redis data")
	// ErrLockDelay means a key's last lease ended by expiry or
	// force-release and its lock-delay has not passed (*DelayError).
	ErrLockDelay = errors.New("lock: held off by a lock-delay")
	// ErrMinHold means a key's holder released it inside its hold window
	// (AcquireRequest.MinHold): nobody holds it, but it stays taken until
	// the window ends (*MinHoldError).
	ErrMinHold = errors.New("lock: kept until the hold window ends")
	// ErrClosed means the engine is shutting down.
	ErrClosed = errors.New("lock: engine closed")
	// ErrTooManyWaiters means the process already has as many waiting
	// callers, in all or on the key, as Options allow.
	ErrTooManyWaiters = errors.New("lock: too many waiters")
	// ErrTooManyHolders means a key has as many live shared holders or
	// permits as Options.MaxHoldersPerKey allows. The error is a
	// *TooManyHoldersError.
	ErrTooManyHolders = errors.New("lock: too many holders of one key")
	// ErrIdempotencyMismatch means an acquire repeated the Idempotency-Key
	// of a live lease but asked for another owner or TTL.
	ErrIdempotencyMismatch = errors.New("lock: idempotency key reused with another owner, ttl, mode, limit or value")
	// ErrModeMismatch means a re-entry asked for another mode than the
	// lease's (a shared holder asking to re-enter exclusive: an upgrade,
	// which lockd does not do). The error is a *ModeMismatchError.
	ErrModeMismatch = errors.New("lock: re-entry with another mode than the lease's")
	// ErrInvalidCursor means a list cursor was not one this engine handed out.
	ErrInvalidCursor = errors.New("lock: invalid cursor")
	// ErrLimitMismatch means a semaphore acquire asked for another limit
	// than the one its holders hold it with.
	ErrLimitMismatch = errors.New("lock: the semaphore is held with another limit")
	// ErrUnsupported means the engine cannot do what was asked (shared
	// holds, semaphores, the event stream and replica acks are not
	// available with Redlock; see Service).
	ErrUnsupported = errors.New("lock: not supported by this engine")
	// ErrNoSemaphores is Redlock's ErrUnsupported for any semaphore
	// operation, the list included: an empty list or a 404 would read as
	// "no semaphore is in use".
	ErrNoSemaphores = fmt.Errorf("%w: Redlock has no semaphores: they need one Redis, Sentinel or Cluster", ErrUnsupported)
	// ErrNoEventStream is Redlock's ErrUnsupported for the event stream:
	// each master records only the events it took part in, failed
	// attempts included, so no one stream has them all, or only true ones.
	ErrNoEventStream = fmt.Errorf("%w: Redlock has no event stream: it needs one Redis, Sentinel or Cluster", ErrUnsupported)
	// ErrNoReplicaAcks is Redlock's ErrUnsupported for MissedAcks: its
	// masters are independent, and replica acks are refused at the start.
	ErrNoReplicaAcks = fmt.Errorf("%w: Redlock has no replica acks: its masters are independent", ErrUnsupported)
	// ErrNoLockDelay answers a lock-delay on Redlock: a lapse is seen by
	// each master apart, so no one of them can hold the key off for all.
	ErrNoLockDelay = fmt.Errorf("%w: Redlock has no lock-delay", ErrUnsupported)
	// ErrNoMinHold answers a hold window on Redlock: a release reaches
	// each master apart, so no quorum could keep the key for the window.
	ErrNoMinHold = fmt.Errorf("%w: Redlock has no hold windows", ErrUnsupported)
	// ErrNoElections answers every election operation on Redlock.
	ErrNoElections = fmt.Errorf("%w: Redlock has no elections", ErrUnsupported)
	// ErrNoReleaseRequests is Redlock's ErrUnsupported for RequestRelease:
	// a request lives in the lease, which each master keeps apart.
	ErrNoReleaseRequests = fmt.Errorf("%w: Redlock has no release requests", ErrUnsupported)
	// ErrNotExclusive means a request that a holder step aside found the
	// key held shared or by permits, which hold together.
	ErrNotExclusive = errors.New("lock: the key is not held exclusively")
	// ErrNotCandidate means a handover named a candidate that is not
	// campaigning (waiting) for the election; the leader still leads.
	ErrNotCandidate = errors.New("lock: the candidate is not campaigning")
)

// HeldError says who holds a key and for how long.
type HeldError struct {
	Resource  Resource
	Owner     string
	Remaining time.Duration
}

// Error describes the holder.
func (e *HeldError) Error() string {
	return fmt.Sprintf("lock: %s is held by %s for %d ms more", e.Resource, e.Owner, e.Remaining.Milliseconds())
}

// Unwrap makes errors.Is(err, ErrHeld) true.
func (e *HeldError) Unwrap() error { return ErrHeld }

// QueuedError says that earlier waiters come first: how many wait, and
// the first of them. It names no holder: a waiter holds nothing.
type QueuedError struct {
	Resource Resource
	Waiters  int
	Next     Waiter
	// RetryAfter is when a try may find the queue moved: the next waiter
	// takes the key at once if it is live, or its entry lapses within the
	// liveness window if its lockd died.
	RetryAfter time.Duration
}

// Waiter is a request queued for a key.
type Waiter struct {
	Owner string
	Since time.Time
}

// queuedRetry bounds QueuedError.RetryAfter: a live next waiter takes the
// key at once, a dead one leaves the queue within aliveFor.
const queuedRetry = aliveFor

// Error describes the queue.
func (e *QueuedError) Error() string {
	return fmt.Sprintf("lock: %s is free but kept for %d earlier waiter(s), first %s", e.Resource, e.Waiters, e.Next.Owner)
}

// Unwrap makes errors.Is(err, ErrQueued) true.
func (e *QueuedError) Unwrap() error { return ErrQueued }

// DelayError says that a key's last lease ended by expiry or
// force-release and its lock-delay holds the key off for Remaining more.
type DelayError struct {
	Resource  Resource
	Remaining time.Duration
}

// Error says how long the key is held off.
func (e *DelayError) Error() string {
	return fmt.Sprintf("lock: %s is held off by its lock-delay for %d ms more", e.Resource, e.Remaining.Milliseconds())
}

// Unwrap makes errors.Is(err, ErrLockDelay) true.
func (e *DelayError) Unwrap() error { return ErrLockDelay }

// MinHoldError says that a key's holder released it inside its hold
// window, which keeps it taken, by nobody, for Remaining more.
type MinHoldError struct {
	Resource  Resource
	Owner     string // who held it last
	Remaining time.Duration
}

// Error says how long the key stays taken.
func (e *MinHoldError) Error() string {
	return fmt.Sprintf("lock: %s was released by %s inside its hold window, which keeps it for %d ms more", e.Resource, e.Owner,
		e.Remaining.Milliseconds())
}

// Unwrap makes errors.Is(err, ErrMinHold) true.
func (e *MinHoldError) Unwrap() error { return ErrMinHold }

// ErrInLockSet means a key of a lock set was renewed, released or
// re-entered alone, by the set's token: a set is held whole, so only the
// set's own renew, release or hold acts on its keys (lockset.go). The
// error is an *InSetError.
var ErrInLockSet = errors.New("lock: the key is part of a lock set")

// InSetError says that a key is part of a lock set of Keys keys.
type InSetError struct {
	Keys int
}

func (e *InSetError) Error() string {
	return fmt.Sprintf("lock: the key is part of a lock set of %d keys: renew, release or hold the set", e.Keys)
}

// Unwrap makes errors.Is(err, ErrInLockSet) true.
func (e *InSetError) Unwrap() error { return ErrInLockSet }

// inSet is the error of a script's {"in_set", n}.
func inSet(r *reply) error {
	n := int(r.int(1))
	if r.err != nil {
		return r.err
	}
	return &InSetError{Keys: n}
}

// blockedFor says whether err is a key that someone else comes first for
// (a holder, earlier waiters, a lock-delay, a hold window), and how long
// that lasts at most.
func blockedFor(err error) (time.Duration, bool) {
	var delay *DelayError
	if errors.As(err, &delay) {
		return delay.Remaining, true
	}
	var window *MinHoldError
	if errors.As(err, &window) {
		return window.Remaining, true
	}
	var held *HeldError
	if errors.As(err, &held) {
		return held.Remaining, true
	}
	var queued *QueuedError
	if errors.As(err, &queued) {
		return queued.RetryAfter, true
	}
	return 0, false
}

// TooManyHoldersError says how many hold the key.
type TooManyHoldersError struct {
	Holders int
}

// Error says how many hold the key.
func (e *TooManyHoldersError) Error() string {
	return fmt.Sprintf("lock: the key already has %d live holders, the most one key may have", e.Holders)
}

// Unwrap makes errors.Is(err, ErrTooManyHolders) true.
func (e *TooManyHoldersError) Unwrap() error { return ErrTooManyHolders }

// ModeMismatchError says which mode the lease has.
type ModeMismatchError struct {
	Held, Asked Mode
}

// Error names both modes.
func (e *ModeMismatchError) Error() string {
	return fmt.Sprintf("lock: the lease is held %s; a re-entry cannot make it %s", e.Held, e.Asked)
}

// Unwrap makes errors.Is(err, ErrModeMismatch) true.
func (e *ModeMismatchError) Unwrap() error { return ErrModeMismatch }

// RecoveringError says how long the restart quarantine still lasts.
type RecoveringError struct {
	Remaining time.Duration
}

// Error describes the quarantine.
func (e *RecoveringError) Error() string {
	return fmt.Sprintf("lock: Redis lost its data; no key is granted for %d ms more, until every lease it forgot has expired", e.Remaining.Milliseconds())
}

// Unwrap makes errors.Is(err, ErrRecovering) true.
func (e *RecoveringError) Unwrap() error { return ErrRecovering }
