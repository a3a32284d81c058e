package lock

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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
	// redlockMaster marks the engine of one Redlock master (NewRedlock):
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
type Engine struct {
	st *store.Store

	missedAcks atomic.Int64
	epochs     epochs
	stop       chan struct{} // ends keepEpochs and the sweeper
	stopped    sync.WaitGroup
	closeOnce  sync.Once
	opts       Options
	scripts    scripts
	hub        *wait.Hub[Lease]
	id         string // this process, in the queues and sweeper leases in Redis
	feed       *feed  // the event stream's readers in this process (events.go)
	sweeper    sweeper
	leaving    sync.WaitGroup // leave calls in flight
	leaveMu    sync.Mutex
	closing    bool                         // no more leave calls
	shared     [1]*sharedKeys               // one server or Sentinel: the one bucket
	slotShared []atomic.Pointer[sharedKeys] // Cluster: per slot, made when first used
	arg        args
	lapseMu    sync.Mutex
	lapse      LapseFunc
	cursorKey  cursorKey // the list cursors' cipher (list.go)
}

// New returns an engine on rdb and starts its waiter hub (one pub/sub
// connection). Close it to stop the hub.
func New(rdb redis.UniversalClient, opts Options) *Engine {
	opts = opts.withDefaults()
	st := store.New(rdb, opts.Sentinel)
	sc, fns := loadScripts(st.Sharded(), scriptConfigOf(opts))
	st.UseFunctions(fns)
	e := &Engine{st: st, opts: opts, scripts: sc}
	var id [8]byte
	_, _ = rand.Read(id[:])
	e.epochs.seed = hex.EncodeToString(id[:])
	e.id = hex.EncodeToString(id[:])
	hc := hubConfig(opts)
	hc.Listen = func(l wait.Listener) wait.Subscription { return st.Subscribe(wakeChannels, l) }
	hc.Alive = e.alive
	e.hub = wait.New(hc)
	e.arg = args{
		historyMax:  opts.HistoryMax,
		retention:   opts.Retention.Milliseconds(),
		eventsMax:   opts.EventsMax,
		renewalsMax: opts.RenewalsMax,
		replica:     e.id,
		alive:       aliveFor.Milliseconds(),
		queueTTL:    (opts.MaxWait + time.Minute).Milliseconds(),
	}
	if st.Sharded() {
		e.slotShared = make([]atomic.Pointer[sharedKeys], store.Slots)
	} else {
		e.shared[0] = e.newShared("")
	}
	e.seedEpoch()
	e.stop = make(chan struct{})
	e.stopped.Add(1)
	go func() {
		// The function library, loaded before the first call needs it (a
		// call that finds it missing loads it too).
		defer e.stopped.Done()
		ctx, cancel := context.WithTimeout(context.Background(), opts.CallTimeout)
		defer cancel()
		_ = st.LoadFunctions(ctx)
	}()
	e.stopped.Add(1)
	go func() {
		defer e.stopped.Done()
		e.keepEpochs(e.stop)
	}()
	e.feed = newFeed(e)
	if !opts.NoSweep {
		e.stopped.Add(1)
		go func() {
			defer e.stopped.Done()
			e.sweepLoop(e.stop)
		}()
	}
	return e
}

// Close wakes every waiting caller with ErrClosed and stops the hub. It does
// not close the Redis client, which the caller owns.
func (e *Engine) Close() error {
	e.hub.Close()
	e.leaveMu.Lock()
	e.closing = true
	e.leaveMu.Unlock()
	e.leaving.Wait()
	e.feed.close()
	e.closeOnce.Do(func() { close(e.stop) })
	e.stopped.Wait()
	e.st.Close()
	return nil
}

// Ping checks that Redis answers.
func (e *Engine) Ping(ctx context.Context) error {
	ctx, cancel := e.bound(ctx)
	defer cancel()
	return wrap("ping", e.st.Ping(ctx))
}

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

