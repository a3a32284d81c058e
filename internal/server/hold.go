package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/lockd/lockd/api"
	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/problem"
	"github.com/lockd/lockd/internal/wire"
)

// HoldLock acquires like AcquireLock, then answers with an event stream
// while the server renews the lease every ttl/3 on the client's behalf.
func (s *Server) HoldLock(ctx context.Context, r api.HoldLockRequestObject) (api.HoldLockResponseObject, error) {
	h, err := s.hold(ctx, lock.KindLock, r.Key, lockBody(r.Body))
	if err != nil {
		return nil, err
	}
	return h, nil
}

// hold acquires the lock or semaphore name for a hold stream, within the
// server's and the API key's caps on open streams.
func (s *Server) hold(ctx context.Context, k lock.Kind, name string, body acquireBody) (*holdStream, error) {
	req, err := s.acquireRequest(ctx, k, body, nil)
	if err != nil {
		return nil, err
	}
	if req.Session != "" {
		return nil, invalid("session", "a hold keeps its own lease: acquire in the session instead, or hold the session (POST /v1/sessions/{id}/hold)")
	}
	releaseQuota, err := s.take(ctx, quotaHolds)
	if err != nil {
		return nil, err
	}
	select {
	case s.holds <- struct{}{}:
	default:
		releaseQuota()
		return nil, problem.Errorf(problem.ErrTooManyHolds, "this server already keeps %d hold streams open", cap(s.holds))
	}
	l, err := s.acquire(ctx, lock.Resource{Kind: k, Name: name}, req)
	if err != nil {
		<-s.holds
		releaseQuota()
		return nil, err
	}
	return &holdStream{s: s, ctx: ctx, lease: l, actor: req.Actor, value: req.Value, releaseQuota: releaseQuota}, nil
}

// holdStream writes the hold's events; it implements the generated
// response interface so that it can stream and flush.
type holdStream struct {
	s     *Server
	ctx   context.Context
	lease lock.Lease
	actor string
	value string // the grant's value, for an election's leadership events
	// releaseQuota gives back the API key's hold slot.
	releaseQuota func()
}

// holdWriteTimeout bounds one event write: a client that takes no data
// for this long is treated as gone, and its lease is released.
const holdWriteTimeout = 10 * time.Second

// VisitHoldLockResponse runs the stream of a lock.
func (h *holdStream) VisitHoldLockResponse(w http.ResponseWriter) error { return h.run(w) }

// VisitCampaignHoldResponse runs the stream of a leadership.
func (h *holdStream) VisitCampaignHoldResponse(w http.ResponseWriter) error { return h.run(w) }

// grantEvent is the stream's first event: "leader" for an election's
// leadership, "acquired" for a lease.
func (h *holdStream) grantEvent() string {
	if h.lease.Resource.Kind == lock.KindElection {
		return "leader"
	}
	return "acquired"
}

// payload is a grant or renewal event's data: the leadership or the lease.
func (h *holdStream) payload(l lock.Lease) any {
	if l.Resource.Kind == lock.KindElection {
		return wire.LeadershipOf(l, h.value)
	}
	return wire.LeaseOf(l)
}

// VisitHoldSemaphoreResponse runs the stream of a semaphore's permit.
func (h *holdStream) VisitHoldSemaphoreResponse(w http.ResponseWriter) error { return h.run(w) }

