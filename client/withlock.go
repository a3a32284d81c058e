package client

import (
	"context"
	"errors"
	"time"
)

// WithLock acquires key, runs fn under the lease and releases it when fn
// returns. fn's ctx is cancelled when ctx ends or the lease is lost; the
// returned error then wraps ErrLeaseLost as well as fn's error. The lease
// always renews itself here (opts.NoAutoRenew is ignored). opts.Mode
// Shared runs fn under a shared lease.
func WithLock(ctx context.Context, c *Client, key string, opts AcquireOptions, fn func(ctx context.Context) error) error {
	opts.NoAutoRenew = false
	return withLease(ctx, func() (*Lease, error) { return c.Acquire(ctx, key, opts) }, fn)
}

// WithPermit takes a permit of s, runs fn under it and releases it when fn
// returns, as WithLock does for a lock.
func WithPermit(ctx context.Context, s *Semaphore, opts AcquireOptions, fn func(ctx context.Context) error) error {
	opts.NoAutoRenew = false
	return withLease(ctx, func() (*Lease, error) { return s.Acquire(ctx, opts) }, fn)
}

func withLease(ctx context.Context, acquire func() (*Lease, error), fn func(ctx context.Context) error) error {
	l, err := acquire()
	if err != nil {
		return err
	}
	fctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(l.Context(), func() { cancel(context.Cause(l.Context())) })
	defer stop()

	ferr := fn(fctx)

	// Release even when ctx has ended: the lease must not wait out its TTL.
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer rcancel()
	rerr := l.Release(rctx)
	if lerr := l.Err(); lerr != nil {
		return errors.Join(lerr, ferr)
	}
	return errors.Join(ferr, rerr)
}
