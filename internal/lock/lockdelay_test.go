package lock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/redistest"
)

// A lease that names a lock-delay holds its key off for that long after
// it ends by expiry or force-release, and not after its holder's release;
// a waiter waits the delay out.
func TestLockDelay(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			e := newEngine(t, b.open(t))
			ctx := context.Background()
			const delay = 800 * time.Millisecond
			next := lock.AcquireRequest{Owner: "next", TTL: time.Minute}

			// Expiry.
			mustAcquire(t, e, lock.Lock("ld:lapse"), lock.AcquireRequest{Owner: "paused", TTL: 200 * time.Millisecond, LockDelay: delay})
			time.Sleep(300 * time.Millisecond)
			_, err := e.Acquire(ctx, lock.Lock("ld:lapse"), next)
			var de *lock.DelayError
			if !errors.As(err, &de) || de.Remaining <= 0 || de.Remaining > delay {
				t.Fatalf("acquire after the lapse: %v", err)
			}
			time.Sleep(de.Remaining + 50*time.Millisecond)
			mustAcquire(t, e, lock.Lock("ld:lapse"), next)

			// Force-release: held off from the break on, and a waiter
			// waits it out.
			mustAcquire(t, e, lock.Lock("ld:force"), lock.AcquireRequest{Owner: "stuck", LockDelay: delay})
			if _, err := e.ForceReleaseFence(ctx, lock.Lock("ld:force"), 0, "ops", "stuck"); err != nil {
				t.Fatal(err)
			}
			if _, err := e.Acquire(ctx, lock.Lock("ld:force"), next); !errors.Is(err, lock.ErrLockDelay) {
				t.Fatalf("acquire after the force-release: %v", err)
			}
			start := time.Now()
			w := next
			w.Wait = 5 * time.Second
			if _, err := e.Acquire(ctx, lock.Lock("ld:force"), w); err != nil {
				t.Fatalf("waiting through the delay: %v", err)
			}
			if waited := time.Since(start); waited > delay+time.Second {
				t.Fatalf("waited %v for a delay of %v", waited, delay)
			}

			// The holder's own release: no delay.
			l := mustAcquire(t, e, lock.Lock("ld:release"), lock.AcquireRequest{Owner: "done", LockDelay: delay})
			if _, err := e.Release(ctx, lock.Lock("ld:release"), l.Token, "done"); err != nil {
				t.Fatal(err)
			}
			mustAcquire(t, e, lock.Lock("ld:release"), next)
		})
	}
}

// A lock-delay is for exclusive locks: shared holds and permits refuse it,
// and so does Redlock, whose masters each see a lapse apart.
func TestLockDelayOnlyExclusive(t *testing.T) {
	e := newEngine(t, redistest.Start(t).Client(t))
	ctx := context.Background()
	for _, tc := range []struct {
		res lock.Resource
		req lock.AcquireRequest
	}{
		{lock.Lock("ld:s"), lock.AcquireRequest{Mode: lock.Shared, LockDelay: time.Second}},
		{lock.Semaphore("ld:p"), lock.AcquireRequest{Limit: 2, LockDelay: time.Second}},
		{lock.Lock("ld:long"), lock.AcquireRequest{LockDelay: lock.MaxLockDelay + time.Millisecond}},
	} {
		tc.req.TTL = time.Minute
		if _, err := e.Acquire(ctx, tc.res, tc.req); err == nil {
			t.Errorf("%v with %+v granted", tc.res, tc.req)
		}
	}
	r := redlockOn(t, threeMasters(t), lock.Options{})
	if _, err := r.Acquire(ctx, lock.Lock("ld:r"), lock.AcquireRequest{TTL: time.Minute, LockDelay: time.Second}); !errors.Is(err, lock.ErrNoLockDelay) {
		t.Errorf("Redlock with a lock-delay: %v", err)
	}
}