// delayArg is acquire.lua's lock-delay argument: ms, or "" for none.
func delayArg(d time.Duration) string {
	if d <= 0 {
		return ""
	}
	return strconv.FormatInt(max(1, d.Milliseconds()), 10)
}

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
	want, err := want(res, req)
	if err != nil {
		return Lease{}, err
	}
	token, err := newToken()
	if err != nil {
		return Lease{}, err
	}
	lease, err := e.acquire(ctx, res, req, token, want)
	if err != nil {
		e.giveBackIfUnanswered(res, req, token, err)
	}
	return lease, err
}

// acquire tries once, or queues and waits, for Acquire.
func (e *Engine) acquire(ctx context.Context, res Resource, req AcquireRequest, token, want string) (Lease, error) {
	key := res.id()
	if req.Wait <= 0 || req.Token != "" {
		return e.try(ctx, key, req, token, want, nil)
	}
	// The first try queues the caller in Redis unless it is granted; a
	// waiter queued before it, in this process or another, is granted
	// first (the script decides).
	en, err := newEntry(req.Wait)
	if err != nil {
		return Lease{}, err
	}
	seen := e.hub.Watch(key)
	lease, err := e.try(ctx, key, req, token, want, en)
	if err == nil || !waitable(err) {
		return lease, err
	}
	return e.queue(ctx, key, req, token, want, en, seen, err)
}

