package lock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockd/lockd/internal/lock/store"
	"github.com/lockd/lockd/internal/lock/wait"
)

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
	// gathered, when set (tests), runs when a lock set across slots has
	// its first slot's grant, before the others'.
	gathered func(keys []string)
}

// New returns an engine on rdb and starts its waiter hub (one pub/sub
// connection). Close it to stop the hub.
func New(rdb redis.UniversalClient, opts Options) *Engine {
	opts = opts.withDefaults()
	n := newNode(store.New(rdb, opts.Sentinel), opts)
	e := &Engine{n: n, stop: make(chan struct{}), leaveStop: make(chan struct{})}
	n.later = e.giveBackLater
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

// backgroundUnlessClosing runs f as background does, unless Close has
// begun: work a caller's answer leaves behind (a give-back) must not
// start once Close waits for the goroutines it knows.
func (e *Engine) backgroundUnlessClosing(f func()) {
	e.leaveMu.Lock()
	defer e.leaveMu.Unlock()
	if !e.closing {
		e.background(f)
	}
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

// Acquire takes the key, re-enters it (req.Token) or, with req.Wait > 0,
// waits for it. A held key is a *HeldError (errors.Is ErrHeld); a re-entry
// token that is not the live one is ErrLeaseLost; a retry with the
// Idempotency-Key of a live lease is that lease (Outcome Replayed), or
// ErrIdempotencyMismatch when it asks for another owner, TTL or value. If ctx ends
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
	req.late = new(lateTries)
	var lease Lease
	if req.Session != "" {
		lease, err = e.acquireInSession(ctx, res, req, token, mode)
	} else {
		lease, err = e.acquire(ctx, res, req, token, mode)
	}
	if err != nil && req.Token != "" && e.n.restoreFromProof(ctx, res.id(), req.Token, req.Proof, err) {
		// The re-entry's lease, put back from its holder's proof.
		lease, err = e.acquire(ctx, res, req, token, mode)
	}
	if err != nil {
		e.giveBackIfUnanswered(res, req, token, err)
		return lease, err
	}
	lease.Proof = e.n.opts.Proofs.acquiredProof(lease, req)
	return lease, nil
}

// acquire tries once, or queues and waits, for Acquire.
func (e *Engine) acquire(ctx context.Context, res Resource, req AcquireRequest, token, mode string) (Lease, error) {
	key := res.id()
	if req.Wait <= 0 || req.Token != "" {
		return req.late.note(e.n.try(ctx, key, req, token, mode, grantFree, nil))
	}
	// The first try queues the caller in Redis unless it is granted; a
	// waiter queued before it, in this process or another, is granted
	// first (the script decides).
	en, err := newEntry(req.Wait)
	if err != nil {
		return Lease{}, err
	}
	// From its first try on, the caller's place in Redis may be handed
	// the key by a release of this process: the hub takes such a grant
	// for it until it waits there.
	seen := e.hub.Watch(key, en.id)
	lease, err := req.late.note(e.n.try(ctx, key, req, token, mode, grantFree, en))
	if err == nil || !waitable(err) {
		// A hand-off meanwhile is this lease (granted: one holder, one
		// token) or one the caller, gone, gives back.
		handed, ok := e.hub.Unwatch(seen)
		if err != nil {
			// The try may have queued the caller before it failed (its
			// answer cut short when the caller left): take it off
			// again, or it counts as live, ahead of those after it,
			// until its deadline.
			_ = e.leave(key, en.id, time.Now().Add(en.wait+entrySlack), false, false)
			if ok {
				e.undoGrant(handed, req.Actor)
			}
		}
		return lease, err
	}
	return e.queue(ctx, key, req, token, mode, en, seen, err)
}

// undoGrant releases a lease granted to a caller that has gone.
func (e *Engine) undoGrant(l Lease, actor string) {
	ctx, cancel := context.WithTimeout(context.Background(), e.n.opts.CallTimeout)
	defer cancel()
	_, _ = e.releaseBack(ctx, l.Resource, l.Token, actor)
}

// GiveBack is Release of a grant whose caller never had it (it left
// before the answer): no hold window keeps the key after it, since nobody
// worked under the grant.
func (e *Engine) GiveBack(ctx context.Context, res Resource, token, actor string) (Released, error) {
	if err := res.check(); err != nil {
		return Released{}, err
	}
	return e.releaseBack(ctx, res, token, actor)
}

// releaseBack is GiveBack, of a resource already checked.
func (e *Engine) releaseBack(ctx context.Context, res Resource, token, actor string) (Released, error) {
	key := res.id()
	return e.n.releaseAs(ctx, key, token, actor, givenBack, func(h *handed) bool {
		return e.hub.HandOff(key, h.waiter, h.lease)
	})
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
	if err := checkMinHold(res, req); err != nil {
		return "", err
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

// checkMinHold holds a hold window to what it applies to: an exclusive
// lock's grant, not in a session (whose end is no holder's release), of at
// most its TTL.
func checkMinHold(res Resource, req AcquireRequest) error {
	switch {
	case req.MinHold == 0:
		return nil
	case res.Kind != KindLock || req.Mode == Shared:
		return errors.New("lock: a hold window applies to exclusive locks only")
	case req.Session != "":
		return errors.New("lock: a hold window does not apply to a grant in a session")
	case req.MinHold < 0 || req.MinHold > req.TTL:
		return fmt.Errorf("lock: hold window %v is not within 0…%v (the TTL)", req.MinHold, req.TTL)
	}
	return nil
}

// queue waits in the hub. Every try of one waiter uses the same token, so a
// try whose answer was lost (a timeout after Redis granted) is found again
// by the next one instead of blocking the key until its TTL ends.
func (e *Engine) queue(ctx context.Context, key string, req AcquireRequest, token, mode string, en *entry, seen wait.Seen, first error) (Lease, error) {
	try := func(ctx context.Context) (Lease, error) {
		return req.late.note(e.n.try(ctx, key, req, token, mode, grantFree, en))
	}
	undo := func(l Lease) { e.undoGrant(l, req.Actor) }
	lease, err := e.hub.Wait(ctx, key, time.Now().Add(req.Wait), wait.Waiter[Lease]{
		Try:   try,
		Undo:  undo,
		ID:    en.id,
		Place: en.placed,
	}, seen, first)
	if err != nil {
		// Redis answered the last try (a refusal: the key is held, or
		// others wait first): the waiter leaves before its answer goes out.
		now := !unanswered(err) && !errors.Is(err, wait.ErrClosed)
		// A wait that ran the longest this server allows, with an
		// Idempotency-Key, is likely one round of a longer one (the
		// clients wait in rounds past --max-wait): its place stays queued
		// for the next round, and nothing behind it moves up meanwhile.
		hold := now && ctx.Err() == nil && req.IdempotencyKey != "" && req.Wait >= e.n.opts.MaxWait
		left := e.leave(key, en.id, time.Now().Add(en.wait+entrySlack), now, hold)
		if now && !left {
			// Redis did not answer the leave: the key may have gone to this
			// waiter, so a 409 would be a guess. 503: a retry with the
			// request's Idempotency-Key replays such a grant, and one
			// without is given back (giveBackIfUnanswered).
			return Lease{}, fmt.Errorf("lock: %s: leaving the queue after the wait: %w", key, ErrUnavailable)
		}
		if left && ctx.Err() == nil {
			// The key may be this waiter's after all: a release handed it
			// over after the last try ran in Redis (its answer lost on the
			// way back to the releasing lockd, or the waiter of another
			// moment), or a try that went unanswered ran after the last
			// one. The waiter is marked ended now, so no try of it grants
			// any more; one more try finds such a grant (its token is
			// this waiter's) and answers it, rather than a 409 with the
			// key held by a lease nobody knows.
			if l, terr := try(ctx); terr == nil {
				return l, nil
			}
		}
	}
	if err == nil {
		e.n.ledger.fill(key, lease.Token, req)
	}
	return lease, fromHub(err)
}

// MissedAcks counts writes that fewer replicas acknowledged than
// Options.ReplicaAcks asked for.
func (e *Engine) MissedAcks() (int64, error) { return e.n.missedAcks.Load(), nil }

// Renew sets the lease's expiry to now + ttl (ttl 0: the lease's own TTL).
// req.Proof is consulted only when Redis no longer has the lease, and
// for what the new proof carries on.
func (e *Engine) Renew(ctx context.Context, res Resource, req RenewRequest) (Lease, error) {
	if err := res.check(); err != nil {
		return Lease{}, err
	}
	l, err := e.n.renewRestoring(ctx, res.id(), req, false)
	if err != nil {
		return Lease{}, err
	}
	l.Proof = e.n.opts.Proofs.renewedProof(l, req)
	return l, nil
}

// Release gives back one level of the lease; at count 0 the lease is deleted
// and waiters are woken. The holder's proof, if any, comes in ctx
// (WithProof), consulted only when Redis no longer has the lease.
func (e *Engine) Release(ctx context.Context, res Resource, token, actor string) (Released, error) {
	if err := res.check(); err != nil {
		return Released{}, err
	}
	key := res.id()
	// A key that went to a waiter of this process is handed over to it.
	rel, err := e.n.releaseTo(ctx, key, token, actor, func(h *handed) bool {
		return e.hub.HandOff(key, h.waiter, h.lease)
	})
	if err != nil && e.n.restoreFromProof(ctx, key, token, proofFrom(ctx), err) {
		rel, err = e.n.releaseTo(ctx, key, token, actor, func(h *handed) bool {
			return e.hub.HandOff(key, h.waiter, h.lease)
		})
	}
	if err != nil {
		return Released{}, err
	}
	return rel, nil
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

// Handover gives up an election's leadership (token) to the candidate
// to, who leads next ahead of the queue (Kubernetes' preferred holder):
// ErrNotCandidate, with nothing changed, when to is not campaigning.
func (e *Engine) Handover(ctx context.Context, res Resource, token, to, actor string) (Released, error) {
	if err := res.check(); err != nil {
		return Released{}, err
	}
	key := res.id()
	out, next, err := e.n.handover(ctx, key, token, to, actor)
	for next != nil && !e.hub.HandOff(key, next.waiter, next.lease) {
		// The candidate's request has gone meanwhile: the key is given
		// back, and may go to the next one.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.n.opts.CallTimeout)
		_, next, _ = e.n.release(rctx, key, next.lease.Token, next.actor, unclaimedHandOff)
		cancel()
	}
	return out, err
}

// RequestRelease asks the exclusive holder of a lock (the one with this
// fence, when not 0) to step aside: its renewals answer the request until
// the lease ends, and the event stream tells readers. The holder decides.
// Shared holders and permits are ErrNotExclusive: they hold together, and
// a request to one of them asks nobody in particular.
func (e *Engine) RequestRelease(ctx context.Context, res Resource, fence int64, by, reason, actor string) (RequestedRelease, error) {
	if err := res.check(); err != nil {
		return RequestedRelease{}, err
	}
	return e.n.requestRelease(ctx, res.id(), fence, by, reason, actor)
}

// State returns the key's live lease, or ErrNotFound.
func (e *Engine) State(ctx context.Context, res Resource) (State, error) {
	if err := res.check(); err != nil {
		return State{}, err
	}
	return e.n.state(ctx, res.id())
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
