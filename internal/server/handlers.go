package server

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/lockd/lockd/api"
	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/problem"
	"github.com/lockd/lockd/internal/wire"
)

// Errors are returned, not answered here: writeError (the strict handler's
// error function) turns each into its problem+json.

// Healthz answers while the process runs.
func (s *Server) Healthz(ctx context.Context, _ api.HealthzRequestObject) (api.HealthzResponseObject, error) {
	return api.Healthz200JSONResponse{Status: "ok"}, nil
}

// Livez answers while the process runs, as Healthz does, under the name
// Kubernetes probes use. It never asks Redis: a liveness probe that failed
// with Redis would restart every replica at once during an outage, which
// mends nothing and drops every open wait.
func (s *Server) Livez(ctx context.Context, _ api.LivezRequestObject) (api.LivezResponseObject, error) {
	return api.Livez200JSONResponse{Status: "ok"}, nil
}

// Readyz answers 200 when Redis takes a write: not when it only answers a
// PING while read-only, out of memory or loading, since then every acquire
// fails and a load balancer should route elsewhere. The Redis nodes'
// addresses and roles are added only for a caller that mayReadTopology.
func (s *Server) Readyz(ctx context.Context, _ api.ReadyzRequestObject) (api.ReadyzResponseObject, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := s.engine.Ready(ctx); err != nil {
		return nil, err
	}
	out := api.Readyz200JSONResponse{Status: "ok"}
	if !s.mayReadTopology(ctx) {
		return out, nil
	}
	topo := s.engine.Topology(ctx)
	kind, nodes := api.ReadinessTopology(topo.Kind), []api.RedisNode{}
	for _, n := range topo.Nodes {
		nodes = append(nodes, api.RedisNode{Addr: n.Addr, Role: api.RedisNodeRole(n.Role), Up: n.Up})
	}
	out.Topology, out.Nodes = &kind, &nodes
	return out, nil
}

// mayReadTopology reports whether the caller may learn where Redis runs:
// with auth on, a caller with a valid API key of any scope; with auth off,
// one that named the server by a Host it answers to. Probes need only the
// status, and a DNS-rebinding page (/readyz is exempt from the Host check,
// for probes that call by IP address) must not map the network behind
// lockd.
func (s *Server) mayReadTopology(ctx context.Context) bool {
	x := exchangeOf(ctx)
	if x == nil {
		return false
	}
	if s.cfg.Keys.Enabled() {
		return x.caller.key != nil
	}
	return !x.foreignHost
}

// acquireBody is the body of an acquire or hold, of a lock or a semaphore.
type acquireBody struct {
	owner         *string
	ttlMs, waitMs *int64
	token         *string
	mode          *api.LockMode // locks only
	lockDelayMs   *int64        // locks only
	minHoldMs     *int64        // locks only
	limit         *int          // semaphores only, required
	value         *api.Value
	session       *string
	proof         *string // with token only
}

func lockBody(b *api.AcquireRequest) acquireBody {
	if b == nil {
		return acquireBody{}
	}
	return acquireBody{owner: b.Owner, ttlMs: b.TtlMs, waitMs: b.WaitMs, token: b.Token, mode: b.Mode, lockDelayMs: b.LockDelayMs, value: b.Value,
		session: b.Session, minHoldMs: b.MinHoldMs, proof: b.Proof}
}

func semaphoreBody(b *api.SemaphoreAcquireRequest) acquireBody {
	if b == nil {
		return acquireBody{}
	}
	return acquireBody{owner: b.Owner, ttlMs: b.TtlMs, waitMs: b.WaitMs, token: b.Token, limit: &b.Limit, value: b.Value,
		session: b.Session, proof: b.Proof}
}

