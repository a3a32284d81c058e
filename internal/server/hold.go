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
	releaseHold, err := s.takeHold(ctx)
	if err != nil {
		return nil, err
	}
	l, err := s.acquire(ctx, lock.Resource{Kind: k, Name: name}, req)
	if err != nil {
		releaseHold()
		return nil, err
	}
	return &holdStream{s: s, ctx: ctx, h: &leaseHolding{s: s, l: l, actor: req.Actor, value: req.Value}, releaseHold: releaseHold}, nil
}

// takeHold takes a slot of the server's and the API key's caps on open
// holds: release gives it back.
func (s *Server) takeHold(ctx context.Context) (release func(), err error) {
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
	return func() {
		<-s.holds
		releaseQuota()
	}, nil
}

// holdStream writes the hold's events; it implements the generated
// response interface so that it can stream and flush.
type holdStream struct {
	s   *Server
	ctx context.Context
	h   holding
	// releaseHold gives back the hold's slot (takeHold).
	releaseHold func()
}

// holding is what a hold stream keeps renewed: one lease (leaseHolding)
// or a lock set (setHolding). Only the stream's renewer calls renew, and
// release comes after the renewer has stopped.
type holding interface {
	// first is the stream's first event and its data.
	first() (event string, data any)
	// renew renews once: the "renewed" event's data, and the pending
	// request that the holder step aside, if any.
	renew(ctx context.Context) (data any, rq *lock.ReleaseRequest, err error)
	release(ctx context.Context)
	ttl() time.Duration
	// expiresAt is when the latest grant or renewal runs out.
	expiresAt() time.Time
	// resource is what a "lost" event names (zero for a lock set).
	resource() lock.Resource
}

// leaseHolding is one lease held by a stream: a lock's, a permit or a
// leadership.
type leaseHolding struct {
	s     *Server
	l     lock.Lease
	actor string
	value string // the grant's value, for an election's leadership events
}

func (h *leaseHolding) first() (string, any) {
	if h.l.Resource.Kind == lock.KindElection {
		return "leader", h.payload(h.l)
	}
	return "acquired", h.payload(h.l)
}

// payload is a grant or renewal event's data: the leadership or the lease.
func (h *leaseHolding) payload(l lock.Lease) any {
	if l.Resource.Kind == lock.KindElection {
		return wire.LeadershipOf(l, h.value)
	}
	return wire.LeaseOf(l)
}

func (h *leaseHolding) renew(ctx context.Context) (any, *lock.ReleaseRequest, error) {
	next, err := h.s.engine.Renew(ctx, h.l.Resource, lock.RenewRequest{Token: h.l.Token, TTL: h.l.TTL, Actor: h.actor, Proof: h.l.Proof})
	if err != nil {
		return nil, nil, err
	}
	h.l = next
	h.s.contention.renewed(next.Resource, next.AcquiredAt)
	return h.payload(next), next.ReleaseRequested, nil
}

func (h *leaseHolding) release(ctx context.Context) {
	if rel, err := h.s.engine.Release(lock.WithProof(ctx, h.l.Proof), h.l.Resource, h.l.Token, h.actor); err == nil {
		h.s.contention.ended(h.l.Resource, "released", rel.HeldFor)
	}
}

func (h *leaseHolding) ttl() time.Duration      { return h.l.TTL }
func (h *leaseHolding) expiresAt() time.Time    { return h.l.ExpiresAt }
func (h *leaseHolding) resource() lock.Resource { return h.l.Resource }

// holdWriteTimeout bounds one event write: a client that takes no data
// for this long is treated as gone, and its lease is released.
const holdWriteTimeout = 10 * time.Second

// VisitHoldLockResponse runs the stream of a lock.
func (h *holdStream) VisitHoldLockResponse(w http.ResponseWriter) error { return h.run(w) }

// VisitCampaignHoldResponse runs the stream of a leadership.
func (h *holdStream) VisitCampaignHoldResponse(w http.ResponseWriter) error { return h.run(w) }

// VisitHoldSemaphoreResponse runs the stream of a semaphore's permit.
func (h *holdStream) VisitHoldSemaphoreResponse(w http.ResponseWriter) error { return h.run(w) }

// VisitHoldLockSetResponse runs the stream of a lock set.
func (h *holdStream) VisitHoldLockSetResponse(w http.ResponseWriter) error { return h.run(w) }

// run runs the stream until the client leaves, the lease is lost or the
// server shuts down. The lease is released on the way out unless it was
// lost.
//
// Renewal runs in its own goroutine, on its own schedule: a client that
// reads slowly blocks only the writes, never a renewal, so it cannot lose
// its lease by expiry. Renewals that the writer has not caught up with are
// coalesced into the latest one.
func (h *holdStream) run(w http.ResponseWriter) error {
	defer h.releaseHold()
	out := startSSE(w)
	res := h.h.resource()
	event, data := h.h.first()
	renewed, lost, stopRenewing := h.renewing()
	defer stopRenewing()
	release := func() {
		stopRenewing()
		ctx, cancel := context.WithTimeout(context.WithoutCancel(h.ctx), 2*time.Second)
		defer cancel()
		h.h.release(ctx)
	}
	sendLost := func(err error) {
		p, _, _ := toAPI(err, res)
		_ = out.send("lost", p)
	}

	if err := out.send(event, data); err != nil {
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
		case r := <-renewed:
			err = out.send("renewed", r.data)
			if rq := r.rq; err == nil && rq != nil && !rq.At.Equal(asked) {
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

// renewal is one renewal for the stream's writer: the event's data and
// the pending request to step aside.
type renewal struct {
	data any
	rq   *lock.ReleaseRequest
}

// renewing starts renewing the lease in a goroutine of its own. renewed
// holds the latest renewal not yet sent, lost a loss; stop waits for the
// renewer, so that no renewal follows a release, and may be called again.
func (h *holdStream) renewing() (renewed <-chan renewal, lost <-chan error, stop func()) {
	ctx, cancel := context.WithCancel(h.ctx)
	renewedc := make(chan renewal, 1)
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
func (h *holdStream) renew(ctx context.Context, renewed chan renewal, lost chan<- error) {
	tick := time.NewTicker(max(h.h.ttl()/3, 30*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		data, rq, err := h.h.renew(rctx)
		cancel()
		switch {
		case err == nil:
			select {
			case <-renewed: // the writer is behind: only the latest counts
			default:
			}
			renewed <- renewal{data: data, rq: rq}
		case ctx.Err() != nil:
			return
		case errors.Is(err, lock.ErrLeaseLost), errors.Is(err, lock.ErrNotFound):
			lost <- err
			return
		case time.Now().After(h.h.expiresAt()):
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