// want is the script's name for what the caller asks: an exclusive or
// shared hold of a lock, or a permit of a semaphore.
func want(res Resource, req AcquireRequest) (string, error) {
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
func (e *Engine) queue(ctx context.Context, key string, req AcquireRequest, token, want string, en *entry, seen wait.Seen, first error) (Lease, error) {
	try := func(ctx context.Context) (Lease, error) {
		return e.try(ctx, key, req, token, want, en)
	}
	undo := func(l Lease) {
		// Granted to a caller that has gone: give it straight back.
		rctx, cancel := context.WithTimeout(context.Background(), e.opts.CallTimeout)
		defer cancel()
		_, _ = e.Release(rctx, l.Resource, l.Token, req.Actor)
	}
	lease, err := e.hub.Wait(ctx, key, time.Now().Add(req.Wait), wait.Waiter[Lease]{
		Try:   try,
		Undo:  undo,
		Leave: func() { e.leave(key, en.id) },
		ID:    en.id,
		Place: en.placed,
	}, seen, first)
	return lease, fromHub(err)
}

// try modes: take a free key, or only look (re-entry, idempotent replay,
// holder) and leave a free key to the waiters queued before the caller
// (Redlock, whose queues live in each process).
const (
	grantFree = "grant"
	peek      = "peek"
)

// errFree is a peek's answer when the key is free.
var errFree = errors.New("lock: key is free")

// try runs the acquire script once. want is "x", "s" or "p" (Engine.want);
// en is the caller's place in the key's queue, nil for a request that
// does not wait.
func (e *Engine) try(ctx context.Context, key string, req AcquireRequest, token, want string, en *entry) (Lease, error) {
	ctx, cancel := e.bound(ctx)
	defer cancel()
	k := keysOf(key)
	idem := ""
	if req.IdempotencyKey != "" {
		sum := sha256.Sum256([]byte(req.Actor + "\x00" + req.IdempotencyKey))
		idem = hex.EncodeToString(sum[:])
	}
	sh := e.sharedOf(key)
	seen, live, least := e.epochArgs(sh)
	mode := grantFree
	if want == peekX {
		want, mode = "x", peek
	}
	wid, place, deadline := "", "", int64(0)
	if en != nil {
		wid, place, deadline = en.id, en.place(), (en.wait + entrySlack).Milliseconds()
	}
	c := acquireCall{keys: k, shared: sh, token: token, owner: packable(req.Owner), ttlMS: req.TTL.Milliseconds(),
		reentry: req.Token, idem: idem, actor: packable(req.Actor), intent: mode,
		seen: seen, liveMS: live, newEpoch: e.newEpochID(), minMS: least,
		mode: want, limit: req.Limit, waiter: wid, deadline: deadline, place: place, named: named(req),
		delay: delayArg(req.LockDelay), value: req.Value}
	keys, argv := c.run(e)
	v, err := e.write(ctx, e.scripts.acquire, keys, argv...)
	unacked := errors.Is(err, errNoAcks)
	if err != nil && !unacked {
		return Lease{}, wrap("acquire", err)
	}
	r, err := decodeAcquire(v)
	if err != nil {
		return Lease{}, err
	}
	return e.acquired(ctx, key, req, want, en, sh, r, unacked)
}

// acquired turns acquire.lua's reply r into the caller's answer, noting
// the epoch it names and the waiter's place.
func (e *Engine) acquired(ctx context.Context, key string, req AcquireRequest, want string, en *entry, sh *sharedKeys, r acquireReply, unacked bool) (Lease, error) {
	switch r.status {
	case "granted", "reentered":
		if unacked {
			// A failover now could lose the grant while its holder works:
			// give it back (one level of a re-entry) and say so.
			_, _ = e.Release(context.WithoutCancel(ctx), resourceOf(key), r.grant.token, req.Actor)
			return Lease{}, wrap("acquire", errNoAcks)
		}
		e.noted(key)
		l := r.grant.lease(key)
		l.Outcome = Outcome(r.status)
		if r.grant.epoch != "" {
			e.epochs.saw(sh, r.grant.epoch)
		}
		e.epochs.lease(sh, r.grant.left)
		return l, nil
	case "recovering":
		e.epochs.saw(sh, r.epoch)
		e.epochs.recovering(r.left)
		return Lease{}, &RecoveringError{Remaining: r.left}
	case "delay":
		e.epochs.met(sh, r.epoch)
		if en != nil {
			en.setPlace(r.place)
		}
		return Lease{}, &DelayError{Resource: resourceOf(key), Remaining: r.left}
	case "idempotent":
		l := r.grant.lease(key)
		l.Outcome = Replayed
		return l, nil
	case "held", "queued":
		if r.epoch != "" {
			e.epochs.met(sh, r.epoch)
		}
		if en != nil {
			en.setPlace(r.place)
		}
		if r.status == "queued" {
			qe := &QueuedError{Resource: resourceOf(key), Waiters: r.waiters, RetryAfter: min(r.retry, queuedRetry)}
			if r.owner != "" {
				qe.Next = Waiter{Owner: r.owner, Since: r.since}
			}
			return Lease{}, qe
		}
		return Lease{}, &HeldError{Resource: resourceOf(key), Owner: r.owner, Remaining: r.retry}
	case "lost":
		return Lease{}, ErrLeaseLost
	case "mismatch":
		return Lease{}, ErrIdempotencyMismatch
	case "full":
		return Lease{}, &TooManyHoldersError{Holders: r.holders}
	case "mode":
		return Lease{}, &ModeMismatchError{Held: r.held, Asked: modeOf(want)}
	case "limit":
		return Lease{}, ErrLimitMismatch
	case "free":
		return Lease{}, errFree
	default:
		return Lease{}, fmt.Errorf("lock: acquire script said %q", r.status)
	}
}

// peekX is how Redlock asks try for an exclusive peek.
const peekX = "peek"

func modeOf(want string) Mode {
	switch want {
	case "s":
		return Shared
	case "p":
		return Permit
	default:
		return Exclusive
	}
}

// errNoAcks is a write that fewer replicas acknowledged than asked for.
var errNoAcks = fmt.Errorf("%w: too few replicas acknowledged the write", ErrUnavailable)

// write runs a script that may write. With replica acks on, a write that
// too few replicas acknowledged is an error: the reply comes back with it,
// so that a grant can be undone.
func (e *Engine) write(ctx context.Context, s *redis.Script, keys []string, args ...any) (any, error) {
	if e.opts.ReplicaAcks <= 0 {
		return e.st.Run(ctx, s, keys, args...)
	}
	v, n, err := e.st.RunAcked(ctx, s, e.opts.ReplicaAcks, e.opts.ReplicaAckTimeout, keys, args...)
	if err == nil && n < e.opts.ReplicaAcks {
		e.missedAcks.Add(1)
		return v, errNoAcks
	}
	return v, err
}

// MissedAcks counts writes that fewer replicas acknowledged than
// Options.ReplicaAcks asked for.
func (e *Engine) MissedAcks() (int64, error) { return e.missedAcks.Load(), nil }

// bound gives one engine call its overall deadline, so that dialling,
// waiting for a pooled connection and the round trip together answer
// ErrUnavailable in about 2 s when Redis does not.
func (e *Engine) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, e.opts.CallTimeout)
}

