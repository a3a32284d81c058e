package client

import (
	"context"
	"errors"
	"time"

	"github.com/lockd/lockd/api"
)

// Lease is a granted lock (exclusive or shared) or a permit of a
// semaphore. Unless acquired with NoAutoRenew, a watchdog
// goroutine renews it every ttl/3 until Release or loss. Its methods are
// safe for concurrent use.
type Lease struct {
	c     *Client
	kind  kind
	key   string
	token string
	fence int64
	ttl   time.Duration

	holding
	info     api.Lease
	renewals int

	// A request that the holder step aside (RequestRelease), as the
	// latest renewal answered it: asked is closed on the first.
	asked     chan struct{}
	request   *api.ReleaseRequested
	onRequest func(api.ReleaseRequested)

	replayed bool // set once, by newLease
}

// newLease is the lease of the grant l, asked for at sent (the time the
// grant cannot be earlier than) and answered at arrived.
func newLease(c *Client, k kind, l api.Lease, sent, arrived time.Time, watchdog bool) *Lease {
	ttl := time.Duration(l.TtlMs) * time.Millisecond
	ls := &Lease{
		c: c, kind: k, key: l.Key, token: l.Token, fence: l.Fence,
		ttl:      ttl,
		asked:    make(chan struct{}),
		info:     l,
		replayed: l.Replayed != nil && *l.Replayed,
	}
	ls.start(grantExpiry(sent, arrived, ttl))
	if watchdog {
		go ls.watch()
	} else {
		close(ls.done)
	}
	return ls
}

// Key is the lock's key, or the semaphore's name.
func (l *Lease) Key() string { return l.key }

// Mode is how the lease holds its key: Exclusive or Shared for a lock,
// Permit for a semaphore.
func (l *Lease) Mode() Mode {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.info.Mode == "" {
		// A server from before modes: every lock was exclusive.
		if l.kind == semaphoreKind {
			return Permit
		}
		return Exclusive
	}
	return Mode(l.info.Mode)
}

// Limit is the semaphore's limit, or 0 for a lock.
func (l *Lease) Limit() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.info.Limit == nil {
		return 0
	}
	return *l.info.Limit
}

// Token is the lease's secret. Keep it out of logs.
func (l *Lease) Token() string { return l.token }

// Proof is the lease's latest proof, from its grant or last renewal ("":
// the server signs none): evidence from which any lockd restores the
// lease should Redis lose it. Renew, Release and Proclaim send it by
// themselves. A secret as the token is: keep it out of logs.
func (l *Lease) Proof() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.info.Proof == nil {
		return ""
	}
	return *l.info.Proof
}

// Fence is the lease's fencing number: pass it to the resource you protect,
// which must reject writes with a fence lower than one it has seen.
func (l *Lease) Fence() int64 { return l.fence }

// TTL is the lease's time to live.
func (l *Lease) TTL() time.Duration { return l.ttl }

// Replayed reports whether the server answered with an earlier grant of the
// same Idempotency-Key instead of a new one. With the default random key
// that grant is this Acquire's own (an attempt whose answer was lost); with
// a key of your own, such as a webhook delivery ID, another request may be
// holding the lease and doing the work: do not do it again (see
// examples/webhook).
func (l *Lease) Replayed() bool { return l.replayed }

// Info is the server's latest answer about the lease (token included).
func (l *Lease) Info() api.Lease {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.info
}

// Renewals is how many renewals succeeded.
func (l *Lease) Renewals() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.renewals
}

// ReleaseRequested is closed when somebody first asks the holder to step
// aside (Client.RequestRelease, `POST …/request-release`), which the
// lease learns from its next renewal: within ttl/3 with the watchdog. The
// lease stays held; you decide whether to Release it.
func (l *Lease) ReleaseRequested() <-chan struct{} { return l.asked }

// ReleaseRequest is the newest request that the holder step aside, and
// whether there is one.
func (l *Lease) ReleaseRequest() (api.ReleaseRequested, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.request == nil {
		return api.ReleaseRequested{}, false
	}
	return *l.request, true
}

// OnReleaseRequest calls f, on the renewing goroutine, once for each new
// request that the holder step aside (see ReleaseRequested). Keep f short.
func (l *Lease) OnReleaseRequest(f func(api.ReleaseRequested)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.onRequest = f
}

