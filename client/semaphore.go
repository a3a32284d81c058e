package client

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/lockd/lockd/api"
)

// Semaphore is a semaphore on the server: at most Limit permits of it are
// held at once, each its own Lease (token, fence, TTL, renewals, release).
// A semaphore and a lock of the same name are unrelated. Get one with
// Client.Semaphore; it holds no state, so make one wherever it is handy.
//
// The first holder sets a semaphore's limit; while permits are held, an
// acquire with another limit fails with ErrLimitMismatch. Every process
// that shares a semaphore must therefore use the same limit.
type Semaphore struct {
	c     *Client
	name  string
	limit int
}

// Semaphore is the semaphore name with limit permits (1 … 10000). Only
// Acquire uses the limit: pass 0 to read, renew, release or break.
func (c *Client) Semaphore(name string, limit int) *Semaphore {
	return &Semaphore{c: c, name: name, limit: limit}
}

// Name is the semaphore's name.
func (s *Semaphore) Name() string { return s.name }

// Limit is the limit that Acquire asks for.
func (s *Semaphore) Limit() int { return s.limit }

// Acquire takes a permit, waiting up to opts.Wait while every permit is
// held; waiting requests are granted in the order they began to wait,
// across every lockd replica. No permit free after the wait is a
// *NoPermitsError (errors.Is ErrNoPermits). The permit renews itself every
// ttl/3 unless opts.NoAutoRenew, and 503s are retried as for a lock's
// Acquire. opts.Mode must be empty (or Permit).
func (s *Semaphore) Acquire(ctx context.Context, opts AcquireOptions) (*Lease, error) {
	if opts.Mode != "" && opts.Mode != Permit {
		return nil, fmt.Errorf("%w: mode %q: a semaphore's permits have no mode", ErrInvalid, opts.Mode)
	}
	if s.limit < 1 {
		return nil, fmt.Errorf("%w: semaphore %s: limit %d: want 1 to 10000", ErrInvalid, s.name, s.limit)
	}
	return s.c.acquire(ctx, semaphoreKind, opts, func(ctx context.Context, p acquireParams) (*http.Response, error) {
		body := api.SemaphoreAcquireRequest{Limit: s.limit, Owner: p.owner, TtlMs: p.ttlMs, WaitMs: p.waitMs, Session: p.session}
		if opts.Value != nil {
			body.Value = &opts.Value
		}
		return s.c.raw.AcquireSemaphore(ctx, s.name, &api.AcquireSemaphoreParams{IdempotencyKey: p.idem}, body)
	})
}

// Renew extends the permit with token by ttl (0: the permit's own TTL),
// once, without retries. A permit that is no longer live is ErrLeaseLost.
// Leases from Acquire renew themselves; this is for tokens kept elsewhere.
func (s *Semaphore) Renew(ctx context.Context, token string, ttl time.Duration) (api.Lease, error) {
	return s.c.renew(ctx, semaphoreKind, s.name, token, "", ttl)
}

// RenewWithProof is Renew that sends the permit's latest proof beside the
// token (Client.RenewWithProof).
func (s *Semaphore) RenewWithProof(ctx context.Context, token, proof string, ttl time.Duration) (api.Lease, error) {
	return s.c.renew(ctx, semaphoreKind, s.name, token, proof, ttl)
}

// Release gives back one level of the permit with token. A permit that is
// no longer live is ErrLeaseLost.
func (s *Semaphore) Release(ctx context.Context, token string) (api.ReleaseResult, error) {
	return s.c.release(ctx, semaphoreKind, s.name, token, "")
}

// ReleaseWithProof is Release that sends the permit's latest proof beside
// the token (Client.RenewWithProof).
func (s *Semaphore) ReleaseWithProof(ctx context.Context, token, proof string) (api.ReleaseResult, error) {
	return s.c.release(ctx, semaphoreKind, s.name, token, proof)
}

// ForceRelease breaks every permit of the semaphore (admin scope).
func (s *Semaphore) ForceRelease(ctx context.Context, reason string) (api.ForceReleaseResult, error) {
	return s.c.forceRelease(ctx, semaphoreKind, s.name, 0, reason)
}

// ForceReleaseFence breaks only the permit with fence (admin scope). When
// no permit has that fence, nothing is broken and the error wraps
// ErrLeaseLost.
func (s *Semaphore) ForceReleaseFence(ctx context.Context, fence int64, reason string) (api.ForceReleaseResult, error) {
	return s.c.forceRelease(ctx, semaphoreKind, s.name, fence, reason)
}

// State reads the semaphore: its limit, a holder per held permit and the
// queue of waiting requests (never a token); ErrNotFound when no permit
// is held.
func (s *Semaphore) State(ctx context.Context) (api.LockState, error) {
	resp, err := s.c.raw.GetSemaphore(ctx, s.name)
	return decode[api.LockState](ctx, resp, err)
}

// History reads the recent events of every permit, newest first; limit 0
// is the server's default.
func (s *Semaphore) History(ctx context.Context, limit int) (api.History, error) {
	return s.c.history(ctx, semaphoreKind, s.name, limit, nil)
}

// Renewals returns the permits' last renewals, newest first (see
// Client.Renewals).
func (s *Semaphore) Renewals(ctx context.Context, limit int) (api.History, error) {
	return s.c.history(ctx, semaphoreKind, s.name, limit, ptr(api.Renewed))
}

// ListSemaphores reads one page of the semaphores with a permit held whose
// names start with prefix. Pass the page's NextCursor to get the next one;
// limit 0 is the server's default page size.
func (c *Client) ListSemaphores(ctx context.Context, prefix string, limit int, cursor string) (api.SemaphoreList, error) {
	p := &api.ListSemaphoresParams{}
	if prefix != "" {
		p.Prefix = &prefix
	}
	if limit > 0 {
		p.Limit = &limit
	}
	if cursor != "" {
		p.Cursor = &cursor
	}
	resp, err := c.raw.ListSemaphores(ctx, p)
	return decode[api.SemaphoreList](ctx, resp, err)
}