// run runs the stream until the client leaves, the lease is lost or the
// server shuts down. The lease is released on the way out unless it was
// lost.
//
// Renewal runs in its own goroutine, on its own schedule: a client that
// reads slowly blocks only the writes, never a renewal, so it cannot lose
// its lease by expiry. Renewals that the writer has not caught up with are
// coalesced into the latest one.
func (h *holdStream) run(w http.ResponseWriter) error {
	defer func() {
		<-h.s.holds
		h.releaseQuota()
	}()
	out := startSSE(w)
	res, l := h.lease.Resource, h.lease
	renewed, lost, stopRenewing := h.renewing()
	defer stopRenewing()
	release := func() {
		stopRenewing()
		ctx, cancel := context.WithTimeout(context.WithoutCancel(h.ctx), 2*time.Second)
		defer cancel()
		if rel, err := h.s.engine.Release(lock.WithProof(ctx, l.Proof), res, l.Token, h.actor); err == nil {
			h.s.contention.ended(res, "released", rel.HeldFor)
		}
	}
	sendLost := func(err error) {
		p, _, _ := toAPI(err, res)
		_ = out.send("lost", p)
	}

	if err := out.send(h.grantEvent(), h.payload(l)); err != nil {
		release()
		return nil
	}
	// A comment line now and then keeps proxies and clients from timing
	// out a stream whose lease is renewed rarely (a long TTL).
	heartbeat := time.NewTicker(h.s.cfg.HoldHeartbeat)
	defer heartbeat.Stop()
	// asked is when the newest request to step aside that the client was
	// told of was made: each request is one event, however many renewals
	// answer it.
	var asked time.Time
	for {
		var err error
		select {
		case <-h.ctx.Done():
			release()
			return nil
		case <-h.s.closing:
			release()
			sendLost(errShuttingDown)
			return nil
		case e := <-lost:
			stopRenewing()
			sendLost(e)
			return nil
		case l = <-renewed:
			err = out.send("renewed", h.payload(l))
			if rq := l.ReleaseRequested; err == nil && rq != nil && !rq.At.Equal(asked) {
				asked = rq.At
				err = out.send("release_requested", api.ReleaseRequested{By: rq.By, Reason: rq.Reason, At: rq.At})
			}
		case <-heartbeat.C:
			err = out.write(": heartbeat\n\n")
		}
		if err != nil {
			// The client is gone or has not read for holdWriteTimeout.
			release()
			return nil
		}
	}
}

// renewing starts renewing the lease in a goroutine of its own. renewed
// holds the latest renewal not yet sent, lost a loss; stop waits for the
// renewer, so that no renewal follows a release, and may be called again.
func (h *holdStream) renewing() (renewed <-chan lock.Lease, lost <-chan error, stop func()) {
	ctx, cancel := context.WithCancel(h.ctx)
	renewedc := make(chan lock.Lease, 1)
	lostc := make(chan error, 1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		h.renew(ctx, renewedc, lostc)
	}()
	return renewedc, lostc, func() {
		cancel()
		wg.Wait()
	}
}

// renew renews the lease every ttl/3 until ctx ends, handing each renewed
// lease to renewed (replacing one not yet taken) and a loss to lost.
func (h *holdStream) renew(ctx context.Context, renewed chan lock.Lease, lost chan<- error) {
	l := h.lease
	tick := time.NewTicker(max(l.TTL/3, 30*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		next, err := h.s.engine.Renew(rctx, l.Resource, lock.RenewRequest{Token: l.Token, TTL: l.TTL, Actor: h.actor, Proof: l.Proof})
		cancel()
		switch {
		case err == nil:
			l = next
			h.s.contention.renewed(l.Resource, l.AcquiredAt)
			select {
			case <-renewed: // the writer is behind: only the latest counts
			default:
			}
			renewed <- l
		case ctx.Err() != nil:
			return
		case errors.Is(err, lock.ErrLeaseLost), errors.Is(err, lock.ErrNotFound):
			lost <- err
			return
		case time.Now().After(l.ExpiresAt):
			// Redis stayed unreachable until the lease ran out.
			lost <- err
			return
		}
	}
}

// sse writes a stream of server-sent events (holds, the event stream):
// each write is flushed at once, and bounded by holdWriteTimeout so that
// a client that stops reading cannot pin the stream's goroutine.
type sse struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

// startSSE answers 200 with an event stream that no cache or proxy holds
// back.
func startSSE(w http.ResponseWriter) sse {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	return sse{w: w, rc: http.NewResponseController(w)}
}

// write writes text as it is: whole events or comment lines.
func (s sse) write(text string) error {
	_ = s.rc.SetWriteDeadline(time.Now().Add(holdWriteTimeout))
	if _, err := io.WriteString(s.w, text); err != nil {
		return err
	}
	return s.rc.Flush()
}

// send writes one event whose data is v as JSON.
func (s sse) send(event string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return s.write(fmt.Sprintf("event: %s\ndata: %s\n\n", event, b))
}
