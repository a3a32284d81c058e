package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/rs/zerolog"

	"github.com/lockd/lockd/api"
	"github.com/lockd/lockd/internal/lock"
)

// Errors are returned, not answered here: writeError (the strict handler's
// error function) turns each into its problem+json.

// Healthz answers while the process runs.
func (s *Server) Healthz(ctx context.Context, _ api.HealthzRequestObject) (api.HealthzResponseObject, error) {
	return api.Healthz200JSONResponse{Status: "ok"}, nil
}

// Readyz answers 200 when Redis takes a write: not when it only answers a
// PING while read-only, out of memory or loading, since then every acquire
// fails and a load balancer should route elsewhere.
func (s *Server) Readyz(ctx context.Context, _ api.ReadyzRequestObject) (api.ReadyzResponseObject, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := s.engine.Ready(ctx); err != nil {
		return nil, err
	}
	out := api.Readyz200JSONResponse{Status: "ok", Topology: "redis", Nodes: []api.RedisNode{}}
	if t, ok := s.engine.(interface {
		Topology(context.Context) lock.Topology
	}); ok {
		topo := t.Topology(ctx)
		out.Topology = api.ReadinessTopology(topo.Kind)
		for _, n := range topo.Nodes {
			out.Nodes = append(out.Nodes, api.RedisNode{Addr: n.Addr, Role: api.RedisNodeRole(n.Role), Up: n.Up})
		}
	}
	return out, nil
}

// acquireRequest validates an acquire (or hold) body against the limits.
func (s *Server) acquireRequest(ctx context.Context, body *api.AcquireRequest, idem *string) (lock.AcquireRequest, error) {
	c := callerOf(ctx)
	req := lock.AcquireRequest{Owner: c.name, Actor: c.name}
	if body == nil {
		body = &api.AcquireRequest{}
	}
	var err error
	if body.Owner != nil {
		if err := checkOwner(*body.Owner); err != nil {
			return req, err
		}
		req.Owner = *body.Owner
	}
	if req.TTL, err = msRange("ttl_ms", body.TtlMs, s.cfg.DefaultTTL, 100*time.Millisecond, s.cfg.MaxTTL); err != nil {
		return req, err
	}
	if req.Wait, err = msRange("wait_ms", body.WaitMs, 0, 0, s.cfg.MaxWait); err != nil {
		return req, err
	}
	if body.Token != nil {
		if err := checkToken(*body.Token, false); err != nil {
			return req, err
		}
		req.Token = *body.Token
	}
	if idem != nil {
		if *idem == "" {
			return req, invalid("Idempotency-Key", "Idempotency-Key must not be empty")
		}
		if err := checkText("Idempotency-Key", *idem, 200); err != nil {
			return req, err
		}
		req.IdempotencyKey = *idem
	}
	logOwner(ctx, req.Owner)
	return req, nil
}

// AcquireLock takes, re-enters or waits for a lease.
func (s *Server) AcquireLock(ctx context.Context, r api.AcquireLockRequestObject) (api.AcquireLockResponseObject, error) {
	req, err := s.acquireRequest(ctx, r.Body, r.Params.IdempotencyKey)
	if err != nil {
		return nil, err
	}
	l, err := s.acquire(ctx, r.Key, req)
	if err != nil {
		return nil, err
	}
	resp := api.AcquireLock200JSONResponse{Body: leaseOf(l)}
	if l.Outcome == lock.Replayed {
		// Another request got this lease first and does the work.
		resp.Headers.IdempotentReplayed = ptr("true")
	}
	return resp, nil
}

