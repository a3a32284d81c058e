package lock

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockd/lockd/internal/lock/store"
	"github.com/lockd/lockd/internal/lock/wait"
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

// Engine grants, renews and releases leases on Redis. It is safe for
// concurrent use; any number of engines (lockd replicas) may share a Redis.
//
// An Engine is one node (node.go: the scripts on one topology) and what
// runs beside it in this process: the wait hub, the epoch refresher
// (epoch.go), the expiry sweeper (expiry.go) and the event feed
// (events.go).
type Engine struct {
	n         *node
	hub       *wait.Hub[Lease]
	feed      *feed         // the event stream's readers in this process (events.go)
	stop      chan struct{} // ends keepEpochs, the sweeper and give-backs
	stopped   sync.WaitGroup
	closeOnce sync.Once
	leaving   sync.WaitGroup // leave calls in flight
	leaveMu   sync.Mutex
	closing   bool          // no more leave calls
	leaveStop chan struct{} // closed with closing: ends leaves' retries
	lapseMu   sync.Mutex
	lapse     LapseFunc
}

// New returns an engine on rdb and starts its waiter hub (one pub/sub
// connection). Close it to stop the hub.
func New(rdb redis.UniversalClient, opts Options) *Engine {
	opts = opts.withDefaults()
	n := newNode(store.New(rdb, opts.Sentinel), opts)
	e := &Engine{n: n, stop: make(chan struct{}), leaveStop: make(chan struct{})}
	hc := hubConfig(opts)
	hc.Listen = n.subscribe
	hc.Alive = n.alive
	e.hub = wait.New(hc)
	n.seedEpoch()
	e.background(n.loadFunctions)
	e.background(func() { n.keepEpochs(e.stop) })
	e.feed = newFeed(n)
	if !opts.NoSweep {
		e.background(func() { e.sweepLoop(e.stop) })
	}
	return e
}

// background runs f on a goroutine of its own, which Close waits for.
func (e *Engine) background(f func()) {
	e.stopped.Add(1)
	go func() {
		defer e.stopped.Done()
		f()
	}()
}

// Close wakes every waiting caller with ErrClosed and stops the hub. It does
// not close the Redis client, which the caller owns.
func (e *Engine) Close() error {
	e.hub.Close()
	e.leaveMu.Lock()
	if !e.closing {
		e.closing = true
		close(e.leaveStop)
	}
	e.leaveMu.Unlock()
	e.leaving.Wait()
	e.feed.close()
	e.closeOnce.Do(func() { close(e.stop) })
	e.stopped.Wait()
	e.n.close()
	return nil
}

// Ping checks that Redis answers.
func (e *Engine) Ping(ctx context.Context) error { return e.n.ping(ctx) }

// Waiters is the number of callers now waiting in this process.
func (e *Engine) Waiters() int { return e.hub.Waiting() }

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
	// Value is the grant's value, compact JSON of at most MaxValue bytes
	// ("" for none): readers see it in the state; a re-entry with one
	// replaces it.
	Value string
	// Session binds the grant to the session with this id (session.go):
	// its TTL is the session's, and TTL is ignored.
	Session string

	sessionHandle string // the session's handle, once looked up
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
}

// Acquire takes the key, re-enters it (req.Token) or, with req.Wait > 0,
// waits for it. A held key is a *HeldError (errors.Is ErrHeld); a re-entry
// token that is not the live one is ErrLeaseLost; a retry with the
// Idempotency-Key of a live lease is that lease (Outcome Replayed), or
// ErrIdempotencyMismatch when it asks for another owner or TTL. If ctx ends
// while waiting, no lease is left behind.
func (e *Engine) Acquire(ctx context.Context, res Resource, req AcquireRequest) (Lease, error) {
	mode, err := modeArg(res, req)
	if err != nil {
		return Lease{}, err
	}
	token, err := newToken()
	if err != nil {
		return Lease{}, err
	}
	var lease Lease
	if req.Session != "" {
		lease, err = e.acquireInSession(ctx, res, req, token, mode)
	} else {
		lease, err = e.acquire(ctx, res, req, token, mode)
	}
	if err != nil {
		e.giveBackIfUnanswered(res, req, token, err)
	}
	return lease, err
}

// acquire tries once, or queues and waits, for Acquire.
func (e *Engine) acquire(ctx context.Context, res Resource, req AcquireRequest, token, mode string) (Lease, error) {
	key := res.id()
	if req.Wait <= 0 || req.Token != "" {
		return e.n.try(ctx, key, req, token, mode, grantFree, nil)
	}
	// The first try queues the caller in Redis unless it is granted; a
	// waiter queued before it, in this process or another, is granted
	// first (the script decides).
	en, err := newEntry(req.Wait)
	if err != nil {
		return Lease{}, err
	}
	seen := e.hub.Watch(key)
	lease, err := e.n.try(ctx, key, req, token, mode, grantFree, en)
	if err != nil && !waitable(err) {
		// The try may have queued the caller before it failed (its
		// answer cut short when the caller left): take it off again,
		// or it counts as live, ahead of those after it, until its
		// deadline.
		e.leave(key, en.id, time.Now().Add(en.wait+entrySlack))
	}
	if err == nil || !waitable(err) {
		return lease, err
	}
	return e.queue(ctx, key, req, token, mode, en, seen, err)
}

