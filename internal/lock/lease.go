package lock

// The lease vocabulary: what callers ask (AcquireRequest, RenewRequest,
// Options) and what they get (Lease, Outcome, Released, Broken, State,
// Event), shared by the Engine, Redlock and the node under both: it lives
// here, not in the file of one of its users.

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"time"
)

// Options tune the engine. Zero values take the defaults.
type Options struct {
	// HistoryMax is how many events are kept per key (at least; trimmed
	// once 16 past it).
	HistoryMax int
	// Retention is how long a key's history (which carries its last
	// fence) outlives its last lease.
	Retention time.Duration
	// MaxWait is the longest wait a caller may ask for; it bounds how long a
	// dead process's waiter count can linger.
	MaxWait time.Duration
	// MaxWaiters and MaxWaitersPerKey cap the callers waiting in this
	// process; beyond them Acquire answers ErrTooManyWaiters at once.
	MaxWaiters       int
	MaxWaitersPerKey int
	// MaxHoldersPerKey caps the live shared holders or permits of one key
	// (default and at most MaxLimit): past it a shared acquire is
	// ErrTooManyHolders, so no key makes Redis's work per call unbounded.
	MaxHoldersPerKey int
	// CallTimeout bounds each call to Redis as a whole (default 1.9 s).
	CallTimeout time.Duration
	// ReplicaAcks, when above 0, answers a grant, renewal or release only
	// after that many replicas of the key's master acknowledged it (Redis
	// WAIT, at most ReplicaAckTimeout, default 50 ms). A grant that misses
	// its acks is undone; every miss is ErrUnavailable.
	ReplicaAcks       int
	ReplicaAckTimeout time.Duration
	// NoQuarantine turns the restart quarantine off: after Redis lost its
	// data, keys are granted again at once (see acquire.lua).
	NoQuarantine bool
	// MaxTTL caps the quarantine (default 24 h): no lease lives longer.
	MaxTTL time.Duration
	// EpochRefresh is how often this process reads, from the markers it
	// knows, until when leases granted through other processes may be live
	// (default 1 s), and notices a loss of data without a request. After a
	// loss the quarantine lasts until the last lease known to any lockd
	// could end, and at least two refreshes, so that every lockd adds what
	// it granted since its last read.
	EpochRefresh time.Duration
	// Sentinel, when Redis runs under Sentinel, names the sentinels, so
	// that wake-ups follow a failover at once.
	Sentinel *Sentinel
	// RenewalsMax is how many renewals are kept per key, apart from the
	// history (default 100).
	RenewalsMax int
	// EventsMax caps the shared event stream (GET /v1/events, webhooks),
	// and on a Cluster each slot's outbox (default 100 000).
	EventsMax int
	// EventsResumeMax is the resume window of the event stream: a
	// subscriber that resumes reads at most this many events after its
	// Last-Event-ID before it is told to start over (default
	// DefaultEventsResumeMax; see Subscribe).
	EventsResumeMax int
	// SweepInterval is how often the expiry sweeper runs (default 250 ms):
	// a lapse is recorded at most about this long after it happened.
	SweepInterval time.Duration
	// NoSweep turns the expiry sweeper of this process off (tests).
	NoSweep bool
	// Proofs signs the proof of every grant and renewal (Lease.Proof)
	// and verifies those that holders send back (claims.go). Every lockd
	// of a deployment needs the same secrets; nil: no proofs.
	Proofs *Signer
	// redlockMaster marks the node of one Redlock master (NewRedlock):
	// its grants' fences also pass the key's fence counter, which Redlock
	// writes back (fence.lua), and every release wakes waiters, since
	// Redlock's wait in their process, not in the key's queue in Redis.
	redlockMaster bool
}

const (
	defaultHistoryMax = 100
	defaultRetention  = 24 * time.Hour
	defaultMaxWait    = 60 * time.Second
	defaultMaxWaiters = 10_000
	defaultMaxPerKey  = 1_000
	defaultCall       = 1900 * time.Millisecond
)

// withDefaults is opts with each setting that is zero or negative (or, for
// MaxHoldersPerKey, above MaxLimit) at its default.
func (opts Options) withDefaults() Options {
	orDefault(&opts.HistoryMax, defaultHistoryMax)
	orDefault(&opts.Retention, defaultRetention)
	orDefault(&opts.MaxWait, defaultMaxWait)
	orDefault(&opts.MaxWaiters, defaultMaxWaiters)
	orDefault(&opts.MaxWaitersPerKey, defaultMaxPerKey)
	if opts.MaxHoldersPerKey > MaxLimit {
		opts.MaxHoldersPerKey = MaxLimit
	}
	orDefault(&opts.MaxHoldersPerKey, MaxLimit)
	orDefault(&opts.CallTimeout, defaultCall)
	orDefault(&opts.MaxTTL, 24*time.Hour)
	orDefault(&opts.EpochRefresh, time.Second)
	orDefault(&opts.ReplicaAckTimeout, 50*time.Millisecond)
	orDefault(&opts.RenewalsMax, defaultRenewalsMax)
	orDefault(&opts.EventsMax, defaultEventsMax)
	orDefault(&opts.EventsResumeMax, DefaultEventsResumeMax)
	orDefault(&opts.SweepInterval, defaultSweepInterval)
	return opts
}