// acquire calls the engine, counts the outcome and gives back a grant whose
// client has gone.
func (s *Server) acquire(ctx context.Context, key string, req lock.AcquireRequest) (lock.Lease, error) {
	if req.Wait > 0 {
		release, err := s.take(ctx, quotaWaiters)
		if err != nil {
			return lock.Lease{}, err
		}
		defer release()
	}
	start := time.Now()
	l, err := s.engine.Acquire(ctx, key, req)
	if req.Wait > 0 {
		s.metrics.waitSeconds.Observe(time.Since(start).Seconds())
	}
	s.metrics.acquire(l.Outcome, err)
	s.contention.acquired(key, l.Outcome, err, time.Since(start), req.Wait > 0)
	if err != nil {
		return l, err
	}
	if ctx.Err() != nil && l.Outcome != lock.Replayed {
		// The client left while Redis granted it: nobody will release it.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_, _ = s.engine.Release(rctx, key, l.Token, req.Actor)
		return lock.Lease{}, ctx.Err()
	}
	return l, nil
}

// RenewLock extends a live lease.
func (s *Server) RenewLock(ctx context.Context, r api.RenewLockRequestObject) (api.RenewLockResponseObject, error) {
	if r.Body == nil {
		return nil, invalid("token", "token is required: the token that acquire returned")
	}
	if err := checkToken(r.Body.Token, true); err != nil {
		return nil, err
	}
	ttl, err := msRange("ttl_ms", r.Body.TtlMs, 0, 100*time.Millisecond, s.cfg.MaxTTL)
	if err != nil {
		return nil, err
	}
	l, err := s.engine.Renew(ctx, r.Key, r.Body.Token, ttl, callerOf(ctx).name)
	if err != nil {
		return nil, err
	}
	s.contention.renewed(r.Key, l.AcquiredAt)
	logOwner(ctx, l.Owner)
	return api.RenewLock200JSONResponse(leaseOf(l)), nil
}

// ReleaseLock gives back one level of a lease.
func (s *Server) ReleaseLock(ctx context.Context, r api.ReleaseLockRequestObject) (api.ReleaseLockResponseObject, error) {
	if r.Body == nil {
		return nil, invalid("token", "token is required: the token that acquire returned")
	}
	if err := checkToken(r.Body.Token, true); err != nil {
		return nil, err
	}
	rel, err := s.engine.Release(ctx, r.Key, r.Body.Token, callerOf(ctx).name)
	if err != nil {
		return nil, err
	}
	s.contention.ended(r.Key, "released", rel.HeldFor)
	return api.ReleaseLock200JSONResponse{Key: r.Key, Released: rel.Released, Count: rel.Count}, nil
}

// ForceReleaseLock breaks a lease whoever holds it.
func (s *Server) ForceReleaseLock(ctx context.Context, r api.ForceReleaseLockRequestObject) (api.ForceReleaseLockResponseObject, error) {
	reason, fence := "", int64(0)
	if r.Body != nil && r.Body.Reason != nil {
		reason = *r.Body.Reason
		if err := checkText("reason", reason, lock.MaxReason); err != nil {
			return nil, err
		}
	}
	if r.Body != nil && r.Body.Fence != nil {
		if fence = *r.Body.Fence; fence <= 0 {
			return nil, invalid("fence", "fence must be a positive integer, got %d", fence)
		}
	}
	b, err := s.engine.ForceReleaseFence(ctx, r.Key, fence, callerOf(ctx).name, reason)
	if errors.Is(err, lock.ErrLeaseLost) {
		// No token was sent: only the fence can have missed.
		return nil, &problemError{status: http.StatusConflict, code: "lease_lost", title: "Lease lost",
			detail: fmt.Sprintf("%s is held by another lease (not fence %d); nothing was broken", r.Key, fence)}
	}
	if err != nil {
		return nil, err
	}
	s.contention.ended(r.Key, "force_released", b.HeldFor)
	logOwner(ctx, b.Owner)
	return api.ForceReleaseLock200JSONResponse{Key: r.Key, Released: true, Owner: b.Owner, Fence: b.Fence}, nil
}

// GetLock reads a live lock.
func (s *Server) GetLock(ctx context.Context, r api.GetLockRequestObject) (api.GetLockResponseObject, error) {
	st, err := s.engine.State(ctx, r.Key)
	if err != nil {
		return nil, err
	}
	return api.GetLock200JSONResponse(stateOf(st)), nil
}