// named says whether req names its mode (or a semaphore's limit), so that
// a re-entry or replay must match the lease's: without one, it takes the
// lease as it is.
func named(req AcquireRequest) string {
	if req.Mode != "" || req.Limit > 0 {
		return "1"
	}
	return ""
}

// Renew sets the lease's expiry to now + ttl (ttl 0: the lease's own TTL).
func (e *Engine) Renew(ctx context.Context, res Resource, req RenewRequest) (Lease, error) {
	if err := res.check(); err != nil {
		return Lease{}, err
	}
	key := res.id()
	k := keysOf(key)
	ttlArg := ""
	if req.TTL > 0 {
		ttlArg = strconv.FormatInt(req.TTL.Milliseconds(), 10)
	}
	ctx, cancel := e.bound(ctx)
	defer cancel()
	sh := e.sharedOf(key)
	keys, argv := renewCall{keys: k, shared: sh, token: req.Token, ttl: ttlArg, actor: packable(req.Actor), value: req.Value}.run(e)
	v, err := e.write(ctx, e.scripts.renew, keys, argv...)
	if err != nil {
		return Lease{}, wrap("renew", err)
	}
	g, err := decodeRenew(v)
	if err != nil {
		return Lease{}, err
	}
	e.epochs.lease(sh, g.left)
	return g.lease(key), nil
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
	out, next, err := e.release(ctx, key, token, actor, false)
	// The key went to a waiter of this process; should it have gone
	// meanwhile, the key is given back (and may go to the next one),
	// unless the waiter's own try took it in the meantime.
	for next != nil && !e.hub.HandOff(key, next.waiter, next.lease) {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.opts.CallTimeout)
		_, next, _ = e.release(rctx, key, next.lease.Token, next.actor, true)
		cancel()
	}
	return out, err
}

func giveBack(unclaimed bool) string {
	if unclaimed {
		return "unclaimed"
	}
	return ""
}

// handed is a lease that a release gave to the next waiter, of this process.
type handed struct {
	waiter string
	actor  string
	lease  Lease
}