// Lost is closed when the lease is lost. It is never closed by Release.
func (l *Lease) Lost() <-chan struct{} { return l.lost }

// Err is nil while the lease is not lost, then why it was lost; it wraps
// ErrLeaseLost.
func (l *Lease) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// Context is cancelled when the lease is lost (context.Cause is Err) or
// released (cause ErrReleased). Run the protected work under it.
func (l *Lease) Context() context.Context { return l.ctx }

// grantExpiry is the expiry, by our clock, of a lease or session granted
// with ttl by a request sent at sent whose answer arrived at arrived, and
// whether to renew it at once.
//
// The server starts the TTL at the grant, which came after sent and before
// arrived: after the request reached the server, or, for a request that
// waited in the queue, when its turn came. sent+ttl is never later than the
// server's expiry, and it is the expiry when the answer came within a
// third of the TTL: the first renewal, a third of the TTL after arrived,
// still has a third before it. A later answer most likely waited, and
// sent+ttl may already be past although the lease has its whole TTL
// (issue 35: `lockd run --ttl 2s --wait 10s` lost every
// lease granted after more than 2 s of waiting). Then the expiry is
// arrived+ttl, later than the server's by at most the time the answer took
// from the grant to us (a one-way trip), and the lease is renewed at once:
// that renewal's answer sets an exact expiry (its send time plus the TTL)
// within a round trip, or says that the lease is gone.
func grantExpiry(sent, arrived time.Time, ttl time.Duration) (expires time.Time, renewNow bool) {
	if arrived.Sub(sent) <= ttl/3 {
		return sent.Add(ttl), false
	}
	return arrived.Add(ttl), true
}

// Renew extends the lease by its TTL now. The watchdog calls it; call it
// yourself with NoAutoRenew. An answer that the lease is gone marks it lost.
func (l *Lease) Renew(ctx context.Context) error {
	if err := l.Err(); err != nil {
		return err
	}
	sent := time.Now()
	nl, err := l.c.renew(ctx, l.kind, l.key, l.token, l.Proof(), l.ttl)
	if err != nil {
		if errors.Is(err, ErrLeaseLost) {
			l.lose(err)
			return l.Err()
		}
		return err
	}
	l.mu.Lock()
	l.info = nl
	// A renewal does not wait: the server renewed once it arrived.
	l.expires = sent.Add(l.ttl)
	l.renewNow = false
	l.renewals++
	notify, rq := l.noteRequest(nl.ReleaseRequested)
	l.mu.Unlock()
	if notify != nil {
		notify(rq)
	}
	return nil
}

// noteRequest keeps a renewal's request that the holder step aside (r,
// nil for none) and says whom to tell of a new one. l.mu is held.
func (l *Lease) noteRequest(r *api.ReleaseRequested) (func(api.ReleaseRequested), api.ReleaseRequested) {
	if r == nil || (l.request != nil && l.request.At.Equal(r.At)) {
		return nil, api.ReleaseRequested{}
	}
	if l.request == nil {
		close(l.asked)
	}
	l.request = r
	return l.onRequest, *r
}

// Release stops the watchdog and gives the lease back. A lease that was
// lost returns its Err without asking the server.
func (l *Lease) Release(ctx context.Context) error {
	if !l.stopWatch() {
		return nil
	}
	if err := l.Err(); err != nil {
		return err
	}
	_, err := l.c.release(ctx, l.kind, l.key, l.token, l.Proof())
	if errors.Is(err, ErrLeaseLost) {
		l.lose(err)
		return l.Err()
	}
	l.cancel(ErrReleased)
	return err
}

// Abandon stops the watchdog without releasing the lease: it lasts until
// its TTL runs out, or for as long as another holder of the same token (an
// idempotent replay of the same acquire) renews it. Its Context is
// cancelled with ErrReleased.
func (l *Lease) Abandon() {
	if l.stopWatch() {
		l.cancel(ErrReleased)
	}
}

// lose records why the lease was lost, once, and tells everyone.
func (l *Lease) lose(cause error) { l.holding.lose(cause, l.key) }

// watch renews every ttl/3 until Release or loss.
func (l *Lease) watch() { l.keep(l.ttl, "lease", l.Renew, l.lose) }
