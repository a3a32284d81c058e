package lock

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// An acquire that Redis did not answer (a timeout, a dropped connection,
// the caller gone mid-call) may still run when Redis comes back: the
// script was sent. Its grant carries a token that only this process
// knows, so nobody would release it and the key would stay taken for the
// whole TTL. giveBack releases it with that token once Redis answers.
//
// Not when the caller named an Idempotency-Key: retrying with that key is
// how a client gets such a grant back (a replay answers with it), and
// releasing it here would take it from under the retry.

const (
	// giveBackRecheck is how long after a release that found nothing
	// giveBack tries once more: the unanswered script may sit in another
	// connection's buffer that Redis reads in the same turn, after it.
	giveBackRecheck = time.Second
	// giveBackMaxPause caps the pause between tries while Redis is away.
	giveBackMaxPause = 5 * time.Second
)

// unanswered says whether err means Redis may yet run the call: it was
// sent and no reply came. A reply that refused it (READONLY, OOM, …) did
// not run it.
func unanswered(err error) bool {
	var rerr redis.Error
	if err == nil || errors.As(err, &rerr) || errors.Is(err, ErrClosed) {
		return false
	}
	return errors.Is(err, ErrUnavailable) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// lateTries notes whether any try of one acquire went unanswered. Every
// try of an acquire carries the same token, so one give-back with it
// undoes whichever of them Redis runs late.
type lateTries struct{ any atomic.Bool }

// note records a try's outcome and passes it on.
func (lt *lateTries) note(l Lease, err error) (Lease, error) {
	if lt != nil && unanswered(err) {
		lt.any.Store(true)
	}
	return l, err
}

// giveBackIfUnanswered starts giveBack for an acquire that failed with an
// error Redis may still act on, or whose answer (a 409, say) came from a
// later try while an earlier, unanswered one may still have granted. A
// waiter's late try that runs after its wait ended is refused in Redis
// (leave.lua marks the waiter ended before the answer goes out); one that
// ran between the waiter's last try and that mark may have granted, and
// the answer is final: a 409 means nothing was granted, so the grant goes
// back whatever the request's Idempotency-Key
// (TestLateTryLeavesNoGrantBehindA409).
func (e *Engine) giveBackIfUnanswered(res Resource, req AcquireRequest, token string, err error) {
	lateTry := req.late != nil && req.late.any.Load() && !unanswered(err)
	if req.Token != "" || (!lateTry && (req.IdempotencyKey != "" || !unanswered(err))) {
		return
	}
	e.backgroundUnlessClosing(func() { e.giveBack(res, token, time.Now().Add(req.TTL+e.n.opts.CallTimeout)) })
}

// giveBackOf is a grant to give back later (node.later): its token, the
// actor the history names, its TTL, and its kind of release (a key handed
// to a waiter goes back only if that waiter has not claimed it).
type giveBackOf struct {
	token, actor string
	ttl          time.Duration
	kind         releaseKind
}

// giveBackLater retries, in the background, a give-back that Redis did
// not answer: a grant whose replica acks fell short (node.granted), or a
// key handed to a waiter that had gone (node.releaseTo). It tries until a
// release is answered or the grant's TTL has passed.
func (e *Engine) giveBackLater(key string, gb giveBackOf) {
	e.backgroundUnlessClosing(func() {
		until := time.Now().Add(gb.ttl + e.n.opts.CallTimeout)
		for attempt := 0; time.Now().Before(until); attempt++ {
			select {
			case <-e.stop:
				return
			case <-time.After(min(100*time.Millisecond<<min(attempt, 5), giveBackMaxPause)):
			}
			ctx, cancel := context.WithTimeout(context.Background(), e.n.opts.CallTimeout)
			_, err := e.n.releaseAs(ctx, key, gb.token, gb.actor, gb.kind, func(h *handed) bool {
				return e.hub.HandOff(key, h.waiter, h.lease)
			})
			cancel()
			if err == nil || !unanswered(err) {
				return
			}
		}
	})
}

// giveBack releases the grant with token, if one landed, until it is
// gone, the lease's TTL has passed (it lapsed by itself) or the engine
// closes. A release that finds no such lease is tried once more a moment
// later, for a script that Redis runs after it.
func (e *Engine) giveBack(res Resource, token string, until time.Time) {
	pause, rechecked := 100*time.Millisecond, false
	for time.Now().Before(until) {
		ctx, cancel := context.WithTimeout(context.Background(), e.n.opts.CallTimeout)
		rel, err := e.releaseBack(ctx, res, token, "lockd")
		cancel()
		switch {
		case err == nil && rel.Released:
			return
		case err == nil:
			// One re-entry level: the script re-entered its own grant.
			continue
		case errors.Is(err, ErrNotFound) || errors.Is(err, ErrLeaseLost):
			if rechecked {
				return
			}
			rechecked, pause = true, giveBackRecheck
		default:
			pause = min(2*pause, giveBackMaxPause)
		}
		select {
		case <-e.stop:
			return
		case <-time.After(pause):
		}
	}
}