// release runs release.lua; unclaimed gives back a key handed to a waiter
// only if the waiter has not claimed it.
func (e *Engine) release(ctx context.Context, key, token, actor string, unclaimed bool) (Released, *handed, error) {
	k := keysOf(key)
	ctx, cancel := e.bound(ctx)
	defer cancel()
	sh := e.sharedOf(key)
	// With replica acks a grant must be acknowledged before its holder
	// hears of it: no hand-off then.
	keys, argv := releaseCall{keys: k, shared: sh, token: token, actor: packable(actor), handOff: e.opts.ReplicaAcks == 0,
		unclaimed: giveBack(unclaimed)}.run(e)
	v, err := e.write(ctx, e.scripts.release, keys, argv...)
	if err != nil {
		return Released{}, nil, wrap("release", err)
	}
	r, err := decodeRelease(v)
	if err != nil {
		return Released{}, nil, err
	}
	if r.status == "claimed" {
		return Released{}, nil, nil
	}
	e.noted(key)
	out := Released{Released: r.count == 0, Count: r.count}
	if out.Released {
		out.HeldFor = heldSince(r.acquiredAt.UnixMilli())
	}
	var next *handed
	if h := r.handoff; h != nil {
		next = &handed{waiter: h.waiter, actor: actor, lease: Lease{
			Resource: resourceOf(key), Owner: h.owner, Token: h.token, Fence: h.fence, Count: 1, TTL: h.ttl,
			AcquiredAt: h.at, ExpiresAt: h.at.Add(h.ttl), Outcome: Granted, Mode: Exclusive,
		}}
		e.epochs.lease(sh, h.ttl)
	}
	return out, next, nil
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
	key := res.id()
	var out Broken
	for range MaxLimit/50 + 1 {
		b, more, err := e.forceRelease(ctx, key, fence, actor, reason)
		if err != nil {
			if out.Fence != 0 && (errors.Is(err, ErrNotFound) || errors.Is(err, ErrLeaseLost)) {
				// The holders left went by themselves meanwhile.
				return out, nil
			}
			return out, err
		}
		if b.Fence > out.Fence {
			out = b
		}
		if !more {
			break
		}
	}
	return out, nil
}

// forceRelease runs force_release.lua once; more says holders are left
// that this call did not reach.
func (e *Engine) forceRelease(ctx context.Context, key string, fence int64, actor, reason string) (Broken, bool, error) {
	k := keysOf(key)
	fenceArg := ""
	if fence != 0 {
		fenceArg = strconv.FormatInt(fence, 10)
	}
	ctx, cancel := e.bound(ctx)
	defer cancel()
	sh := e.sharedOf(key)
	keys, argv := forceReleaseCall{keys: k, shared: sh, actor: packable(actor), reason: packable(reason), fence: fenceArg}.run(e)
	v, err := e.write(ctx, e.scripts.forceRelease, keys, argv...)
	if err != nil {
		return Broken{}, false, wrap("force-release", err)
	}
	r, err := decodeForce(v)
	if err != nil {
		return Broken{}, false, err
	}
	e.noted(key)
	return Broken{Owner: r.owner, Fence: r.fence, HeldFor: heldSince(r.acquiredAt.UnixMilli())}, r.more, nil
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
	key := res.id()
	ctx, cancel := e.bound(ctx)
	defer cancel()
	v, err := e.st.Run(ctx, e.scripts.state, e.stateKeys(key))
	if err != nil {
		return State{}, wrap("state", err)
	}
	return stateFrom(key, v)
}

// stateKeys are the KEYS of state.lua.
func (e *Engine) stateKeys(key string) []string {
	k := keysOf(key)
	return []string{k.lease, k.queue, k.qinfo, k.holders, e.sharedOf(key).replicas}
}

// stateFrom reads state.lua's reply: one exclusive holder ("x"), or
// shared holders or permits ("m").
func stateFrom(key string, v any) (State, error) {
	r, err := newReply(v)
	if err != nil {
		return State{}, err
	}
	if r.len() == 0 {
		return State{}, ErrNotFound
	}
	s := State{Resource: resourceOf(key), Queue: queueFrom(r, 2)}
	s.Waiters = len(s.Queue)
	if r.str(0) == "x" {
		exclusiveState(&s, r)
		return s, r.err
	}
	if err := sharedState(&s, r); err != nil {
		return State{}, err
	}
	return s, r.err
}