// modeArg is the scripts' mode for what the caller asks (acquireCall's
// mode): "x" an exclusive or "s" a shared hold of a lock, "p" a permit
// of a semaphore.
func modeArg(res Resource, req AcquireRequest) (string, error) {
	if err := res.check(); err != nil {
		return "", err
	}
	if req.LockDelay < 0 || req.LockDelay > MaxLockDelay {
		return "", fmt.Errorf("lock: lock-delay %v is not within 0…%v", req.LockDelay, MaxLockDelay)
	}
	if req.LockDelay > 0 && (res.Kind == KindSemaphore || req.Mode == Shared) {
		return "", errors.New("lock: a lock-delay applies to exclusive locks and elections only")
	}
	if res.Kind == KindElection {
		if req.Mode != "" && req.Mode != Exclusive {
			return "", errors.New("lock: an election has one leader: no shared mode")
		}
		return "x", nil
	}
	if res.Kind == KindSemaphore {
		if req.Limit < 1 || req.Limit > MaxLimit {
			return "", fmt.Errorf("lock: semaphore limit %d is not within 1…%d", req.Limit, MaxLimit)
		}
		return "p", nil
	}
	switch req.Mode {
	case "", Exclusive:
		return "x", nil
	case Shared:
		return "s", nil
	default:
		return "", fmt.Errorf("lock: unknown mode %q", req.Mode)
	}
}

// waitable says whether a failed try should wait: the key is held, Redis
// is away for a moment, or the restart quarantine has not ended.
func waitable(err error) bool {
	return errors.Is(err, ErrHeld) || errors.Is(err, ErrLockDelay) || errors.Is(err, ErrQueued) || errors.Is(err, ErrUnavailable) || errors.Is(err, ErrRecovering) || errors.Is(err, errFree)
}

// queue waits in the hub. Every try of one waiter uses the same token, so a
// try whose answer was lost (a timeout after Redis granted) is found again
// by the next one instead of blocking the key until its TTL ends.
func (e *Engine) queue(ctx context.Context, key string, req AcquireRequest, token, mode string, en *entry, seen wait.Seen, first error) (Lease, error) {
	try := func(ctx context.Context) (Lease, error) {
		return e.n.try(ctx, key, req, token, mode, grantFree, en)
	}
	undo := func(l Lease) {
		// Granted to a caller that has gone: give it straight back.
		rctx, cancel := context.WithTimeout(context.Background(), e.n.opts.CallTimeout)
		defer cancel()
		_, _ = e.Release(rctx, l.Resource, l.Token, req.Actor)
	}
	lease, err := e.hub.Wait(ctx, key, time.Now().Add(req.Wait), wait.Waiter[Lease]{
		Try:   try,
		Undo:  undo,
		Leave: func() { e.leave(key, en.id, time.Now().Add(en.wait+entrySlack)) },
		ID:    en.id,
		Place: en.placed,
	}, seen, first)
	return lease, fromHub(err)
}

// MissedAcks counts writes that fewer replicas acknowledged than
// Options.ReplicaAcks asked for.
func (e *Engine) MissedAcks() (int64, error) { return e.n.missedAcks.Load(), nil }

// Renew sets the lease's expiry to now + ttl (ttl 0: the lease's own TTL).
func (e *Engine) Renew(ctx context.Context, res Resource, req RenewRequest) (Lease, error) {
	if err := res.check(); err != nil {
		return Lease{}, err
	}
	return e.n.renewBy(ctx, res.id(), req, false)
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

// Release gives back one level of the lease; at count 0 the lease is deleted
// and waiters are woken.
func (e *Engine) Release(ctx context.Context, res Resource, token, actor string) (Released, error) {
	if err := res.check(); err != nil {
		return Released{}, err
	}
	key := res.id()
	// A key that went to a waiter of this process is handed over to it.
	return e.n.releaseTo(ctx, key, token, actor, func(h *handed) bool {
		return e.hub.HandOff(key, h.waiter, h.lease)
	})
}

// Broken describes a lease that ForceReleaseFence broke.
type Broken struct {
	Owner string
	Fence int64
	// HeldFor is how long the broken lease had been held (for metrics).
	HeldFor time.Duration
}

// ForceReleaseFence deletes the lease with this fence (0: whoever holds
// the key), records actor and reason in history and wakes waiters. Another
// lease is ErrLeaseLost: a person who confirmed breaking one holder's lease
// does not break the next holder's. Shared holders and permits are broken
// at most fifty per script call (force_release.lua), so breaking every
// holder of a key may take several calls; Broken describes the newest.
func (e *Engine) ForceReleaseFence(ctx context.Context, res Resource, fence int64, actor, reason string) (Broken, error) {
	if err := res.check(); err != nil {
		return Broken{}, err
	}
	return e.n.forceReleaseFence(ctx, res.id(), fence, actor, reason)
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
}

// State returns the key's live lease, or ErrNotFound.
func (e *Engine) State(ctx context.Context, res Resource) (State, error) {
	if err := res.check(); err != nil {
		return State{}, err
	}
	return e.n.state(ctx, res.id())
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
}

// History returns up to limit events of the key, newest first. A lease that
// lapsed since the last event is recorded as "expired" first.
func (e *Engine) History(ctx context.Context, res Resource, limit int) ([]Event, error) {
	if err := res.check(); err != nil {
		return nil, err
	}
	return e.n.readHistory(ctx, res.id(), limit, false)
}

// Renewals returns up to limit renewals of the key, newest first, each
// with how much of the lease was left when it came (Event.Left). They are
// kept apart from the history (Options.RenewalsMax of them), so that a
// lease renewed every second never pushes its story out of the history.
func (e *Engine) Renewals(ctx context.Context, res Resource, limit int) ([]Event, error) {
	if err := res.check(); err != nil {
		return nil, err
	}
	return e.n.readHistory(ctx, res.id(), limit, true)
}

// newToken returns 192 random bits as URL-safe text.
func newToken() (string, error) {
	var b [24]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("lock: token: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}
