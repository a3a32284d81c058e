// Package client is the Go client of lockd: leases that renew themselves.
//
//	c, err := client.New("http://127.0.0.1:8080", client.WithAPIKey(key))
//	err = client.WithLock(ctx, c, "report:daily", client.AcquireOptions{TTL: 30 * time.Second},
//		func(ctx context.Context) error {
//			// ctx is cancelled as soon as the lease is lost.
//			return buildReport(ctx)
//		})
//
// A lock is held by one holder (Exclusive, the default) or by any number of
// holders together (AcquireOptions.Mode Shared). A Semaphore caps how many
// hold it at once; each of its permits is a *Lease like a lock's:
//
//	pool := c.Semaphore("render:pool", 4)
//	err = client.WithPermit(ctx, pool, client.AcquireOptions{Wait: time.Minute},
//		func(ctx context.Context) error { return render(ctx) })
//
// Acquire returns a *Lease whose watchdog renews it every ttl/3 until
// Release (Redisson's watchdog). A renew answered 404 or 409 means the lease
// is gone: the lease is lost at once. A renew that fails for any other reason
// (503, server unreachable) is retried with jittered backoff until the
// lease's expiry as measured by this process's clock, then the lease is lost.
// Loss closes Lost(), sets Err() and cancels Context().
//
// Acquire retries 503 answers and connection errors with jittered
// exponential backoff (at least the server's Retry-After) for up to
// WithRetry (default 30 s) past the wait. Every acquire carries an
// Idempotency-Key (a random one unless AcquireOptions.IdempotencyKey is set)
// so that a retry of an acquire whose answer was lost gets the same lease
// back instead of finding the key held by itself.
//
// Every grant and renewal answers a proof (Lease.Proof), which the lease
// sends back with each renewal, proclaim and release: should Redis lose
// its data while the lockd that granted the lease is gone too, any lockd
// restores the lease from it. A LockSet does the same with its set's proof
// (LockSet.Proof). Keep it out of logs, as the token.
//
// # Caveats
//
// A lease is a promise about time, and time is not under the client's
// control. A process paused for longer than the remaining TTL (GC, swap,
// SIGSTOP, a laptop lid) can resume believing it still holds a lease that
// another process has since taken; Lost() fires only once this process runs
// again and notices. The watchdog narrows the window but cannot close it.
// So pass Fence() to the resource you protect and have it reject writes that
// carry a fence lower than one it has already seen: that, not the lease, is
// what makes the protection safe.
//
// The client measures expiry from when it sent the last successful renew,
// which is never later than the server's own expiry, so it declares a lease
// lost no later than the server drops it, give or take clock rate drift. A
// grant counts from when its acquire was sent, unless the answer took more
// than a third of the TTL (it waited in the queue): the server started the
// TTL at the grant, somewhere in that time, so the client counts from the
// answer and renews at once; until that renewal answers, its expiry may be
// later than the server's by the time the answer took from the grant to
// the client.
package client