// exclusiveState reads {"x", now_ms, queue, owner, fence, count, ttl_ms,
// acquired_at_ms, renewed_at_ms, renewals, pttl_ms, left_ms, waiters}.
func exclusiveState(s *State, r *reply) {
	now := r.time(1)
	if r.len() > 12 {
		s.Waiters = int(r.int(12))
	}
	s.HoldersTotal = 1
	remaining := r.ms(10)
	h := Holder{
		Owner:      r.str(3),
		Mode:       Exclusive,
		Fence:      r.int(4),
		Count:      int(r.int(5)),
		TTL:        r.ms(6),
		AcquiredAt: r.time(7),
		ExpiresAt:  now.Add(remaining),
		Remaining:  remaining,
	}
	s.Mode, s.Holders = Exclusive, []Holder{h}
	s.Owner, s.Fence, s.Count, s.TTL, s.AcquiredAt, s.ExpiresAt, s.Remaining = h.Owner, h.Fence, h.Count, h.TTL, h.AcquiredAt, h.ExpiresAt, h.Remaining
	s.RenewedAt = r.time(8)
	s.Renewals = r.int(9)
	s.LeftAtRenewal = r.ms(11)
	s.Value = r.str(13)
	s.Holders[0].Value = s.Value
	s.AtRisk = atRisk(*s)
}

// sharedState reads {"m", now_ms, queue, mode, limit, holders, waiters,
// holders_total}, each holder {owner, fence, count, ttl, acquired,
// renewed, renewals, expires, left}; the state describes the newest.
func sharedState(s *State, r *reply) error {
	now := r.time(1)
	s.Mode = Permit
	if r.str(3) == "shared" {
		s.Mode = Shared
	} else {
		s.Limit = int(r.int(4))
	}
	hs, err := newReply(r.vals[5])
	if err != nil {
		return err
	}
	if r.len() > 7 {
		s.Waiters, s.HoldersTotal = int(r.int(6)), int(r.int(7))
	}
	for i := 0; i+9 < hs.len(); i += 10 {
		exp := hs.time(i + 7)
		h := Holder{
			Owner:      hs.str(i),
			Mode:       s.Mode,
			Fence:      hs.int(i + 1),
			Count:      int(hs.int(i + 2)),
			TTL:        hs.ms(i + 3),
			AcquiredAt: hs.time(i + 4),
			ExpiresAt:  exp,
			Remaining:  exp.Sub(now),
			Value:      hs.str(i + 9),
		}
		s.Holders = append(s.Holders, h)
		if len(s.Holders) == 1 || h.Fence > s.Fence {
			s.Owner, s.Fence, s.Count, s.TTL, s.AcquiredAt, s.ExpiresAt, s.Remaining = h.Owner, h.Fence, h.Count, h.TTL, h.AcquiredAt, h.ExpiresAt, h.Remaining
			s.RenewedAt, s.Renewals, s.LeftAtRenewal = hs.time(i+5), hs.int(i+6), hs.ms(i+8)
			s.Value = h.Value
		}
	}
	slices.SortFunc(s.Holders, func(a, b Holder) int { return cmp.Compare(a.Fence, b.Fence) })
	s.AtRisk = atRisk(*s)
	return hs.err
}

// queueFrom reads the queue part of a state reply: {owner, mode, since, …}.
func queueFrom(r *reply, i int) []Queued {
	if i >= r.len() {
		return nil
	}
	q, err := newReply(r.vals[i])
	if err != nil {
		r.fail(err)
		return nil
	}
	var out []Queued
	for j := 0; j+2 < q.len(); j += 3 {
		out = append(out, Queued{Owner: q.str(j), Mode: modeOf(q.str(j + 1)), WaitingSince: q.time(j + 2)})
	}
	if q.err != nil {
		r.fail(q.err)
	}
	return out
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
}

// History returns up to limit events of the key, newest first. A lease that
// lapsed since the last event is recorded as "expired" first.
func (e *Engine) History(ctx context.Context, res Resource, limit int) ([]Event, error) {
	if err := res.check(); err != nil {
		return nil, err
	}
	key := res.id()
	return e.readHistory(ctx, key, limit, false)
}