// acquireRequest validates an acquire (or hold) body against the limits.
func (s *Server) acquireRequest(ctx context.Context, k lock.Kind, body acquireBody, idem *string) (lock.AcquireRequest, error) {
	c := callerOf(ctx)
	req := lock.AcquireRequest{Owner: c.name, Actor: c.name}
	var err error
	if body.owner != nil {
		if err := checkOwner(*body.owner); err != nil {
			return req, err
		}
		req.Owner = *body.owner
	}
	if req.TTL, err = s.ttlRange(c, "ttl_ms", body.ttlMs, s.cfg.DefaultTTL, 100*time.Millisecond, s.cfg.MaxTTL); err != nil {
		return req, err
	}
	if body.session != nil {
		if err := checkSessionID("session", *body.session); err != nil {
			return req, err
		}
		if body.ttlMs != nil {
			return req, invalid("ttl_ms", "ttl_ms and session exclude each other: a grant in a session lives as long as the session")
		}
		req.Session, req.SessionScope = *body.session, sessionScope(c)
		if body.owner == nil {
			req.Owner = "" // the session's owner: the engine reads it with the session
		}
	}
	if req.Wait, err = msRange("wait_ms", body.waitMs, 0, 0, s.cfg.MaxWait); err != nil {
		return req, err
	}
	if body.token != nil {
		if err := checkToken(*body.token, false); err != nil {
			return req, err
		}
		req.Token = *body.token
	}
	if req.Proof, err = checkProof(body.proof); err != nil {
		return req, err
	}
	if req.Proof != "" && req.Token == "" {
		return req, invalid("proof", "proof goes with the token of the lease it was answered for: send both, or neither")
	}
	if body.mode != nil {
		if !body.mode.Valid() {
			return req, invalid("mode", "mode must be exclusive or shared, got %q", *body.mode)
		}
		req.Mode = lock.Mode(*body.mode)
	}
	if k == lock.KindSemaphore {
		if req.Limit, err = checkSemaphoreLimit(body.limit); err != nil {
			return req, err
		}
	}
	if req.LockDelay, err = s.lockDelay(k, req.Mode, body.lockDelayMs); err != nil {
		return req, err
	}
	if req.MinHold, err = minHold(req, body.minHoldMs); err != nil {
		return req, err
	}
	if req.Value, err = checkValue(body.value); err != nil {
		return req, err
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

// lockDelay is an acquire's lock-delay: the body's, else the server's
// default for an exclusive lock. Shared holds and permits have none.
func (s *Server) lockDelay(k lock.Kind, mode lock.Mode, ms *int64) (time.Duration, error) {
	exclusive := (k == lock.KindLock || k == lock.KindElection) && mode != lock.Shared
	if ms == nil {
		if exclusive {
			return s.cfg.LockDelay, nil
		}
		return 0, nil
	}
	d, err := msRange("lock_delay_ms", ms, 0, 0, lock.MaxLockDelay)
	if err == nil && d > 0 && !exclusive {
		err = invalid("lock_delay_ms", "a lock-delay applies to exclusive holds only, not to shared holds")
	}
	return d, err
}

// minHold is an acquire's hold window (min_hold_ms): at most its TTL, for
// an exclusive hold not in a session (the only acquires whose body has
// the field are a lock's and its hold stream's).
func minHold(req lock.AcquireRequest, ms *int64) (time.Duration, error) {
	if ms == nil {
		return 0, nil
	}
	if *ms > 0 && req.Session != "" {
		return 0, invalid("min_hold_ms", "a hold window does not apply to a grant in a session, whose end is no holder's release")
	}
	d, err := msRange("min_hold_ms", ms, 0, 0, req.TTL)
	if err == nil && d > 0 && req.Mode == lock.Shared {
		err = invalid("min_hold_ms", "a hold window applies to exclusive holds only, not to shared holds")
	}
	return d, err
}

// grant validates an acquire of the lock or semaphore name and acquires it.
func (s *Server) grant(ctx context.Context, k lock.Kind, name string, body acquireBody, idem *string) (lock.Lease, error) {
	req, err := s.acquireRequest(ctx, k, body, idem)
	if err != nil {
		return lock.Lease{}, err
	}
	return s.acquire(ctx, lock.Resource{Kind: k, Name: name}, req)
}

// AcquireLock takes, re-enters or waits for a lease.
func (s *Server) AcquireLock(ctx context.Context, r api.AcquireLockRequestObject) (api.AcquireLockResponseObject, error) {
	l, err := s.grant(ctx, lock.KindLock, r.Key, lockBody(r.Body), r.Params.IdempotencyKey)
	if err != nil {
		return nil, err
	}
	return api.AcquireLock200JSONResponse{Body: wire.LeaseOf(l), Headers: api.AcquireLock200ResponseHeaders{IdempotentReplayed: replayed(l)}}, nil
}

// replayed is the Idempotent-Replayed header of a grant: "true" when
// another request got this lease first and does the work.
func replayed(l lock.Lease) *string {
	if l.Outcome == lock.Replayed {
		return ptr("true")
	}
	return nil
}

// acquire calls the engine, counts the outcome and gives back a grant whose
// client has gone.
func (s *Server) acquire(ctx context.Context, res lock.Resource, req lock.AcquireRequest) (lock.Lease, error) {
	if req.Wait > 0 {
		release, err := s.take(ctx, quotaWaiters)
		if err != nil {
			return lock.Lease{}, err
		}
		defer release()
	}
	start := time.Now()
	l, err := s.engineAcquire(ctx, res, req)
	s.contention.acquired(res, l.Outcome, err, time.Since(start), req.Wait > 0)
	if err != nil {
		return l, err
	}
	if ctx.Err() != nil && l.Outcome != lock.Replayed {
		// The client left while Redis granted it: nobody will release it.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_, _ = s.engine.GiveBack(rctx, res, l.Token, req.Actor)
		return lock.Lease{}, ctx.Err()
	}
	return l, nil
}

// RenewLock extends a live lease.
func (s *Server) RenewLock(ctx context.Context, r api.RenewLockRequestObject) (api.RenewLockResponseObject, error) {
	l, err := s.renew(ctx, lock.KindLock, r.Key, r.Body)
	if err != nil {
		return nil, err
	}
	return api.RenewLock200JSONResponse(l), nil
}

func (s *Server) renew(ctx context.Context, k lock.Kind, name string, body *api.RenewRequest) (api.Lease, error) {
	if body == nil {
		return api.Lease{}, invalid("token", "token is required: the token that acquire returned")
	}
	if err := checkToken(body.Token, true); err != nil {
		return api.Lease{}, err
	}
	ttl, err := s.ttlRange(callerOf(ctx), "ttl_ms", body.TtlMs, 0, 100*time.Millisecond, s.cfg.MaxTTL)
	if err != nil {
		return api.Lease{}, err
	}
	value, err := checkValue(body.Value)
	if err != nil {
		return api.Lease{}, err
	}
	proof, err := checkProof(body.Proof)
	if err != nil {
		return api.Lease{}, err
	}
	res := lock.Resource{Kind: k, Name: name}
	l, err := s.engine.Renew(ctx, res, lock.RenewRequest{Token: body.Token, TTL: ttl, Actor: callerOf(ctx).name, Value: value, Proof: proof})
	if err != nil {
		return api.Lease{}, err
	}
	s.contention.renewed(res, l.AcquiredAt)
	logOwner(ctx, l.Owner)
	return wire.LeaseOf(l), nil
}

// ReleaseLock gives back one level of a lease.
func (s *Server) ReleaseLock(ctx context.Context, r api.ReleaseLockRequestObject) (api.ReleaseLockResponseObject, error) {
	rel, err := s.release(ctx, lock.KindLock, r.Key, r.Body)
	if err != nil {
		return nil, err
	}
	return api.ReleaseLock200JSONResponse(rel), nil
}

func (s *Server) release(ctx context.Context, k lock.Kind, name string, body *api.ReleaseRequest) (api.ReleaseResult, error) {
	if body == nil {
		return api.ReleaseResult{}, invalid("token", "token is required: the token that acquire returned")
	}
	if err := checkToken(body.Token, true); err != nil {
		return api.ReleaseResult{}, err
	}
	proof, err := checkProof(body.Proof)
	if err != nil {
		return api.ReleaseResult{}, err
	}
	res := lock.Resource{Kind: k, Name: name}
	rel, err := s.engine.Release(lock.WithProof(ctx, proof), res, body.Token, callerOf(ctx).name)
	if err != nil {
		return api.ReleaseResult{}, err
	}
	s.contention.ended(res, "released", rel.HeldFor)
	return api.ReleaseResult{Key: name, Released: rel.Released, Count: rel.Count}, nil
}

// ForceReleaseLock breaks a lease whoever holds it: every holder, or the
// one with the fence given.
func (s *Server) ForceReleaseLock(ctx context.Context, r api.ForceReleaseLockRequestObject) (api.ForceReleaseLockResponseObject, error) {
	b, err := s.forceRelease(ctx, lock.KindLock, r.Key, r.Body)
	if err != nil {
		return nil, err
	}
	return api.ForceReleaseLock200JSONResponse(b), nil
}

func (s *Server) forceRelease(ctx context.Context, k lock.Kind, name string, body *api.ForceReleaseRequest) (api.ForceReleaseResult, error) {
	reason, fence := "", int64(0)
	if body != nil && body.Reason != nil {
		reason = *body.Reason
		if err := checkText("reason", reason, lock.MaxReason); err != nil {
			return api.ForceReleaseResult{}, err
		}
	}
	if body != nil && body.Fence != nil {
		if fence = *body.Fence; fence <= 0 {
			return api.ForceReleaseResult{}, invalid("fence", "fence must be a positive integer, got %d", fence)
		}
	}
	res := lock.Resource{Kind: k, Name: name}
	b, err := s.engine.ForceReleaseFence(ctx, res, fence, callerOf(ctx).name, reason)
	if errors.Is(err, lock.ErrLeaseLost) {
		// No token was sent: only the fence can have missed.
		return api.ForceReleaseResult{}, problem.Errorf(lock.ErrLeaseLost, "%s is held, but by no holder with fence %d; nothing was broken", name, fence)
	}
	if err != nil {
		return api.ForceReleaseResult{}, err
	}
	s.contention.ended(res, "force_released", b.HeldFor)
	logOwner(ctx, b.Owner)
	return api.ForceReleaseResult{Key: name, Released: true, Owner: b.Owner, Fence: b.Fence}, nil
}

// RequestReleaseLock asks the exclusive holder of a lock to step aside;
// the holder learns it from its renewals and decides.
func (s *Server) RequestReleaseLock(ctx context.Context, r api.RequestReleaseLockRequestObject) (api.RequestReleaseLockResponseObject, error) {
	c := callerOf(ctx)
	by, reason, fence := c.name, "", int64(0)
	if b := r.Body; b != nil {
		if b.By != nil {
			if by = *b.By; checkOwner(by) != nil {
				return nil, invalid("by", "by must be 1-128 printable characters")
			}
		}
		if b.Reason != nil {
			reason = *b.Reason
			if err := checkText("reason", reason, lock.MaxReason); err != nil {
				return nil, err
			}
		}
		if b.Fence != nil {
			if fence = *b.Fence; fence <= 0 {
				return nil, invalid("fence", "fence must be a positive integer, got %d", fence)
			}
		}
	}
	rr, err := s.engine.RequestRelease(ctx, lock.Lock(r.Key), fence, by, reason, c.name)
	if errors.Is(err, lock.ErrLeaseLost) {
		return nil, problem.Errorf(lock.ErrLeaseLost, "%s is held, but by no holder with fence %d; nobody was asked", r.Key, fence)
	}
	if err != nil {
		return nil, err
	}
	logOwner(ctx, rr.Owner)
	return api.RequestReleaseLock202JSONResponse{Key: r.Key, Owner: rr.Owner, Fence: rr.Fence, RequestedAt: rr.At}, nil
}

// GetLock reads a live lock.
func (s *Server) GetLock(ctx context.Context, r api.GetLockRequestObject) (api.GetLockResponseObject, error) {
	st, err := s.engine.State(ctx, lock.Lock(r.Key))
	if err != nil {
		return nil, err
	}
	return api.GetLock200JSONResponse(wire.StateOf(st)), nil
}

// ListLocks pages through live locks.
func (s *Server) ListLocks(ctx context.Context, r api.ListLocksRequestObject) (api.ListLocksResponseObject, error) {
	states, next, err := s.list(ctx, lock.KindLock, r.Params.Prefix, r.Params.Limit, r.Params.Cursor)
	if err != nil {
		return nil, err
	}
	return api.ListLocks200JSONResponse{Locks: statesOf(states), NextCursor: next}, nil
}

// statesOf is a page of states on the wire.
func statesOf(states []lock.State) []api.LockState {
	out := make([]api.LockState, 0, len(states))
	for _, st := range states {
		out = append(out, wire.StateOf(st))
	}
	return out
}

// list pages through the live resources of one kind.
func (s *Server) list(ctx context.Context, kind lock.Kind,
	prefixParam *string, limitParam *int, cursorParam *string,
) ([]lock.State, *string, error) {
	prefix, err := checkPrefix(prefixParam)
	if err != nil {
		return nil, nil, err
	}
	limit, err := checkLimit(limitParam, 100)
	if err != nil {
		return nil, nil, err
	}
	cursor := ""
	if cursorParam != nil {
		cursor = *cursorParam
	}
	c := callerOf(ctx)
	scan, filter, err := listScope(c, s.cfg.Keys, prefix)
	if err != nil {
		return nil, nil, err
	}
	page, err := s.engine.List(ctx, kind, scan, limit, cursor)
	if err != nil {
		return nil, nil, err
	}
	out := make([]lock.State, 0, len(page.Locks))
	for _, st := range page.Locks {
		// A key limited to some prefixes sees only their resources (by
		// name).
		if !filter || c.mayTouch(s.cfg.Keys, st.Resource.Name) {
			out = append(out, st)
		}
	}
	var next *string
	if page.NextCursor != "" {
		next = &page.NextCursor
	}
	return out, next, nil
}

// GetLockHistory lists a key's recent events, newest first.
func (s *Server) GetLockHistory(ctx context.Context, r api.GetLockHistoryRequestObject) (api.GetLockHistoryResponseObject, error) {
	h, err := s.history(ctx, lock.KindLock, r.Key, r.Params.Limit, r.Params.Type)
	if err != nil {
		return nil, err
	}
	return api.GetLockHistory200JSONResponse(h), nil
}

func (s *Server) history(ctx context.Context, k lock.Kind, name string, limitParam *int, typ *api.EventType) (api.History, error) {
	limit, err := checkLimit(limitParam, 50)
	if err != nil {
		return api.History{}, err
	}
	res := lock.Resource{Kind: k, Name: name}
	var evs []lock.Event
	switch {
	case typ == nil:
		evs, err = s.engine.History(ctx, res, limit)
	case !typ.Valid():
		return api.History{}, invalid("type", "type must be one of acquired, reentered, renewed, released, expired, force_released, proclaimed, release_requested, restored")
	case *typ == api.Renewed:
		evs, err = s.engine.Renewals(ctx, res, limit)
	default:
		// Every kept event, then only this type.
		evs, err = s.engine.History(ctx, res, maxHistoryRead)
		evs = slices.DeleteFunc(evs, func(e lock.Event) bool { return e.Type != string(*typ) })
		evs = evs[:min(len(evs), limit)]
	}
	if err != nil {
		return api.History{}, err
	}
	out := api.History{Key: name, Events: make([]api.Event, len(evs))}
	for i, e := range evs {
		out.Events[i] = wire.EventOf(e)
	}
	return out, nil
}

// logOwner adds the lease owner to the request's access log line.
func logOwner(ctx context.Context, owner string) {
	if x := exchangeOf(ctx); x != nil {
		x.owner = owner
	}
}

// EndQuarantine ends the restart quarantine for every lockd on the Redis
// (lock.Service.EndQuarantine), for an admin key that may touch every key:
// the quarantine holds back all of them, so a key limited to prefixes may
// not lift it for the others. The end is logged as a warning with the
// actor and the reason: it is not an event of one key, so neither a key's
// history nor the event stream (whose events each name a key) holds it.
func (s *Server) EndQuarantine(ctx context.Context, r api.EndQuarantineRequestObject) (api.EndQuarantineResponseObject, error) {
	c := callerOf(ctx)
	if c.key != nil && len(c.key.Prefixes) > 0 {
		return nil, problem.Errorf(problem.ErrForbidden, "API key %s is limited to the prefixes %s; the quarantine holds back every key, so only a key without prefixes may end it",
			c.name, strings.Join(c.key.Prefixes, ", "))
	}
	if r.Body == nil || r.Body.Reason == "" {
		return nil, invalid("reason", "reason is required: say why the quarantine ends early (it is logged)")
	}
	if err := checkText("reason", r.Body.Reason, lock.MaxReason); err != nil {
		return nil, err
	}
	left, err := s.engine.EndQuarantine(ctx)
	if err != nil {
		return nil, err
	}
	requestLog(ctx).Warn().Str("actor", c.name).Str("reason", r.Body.Reason).Int64("remaining_ms", left.Milliseconds()).
		Msg("restart quarantine ended early by an operator: keys are granted again, although leases Redis forgot may still be live")
	return api.EndQuarantine200JSONResponse{Ended: left > 0, RemainingMs: left.Milliseconds()}, nil
}
