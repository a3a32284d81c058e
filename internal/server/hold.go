package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/lockd/lockd/api"
	"github.com/lockd/lockd/internal/lock"
)

// HoldLock acquires like AcquireLock, then answers with an event stream
// while the server renews the lease every ttl/3 on the client's behalf.
func (s *Server) HoldLock(ctx context.Context, r api.HoldLockRequestObject) (api.HoldLockResponseObject, error) {
	req, err := s.acquireRequest(ctx, r.Body, nil)
	if err != nil {
		return nil, err
	}
	select {
	case s.holds <- struct{}{}:
	default:
		return nil, &problemError{status: http.StatusTooManyRequests, code: "too_many_requests",
			title: "Too many holds", detail: fmt.Sprintf("this server already keeps %d hold streams open", cap(s.holds))}
	}
	l, err := s.acquire(ctx, r.Key, req)
	if err != nil {
		<-s.holds
		return nil, err
	}
	return &holdStream{s: s, ctx: ctx, lease: l, actor: req.Actor}, nil
}

// holdStream writes the hold's events; it implements the generated
// response interface so that it can stream and flush.
type holdStream struct {
	s     *Server
	ctx   context.Context
	lease lock.Lease
	actor string
}

// VisitHoldLockResponse runs the stream until the client leaves, the lease
// is lost or the server shuts down. The lease is released on the way out
// unless it was lost.
func (h *holdStream) VisitHoldLockResponse(w http.ResponseWriter) error {
	defer func() { <-h.s.holds }()
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)

	key, l := h.lease.Key, h.lease
	send := func(event string, v any) error {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		// A client that stops reading cannot pin this goroutine.
		_ = rc.SetWriteDeadline(time.Now().Add(10 * time.Second))
		if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, b); err != nil {
			return err
		}
		return rc.Flush()
	}
	release := func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(h.ctx), 2*time.Second)
		defer cancel()
		_, _ = h.s.engine.Release(ctx, key, l.Token, h.actor)
	}
	lost := func(err error) error {
		p, _ := problem(err, key)
		_ = send("lost", p)
		return nil
	}

	if err := send("acquired", leaseOf(l)); err != nil {
		release()
		return nil
	}
	tick := time.NewTicker(max(l.TTL/3, 30*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-h.ctx.Done():
			release()
			return nil
		case <-h.s.closing:
			release()
			return lost(errShuttingDown)
		case <-tick.C:
		}
		rctx, cancel := context.WithTimeout(h.ctx, 2*time.Second)
		next, err := h.s.engine.Renew(rctx, key, l.Token, l.TTL, h.actor)
		cancel()
		switch {
		case err == nil:
			l = next
			if err := send("renewed", leaseOf(l)); err != nil {
				release()
				return nil
			}
		case errors.Is(err, lock.ErrLeaseLost), errors.Is(err, lock.ErrNotFound):
			return lost(err)
		case h.ctx.Err() != nil:
			release()
			return nil
		case time.Now().After(l.ExpiresAt):
			// Redis stayed unreachable until the lease ran out.
			return lost(err)
		}
	}
}