// ListLocks pages through live locks.
func (s *Server) ListLocks(ctx context.Context, r api.ListLocksRequestObject) (api.ListLocksResponseObject, error) {
	prefix, err := checkPrefix(r.Params.Prefix)
	if err != nil {
		return nil, err
	}
	limit, err := checkLimit(r.Params.Limit, 100)
	if err != nil {
		return nil, err
	}
	cursor := ""
	if r.Params.Cursor != nil {
		cursor = *r.Params.Cursor
	}
	c := callerOf(ctx)
	filter, err := listScope(c, s.cfg.Keys, prefix)
	if err != nil {
		return nil, err
	}
	page, err := s.engine.List(ctx, prefix, limit, cursor)
	if err != nil {
		return nil, err
	}
	out := api.ListLocks200JSONResponse{Locks: make([]api.LockState, 0, len(page.Locks))}
	for _, st := range page.Locks {
		// A key limited to some prefixes sees only their locks.
		if !filter || c.mayTouch(s.cfg.Keys, st.Key) {
			out.Locks = append(out.Locks, stateOf(st))
		}
	}
	if page.NextCursor != "" {
		out.NextCursor = &page.NextCursor
	}
	return out, nil
}

// GetLockHistory lists a key's recent events, newest first.
func (s *Server) GetLockHistory(ctx context.Context, r api.GetLockHistoryRequestObject) (api.GetLockHistoryResponseObject, error) {
	limit, err := checkLimit(r.Params.Limit, 50)
	if err != nil {
		return nil, err
	}
	var evs []lock.Event
	switch t := r.Params.Type; {
	case t == nil:
		evs, err = s.engine.History(ctx, r.Key, limit)
	case !t.Valid():
		return nil, invalid("type", "type must be one of acquired, reentered, renewed, released, expired, force_released")
	case *t == api.Renewed:
		evs, err = s.engine.Renewals(ctx, r.Key, limit)
	default:
		// Every kept event, then only this type.
		evs, err = s.engine.History(ctx, r.Key, maxHistoryRead)
		evs = slices.DeleteFunc(evs, func(e lock.Event) bool { return e.Type != string(*t) })
		evs = evs[:min(len(evs), limit)]
	}
	if err != nil {
		return nil, err
	}
	out := api.GetLockHistory200JSONResponse{Key: r.Key, Events: make([]api.Event, len(evs))}
	for i, e := range evs {
		out.Events[i] = api.Event{
			Type: api.EventType(e.Type), At: e.At, Owner: e.Owner, Fence: e.Fence,
			TtlMs: e.TTL.Milliseconds(), Count: e.Count, Actor: e.Actor, Reason: e.Reason,
		}
		if e.Type == string(api.Renewed) {
			out.Events[i].RemainingMs = ptr(e.Left.Milliseconds())
		}
	}
	return out, nil
}

func leaseOf(l lock.Lease) api.Lease {
	out := api.Lease{
		Key: l.Key, Owner: l.Owner, Token: l.Token, Fence: l.Fence, Count: l.Count,
		TtlMs: l.TTL.Milliseconds(), AcquiredAt: l.AcquiredAt, ExpiresAt: l.ExpiresAt,
	}
	if l.Outcome == lock.Replayed {
		out.Replayed = ptr(true)
	}
	return out
}

func stateOf(s lock.State) api.LockState {
	return api.LockState{
		Key: s.Key, Owner: s.Owner, Fence: s.Fence, Count: s.Count,
		TtlMs: s.TTL.Milliseconds(), RemainingMs: s.Remaining.Milliseconds(),
		AcquiredAt: s.AcquiredAt, RenewedAt: s.RenewedAt, ExpiresAt: s.ExpiresAt,
		Renewals: s.Renewals, Waiters: s.Waiters, AtRisk: s.AtRisk,
	}
}

// logOwner adds the lease owner to the request's access log line.
func logOwner(ctx context.Context, owner string) {
	zerolog.Ctx(ctx).UpdateContext(func(c zerolog.Context) zerolog.Context { return c.Str("owner", owner) })
}
