package client

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// keeper is what keepAlive keeps: a lease or a session.
type keeper struct {
	stop   <-chan struct{} // closed by Release or End
	ttl    time.Duration
	expiry func() time.Time // by our clock (grantExpiry)
	// renewNow: renew at once rather than a third of the TTL from now
	// (a grant whose timing is unsure).
	renewNow bool
	renew    func(context.Context) error
	gone     func(error) bool // the answer says it no longer exists
	lose     func(error)
	what     string // "lease" or "session", for the loss's message
}

// keepAlive renews k every ttl/3 until k.stop is closed or a renewal says
// it is gone (renew has recorded the loss then). A renewal that fails
// without saying so is retried with backoff until the expiry: past it, k
// is lost.
func keepAlive(k keeper) {
	// Stopping aborts an in-flight renewal.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-k.stop:
			cancel()
		case <-ctx.Done():
		}
	}()

	interval := max(k.ttl/3, time.Millisecond)
	first := interval
	if k.renewNow {
		first = 0
	}
	timer := time.NewTimer(first)
	defer timer.Stop()
	attempt := 0
	var lastErr error // since the last success: the last failure that said more than "timed out"
	var failed error  // since the last success: the last failure
	for {
		select {
		case <-k.stop:
			return
		case <-timer.C:
		}
		expires := k.expiry()
		if late := time.Since(expires); late >= 0 {
			// The server may have let it go already: it is not ours.
			switch {
			case lastErr != nil:
				k.lose(fmt.Errorf("could not renew before the %s expired: %w", k.what, lastErr))
			case failed != nil:
				k.lose(fmt.Errorf("could not renew before the %s expired: %w", k.what, failed))
			default:
				// Not one renewal failed: this process did not run in
				// time (paused, or starved of CPU).
				k.lose(fmt.Errorf("its TTL ran out, by this client's clock, %v before a renewal could be sent: this process did not run in time (paused, or starved of CPU)", late.Round(time.Millisecond)))
			}
			return
		}
		rctx, rcancel := context.WithDeadline(ctx, expires)
		sent := time.Now()
		err := k.renew(rctx)
		rcancel()
		switch {
		case err == nil:
			attempt, lastErr, failed = 0, nil, nil
			// Measured from when the renewal was sent, like the expiry.
			timer.Reset(max(interval-time.Since(sent), 0))
			continue
		case k.gone(err), ctx.Err() != nil:
			return
		}
		if errors.Is(err, context.DeadlineExceeded) {
			// Our own deadline (the expiry): a renewal was sent and the
			// server did not answer it in time.
			err = fmt.Errorf("%w: a renewal sent %v before the %s expired was not answered in time", ErrUnavailable, expires.Sub(sent).Round(time.Millisecond), k.what)
		} else {
			lastErr = err
		}
		failed = err
		left := time.Until(expires)
		if left <= 0 {
			if lastErr == nil {
				lastErr = err
			}
			k.lose(fmt.Errorf("could not renew before the %s expired: %w", k.what, lastErr))
			return
		}
		// Retry sooner than ttl/3, and never sleep through the expiry:
		// halve what is left so the last tries come just before it.
		d := backoff(attempt, max(k.ttl/30, 10*time.Millisecond), interval, retryAfter(err))
		attempt++
		timer.Reset(min(d, max(left/2, time.Millisecond)))
	}
}