// Renewals returns up to limit renewals of the key, newest first, each
// with how much of the lease was left when it came (Event.Left). They are
// kept apart from the history (Options.RenewalsMax of them), so that a
// lease renewed every second never pushes its story out of the history.
func (e *Engine) Renewals(ctx context.Context, res Resource, limit int) ([]Event, error) {
	if err := res.check(); err != nil {
		return nil, err
	}
	key := res.id()
	return e.readHistory(ctx, key, limit, true)
}

func (e *Engine) readHistory(ctx context.Context, key string, limit int, renewals bool) ([]Event, error) {
	k := keysOf(key)
	ctx, cancel := e.bound(ctx)
	defer cancel()
	keys, argv := historyCall{keys: k, shared: e.sharedOf(key), renewals: renewals, limit: limit}.run(e)
	v, err := e.st.Run(ctx, e.scripts.history, keys, argv...)
	if err != nil {
		return nil, wrap("history", err)
	}
	e.noted(key) // it may have recorded a lapse
	entries, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("lock: history reply %T", v)
	}
	// Oldest first from Redis; newest first to the caller.
	events := make([]Event, 0, len(entries))
	for i := len(entries) - 1; i >= 0; i-- {
		packed, ok := entries[i].(string)
		if !ok {
			return nil, fmt.Errorf("lock: history entry %T", entries[i])
		}
		ev, err := unpackEvent(packed)
		if err != nil {
			return nil, err
		}
		events = append(events, ev)
	}
	return events, nil
}

// unpackEvent reads an event of a key's history or renewals as lib.lua
// packs it: type, at, owner, fence, ttl_ms, count, actor, reason, exp,
// left_ms and then fields for the scripts only, joined by US (\x1f).
func unpackEvent(s string) (Event, error) {
	f := strings.SplitN(s, eventSep, 11)
	if len(f) < 10 {
		return Event{}, fmt.Errorf("lock: history entry has %d fields, want at least 10", len(f))
	}
	return Event{
		Type: f[0], At: time.UnixMilli(atoi(f[1])).UTC(), Owner: f[2], Fence: atoi(f[3]),
		TTL: time.Duration(atoi(f[4])) * time.Millisecond, Count: int(atoi(f[5])),
		Actor: f[6], Reason: f[7], Left: time.Duration(atoi(f[9])) * time.Millisecond,
	}, nil
}

// eventSep joins the fields of a packed history event (lib.lua's US). No
// owner, actor or reason may hold it: checkText.
const eventSep = "\x1f"

func atoi(s string) int64 {
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

// newToken returns 192 random bits as URL-safe text.
func newToken() (string, error) {
	var b [24]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("lock: token: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// wrap turns errors that mean "Redis is not there" into ErrUnavailable and
// leaves the others (script bugs) as they are, with the operation named.
func wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) {
		return fmt.Errorf("lock: %s: %w", op, err)
	}
	if errors.Is(err, store.ErrClosed) {
		return fmt.Errorf("lock: %s: %w", op, ErrClosed)
	}
	if unavailable(err) {
		return fmt.Errorf("lock: %s: %w: %w", op, ErrUnavailable, err)
	}
	return fmt.Errorf("lock: %s: %w", op, err)
}

func unavailable(err error) bool {
	var rerr redis.Error
	if errors.As(err, &rerr) {
		// Replies from a Redis that cannot serve us right now: not ready,
		// read-only, out of memory (maxmemory with noeviction), or
		// refusing our credentials (a configuration fault the operator
		// sees in the log, not a request's fault).
		msg := rerr.Error()
		for _, p := range []string{"LOADING", "READONLY", "OOM", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "MOVED", "ASK", "BUSY", "NOREPLICAS", "MISCONF", "NOAUTH", "WRONGPASS", "NOPERM"} {
			if strings.HasPrefix(msg, p) {
				return true
			}
		}
		return false
	}
	var nerr net.Error
	return errors.As(err, &nerr) || errors.Is(err, redis.ErrClosed) || errors.Is(err, redis.ErrPoolTimeout) ||
		errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "EOF") ||
		strings.Contains(err.Error(), "connection")
}
