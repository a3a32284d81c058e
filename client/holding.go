package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// holding is what a Lease and a LockSet share: the context the protected
// work runs under, the watchdog's life, the expiry by this client's clock,
// and why the grant was lost. Its mu guards these and the holder's own
// fields.
type holding struct {
	ctx    context.Context // cancelled on loss (cause: err) or release
	cancel context.CancelCauseFunc
	lost   chan struct{} // closed on loss
	stop   chan struct{} // closed by Release: ends the watchdog
	done   chan struct{} // closed when the watchdog has ended

	mu       sync.Mutex
	expires  time.Time // by our clock; see grantExpiry
	renewNow bool      // the grant's timing is unsure: the watchdog renews at once
	err      error     // why it was lost
	released bool
}

// start readies h for a grant expiring at expires (renewNow: renew at
// once), before anyone else sees it.
func (h *holding) start(expires time.Time, renewNow bool) {
	h.ctx, h.cancel = context.WithCancelCause(context.Background())
	h.lost, h.stop, h.done = make(chan struct{}), make(chan struct{}), make(chan struct{})
	h.expires, h.renewNow = expires, renewNow
}

func (h *holding) expiry() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.expires
}

// lose records why the grant (what, for the message) was lost, once, and
// tells everyone.
func (h *holding) lose(cause error, what string) {
	h.mu.Lock()
	if h.err != nil {
		h.mu.Unlock()
		return
	}
	h.err = cause
	if !errors.Is(cause, ErrLeaseLost) {
		h.err = fmt.Errorf("%w: %s: %w", ErrLeaseLost, what, cause)
	}
	err := h.err
	h.mu.Unlock()
	h.cancel(err)
	close(h.lost)
}

// keep is the watchdog: it renews every ttl/3 until Release or loss
// (keepAlive); what names the grant in the loss's message.
func (h *holding) keep(ttl time.Duration, what string, renew func(context.Context) error, lose func(error)) {
	defer close(h.done)
	h.mu.Lock()
	now := h.renewNow
	h.mu.Unlock()
	keepAlive(keeper{
		stop: h.stop, ttl: ttl, expiry: h.expiry, renew: renew, renewNow: now,
		gone: func(err error) bool { return errors.Is(err, ErrLeaseLost) },
		lose: lose, what: what,
	})
}

// stopWatch stops the watchdog and waits for it, once: false when the
// grant was released or abandoned already.
func (h *holding) stopWatch() bool {
	h.mu.Lock()
	if h.released {
		h.mu.Unlock()
		return false
	}
	h.released = true
	h.mu.Unlock()
	close(h.stop)
	<-h.done
	return true
}

// endsWith loses the grant (lose) when its session is lost; then runs
// after the session's loss or the grant's release.
func (h *holding) endsWith(sess *Session, lose func(error), then func()) {
	go func() {
		select {
		case <-sess.lost:
			lose(fmt.Errorf("%w: its session was lost: %w", ErrLeaseLost, sess.Err()))
		case <-h.stop:
		}
		then()
	}()
}