// orDefault sets *v to def unless *v is above zero.
func orDefault[T int | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

// Outcome says how an acquire succeeded.
type Outcome string

// Acquire outcomes.
const (
	Granted   Outcome = "granted"   // a fresh lease with a new fence
	Reentered Outcome = "reentered" // count+1 on the caller's live lease
	Replayed  Outcome = "replayed"  // an idempotent retry of an earlier grant
)

// AcquireRequest is what a caller asks for.
type AcquireRequest struct {
	Owner string
	TTL   time.Duration
	// Wait is how long to wait while the key is held; 0 tries once.
	Wait time.Duration
	// Token re-enters the live lease that has this token.
	Token string
	// IdempotencyKey makes a retried acquire answer with the lease it
	// already got; it is scoped to Actor.
	IdempotencyKey string
	// Actor is who asks (an API-key name or an address), for history.
	Actor string
	// Mode is Exclusive (the default, "") or Shared for a lock. A
	// semaphore's grants are permits whatever Mode says.
	Mode Mode
	// Limit is a semaphore's limit (1 … MaxLimit); locks ignore it.
	Limit int
	// LockDelay (0 … MaxLockDelay; exclusive locks only): after this
	// lease ends by expiry or force-release, not by its holder's release,
	// nobody is granted the key for this long, so that a holder that has
	// not yet noticed its loss finishes before the next one starts.
	LockDelay time.Duration
	// MinHold (0 … TTL; exclusive holds of a lock only, not in a session)
	// is the hold window, ShedLock's lockAtLeastFor: a release earlier
	// than this after the grant ends the lease, but the key stays taken,
	// by nobody, until the window ends (*MinHoldError meanwhile), so that
	// a job many nodes start at the same moment runs once per window. A
	// re-entry keeps the first grant's window; a renewal does not move it,
	// and the lease lives at least until it ends.
	MinHold time.Duration
	// Value is the grant's value, compact JSON of at most MaxValue bytes
	// ("" for none): readers see it in the state; a re-entry with one
	// replaces it.
	Value string
	// Session binds the grant to the session with this id (session.go):
	// its TTL is the session's, and TTL is ignored. An empty Owner is the
	// session's owner.
	Session string
	// SessionScope is the scope Session was made in (CreateSession).
	SessionScope string

	// Proof is the holder's latest proof of the lease Token re-enters
	// (a hold that resumes it): consulted only when Redis no longer has
	// that lease (claims.go).
	Proof string

	sessionHandle string // the session's handle, once looked up
	// late notes whether a try of this acquire went unanswered: Redis may
	// still run it, and grant, after the caller has its answer.
	late *lateTries
}

// MaxValue is the largest value a grant may carry, in bytes of compact
// JSON.
const MaxValue = 4 << 10

// RenewRequest is a renewal of the lease with Token.
type RenewRequest struct {
	Token string
	// TTL is the new time to live from now; 0 keeps the lease's own.
	TTL   time.Duration
	Actor string
	// Value replaces the grant's value ("" keeps it).
	Value string
	// Proof is the holder's latest proof of the lease: consulted only
	// when Redis no longer has the lease, and for the value and session
	// the renewal's own proof carries on (claims.go).
	Proof string
}

// MaxLockDelay is the longest lock-delay an acquire may ask for.
const MaxLockDelay = time.Minute

// Lease is one grant of a key. Token is the holder's secret.
type Lease struct {
	Resource   Resource
	Owner      string
	Token      string
	Fence      int64
	Count      int
	TTL        time.Duration
	AcquiredAt time.Time
	ExpiresAt  time.Time
	Outcome    Outcome
	// Mode is Exclusive, Shared or (a semaphore's) Permit.
	Mode Mode
	// Limit is a semaphore's limit; 0 for a lock.
	Limit int
	// ReleaseRequested is a request that the holder step aside, answered
	// by a renewal (nil: none).
	ReleaseRequested *ReleaseRequest
	// Proof is the holder's evidence of this lease as Redis answered it
	// (proof.go), which restores it through any lockd should Redis lose
	// it; "" without Options.Proofs. A secret as the token is: it goes to
	// the holder alone, never to a log, a read endpoint or an event.
	Proof string
}

// ReleaseRequest is a request that an exclusive holder step aside
// (RequestRelease): the holder decides.
type ReleaseRequest struct {
	By     string
	Reason string
	At     time.Time
}

// RequestedRelease is the lease a RequestRelease asked.
type RequestedRelease struct {
	Owner string
	Fence int64
	At    time.Time
}

// waitable says whether a failed try should wait: the key is held, Redis
// is away for a moment, or the restart quarantine has not ended.
func waitable(err error) bool {
	return errors.Is(err, ErrHeld) || errors.Is(err, ErrLockDelay) || errors.Is(err, ErrMinHold) || errors.Is(err, ErrQueued) || errors.Is(err, ErrUnavailable) || errors.Is(err, ErrRecovering) || errors.Is(err, errFree)
}

// Released is what a release gave back.
type Released struct {
	// Released is true when the lease is gone, false when only one
	// re-entry level was given back.
	Released bool
	// Count is the re-entry depth left.
	Count int
	// HeldFor is how long the lease was held, when Released (by this
	// host's clock against Redis's: for metrics).
	HeldFor time.Duration
}

// Broken describes a lease that ForceReleaseFence broke.
type Broken struct {
	Owner string
	Fence int64
	// HeldFor is how long the broken lease had been held (for metrics).
	HeldFor time.Duration
}

// State is a live lease as readers see it: never its token.
type State struct {
	Resource   Resource
	Owner      string
	Fence      int64
	Count      int
	TTL        time.Duration
	Remaining  time.Duration
	AcquiredAt time.Time
	RenewedAt  time.Time
	ExpiresAt  time.Time
	Renewals   int64
	// Waiters counts requests waiting on the key across every process:
	// the queue's length (the entries of a lockd that died count until
	// they lapse, within 1.6 s).
	Waiters int
	// HoldersTotal counts the live holders; Holders lists at most
	// StatePage of them (by expiry) and the newest.
	HoldersTotal int
	// Mode is the mode the key is held in: Exclusive, Shared or Permit.
	Mode Mode
	// Limit is a semaphore's limit; 0 for a lock.
	Limit int
	// Holders are the live grants, oldest first; the fields above (Owner,
	// Fence, Count, TTL, times) describe the newest. An exclusive lock has
	// one.
	Holders []Holder
	// Queue is the requests waiting for the key, in the order they will
	// be granted: the live ones among the first StatePage.
	Queue []Queued
	// LeftAtRenewal is how much of the lease was left when it was last
	// renewed (0 before the first renewal).
	LeftAtRenewal time.Duration
	// Value is the newest holder's value (JSON), or "".
	Value string
	// AtRisk says the holder may be about to lose the lease: its last
	// renewal came with less than a third of the TTL left, or a third of
	// the TTL is all that is left (a holder renewing at ttl/3, as lockd's
	// clients do, renews with two thirds left).
	AtRisk bool
	// ReleaseRequested is the pending request that the exclusive holder
	// step aside (nil: none).
	ReleaseRequested *ReleaseRequest
	// MinHoldUntil is when the exclusive lease's hold window ends, while
	// it runs (zero: none). When the holder released inside it, Count is
	// 0 and Holders is empty: nobody holds the key, which frees then
	// (ExpiresAt); Owner and Fence are the released lease's.
	MinHoldUntil time.Time
	// Set is the size of the lock set the exclusive holder took the key
	// with (0: a lone grant).
	Set int
}

// Event is one entry of a key's history.
type Event struct {
	Type   string
	At     time.Time
	Owner  string
	Fence  int64
	TTL    time.Duration
	Count  int
	Actor  string
	Reason string
	// Left is, for a renewal, how much of the lease was left when it came.
	Left time.Duration
	// TraceID is the trace id of the request that caused the event
	// (WithTrace), or "" (a lapse, or a request without one).
	TraceID string
	// Set is the size of the lock set an "acquired" event granted the
	// key with (0: a lone grant).
	Set int
}

// newToken returns 192 random bits as URL-safe text that starts with a
// letter or a digit: one that started with "-" (1 in 64) read as a flag
// when a script passed it to a command line (`lockd session renew ID`), and
// failed there. Drawing again costs a thirty-second of a bit.
func newToken() (string, error) {
	var b [24]byte
	for {
		if _, err := rand.Read(b[:]); err != nil {
			return "", fmt.Errorf("lock: token: %w", err)
		}
		if t := base64.RawURLEncoding.EncodeToString(b[:]); t[0] != '-' && t[0] != '_' {
			return t, nil
		}
	}
}
