package server

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/lockd/lockd/api"
	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/problem"
)

// AcquireLockSet takes several locks all or nothing (lock.Engine.AcquireSet).
func (s *Server) AcquireLockSet(ctx context.Context, r api.AcquireLockSetRequestObject) (api.AcquireLockSetResponseObject, error) {
	req, err := s.lockSetRequest(ctx, r.Body)
	if err != nil {
		return nil, err
	}
	if r.Body.Token != nil || r.Body.Proof != nil {
		return nil, invalid("token", "a lock set has no re-entry: POST /v1/lock-sets/hold takes a live set over by its token")
	}
	set, err := s.acquireLockSet(ctx, req)
	if err != nil {
		return nil, err
	}
	return api.AcquireLockSet200JSONResponse(lockSetOf(set)), nil
}

// acquireLockSet calls the engine and gives back a set whose client has
// gone.
func (s *Server) acquireLockSet(ctx context.Context, req lock.SetRequest) (lock.SetLease, error) {
	if req.Wait > 0 {
		release, err := s.take(ctx, quotaWaiters)
		if err != nil {
			return lock.SetLease{}, err
		}
		defer release()
	}
	start := time.Now()
	set, err := s.engine.AcquireSet(ctx, req)
	// The contention metrics count each key's grant, or the refusal of
	// the key that was not free.
	if res := refusedResource(err); err != nil && res != (lock.Resource{}) {
		s.contention.acquired(res, "", err, time.Since(start), req.Wait > 0)
	}
	for _, l := range set.Leases {
		s.contention.acquired(lock.Lock(l.Key), lock.Granted, nil, time.Since(start), req.Wait > 0)
	}
	if err != nil {
		return set, err
	}
	if ctx.Err() != nil {
		// The client left while Redis granted it: nobody will release it.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_, _ = s.engine.ReleaseSet(rctx, set.Token, req.Actor)
		return lock.SetLease{}, ctx.Err()
	}
	return set, nil
}

// lockSetRequest validates a lock set's body: every key by its place
// (keys[3]), the rest as an acquire's.
func (s *Server) lockSetRequest(ctx context.Context, body *api.LockSetRequest) (lock.SetRequest, error) {
	if body == nil {
		return lock.SetRequest{}, invalid("keys", "keys is required: 2 … 64 lock keys")
	}
	c := callerOf(ctx)
	for i, k := range body.Keys {
		if lock.ValidKey(k) && c.key != nil && !c.key.MayTouch(k) {
			return lock.SetRequest{}, problem.Errorf(problem.ErrForbidden, "API key %s may not touch keys outside its prefixes %s (keys[%d] is %s)",
				c.name, strings.Join(c.key.Prefixes, ", "), i, k)
		}
	}
	if body.Mode != nil && !body.Mode.Valid() {
		return lock.SetRequest{}, invalid("mode", "mode must be exclusive or shared, got %q", *body.Mode)
	}
	if body.Session != nil && body.TtlMs != nil {
		return lock.SetRequest{}, invalid("ttl_ms", "ttl_ms and session exclude each other: a lock set in a session lives as long as the session")
	}
	req, err := s.acquireRequest(ctx, lock.KindLock, acquireBody{owner: body.Owner, ttlMs: body.TtlMs, waitMs: body.WaitMs,
		mode: body.Mode, value: body.Value, session: body.Session}, nil)
	if err != nil {
		return lock.SetRequest{}, err
	}
	set := lock.SetRequest{Keys: body.Keys, Owner: req.Owner, TTL: req.TTL, Wait: req.Wait, Actor: req.Actor, Mode: req.Mode,
		Value: req.Value, Session: req.Session, SessionScope: req.SessionScope}
	if err := lock.CheckSet(set); err != nil {
		return lock.SetRequest{}, err
	}
	return set, nil
}

// HoldLockSet takes a lock set, then answers with an event stream while
// the server renews every key every ttl/3 on the client's behalf (as a
// lock's hold does).
func (s *Server) HoldLockSet(ctx context.Context, r api.HoldLockSetRequestObject) (api.HoldLockSetResponseObject, error) {
	req, err := s.lockSetRequest(ctx, r.Body)
	if err != nil {
		return nil, err
	}
	if req.Session != "" {
		return nil, invalid("session", "a hold keeps its own leases: acquire the set in the session instead (POST /v1/lock-sets/acquire), or hold the session (POST /v1/sessions/{id}/hold)")
	}
	releaseHold, err := s.takeHold(ctx)
	if err != nil {
		return nil, err
	}
	var set lock.SetLease
	if r.Body.Token != nil || r.Body.Proof != nil {
		set, err = s.takeOverLockSet(ctx, req, r.Body)
	} else {
		set, err = s.acquireLockSet(ctx, req)
	}
	if err != nil {
		releaseHold()
		return nil, err
	}
	return &holdStream{s: s, ctx: ctx, h: &setHolding{s: s, set: set, actor: req.Actor}, releaseHold: releaseHold}, nil
}

// takeOverLockSet renews, for a hold stream, the live set of body's token
// (restored from its proof should Redis have lost it), which must hold
// req's keys.
func (s *Server) takeOverLockSet(ctx context.Context, req lock.SetRequest, body *api.LockSetRequest) (lock.SetLease, error) {
	if body.Token == nil {
		return lock.SetLease{}, invalid("proof", "proof goes with the token of the set it was answered for: send both, or neither")
	}
	if err := checkToken(*body.Token, true); err != nil {
		return lock.SetLease{}, err
	}
	proof, err := checkSetProof(body.Proof)
	if err != nil {
		return lock.SetLease{}, err
	}
	var ttl time.Duration // the set's own
	if body.TtlMs != nil {
		ttl = req.TTL
	}
	set, err := s.engine.RenewSet(lock.WithProof(ctx, proof), *body.Token, ttl, req.Actor)
	if err != nil {
		return lock.SetLease{}, err
	}
	held := make([]string, 0, len(set.Leases))
	for _, l := range set.Leases {
		held = append(held, l.Key)
	}
	if len(held) != len(req.Keys) || !sameKeys(held, req.Keys) {
		return lock.SetLease{}, invalid("keys", "the set of this token holds %s, not the keys named", strings.Join(held, ", "))
	}
	return set, nil
}

// sameKeys says whether a and b, of the same length and each without
// repeats, name the same keys.
func sameKeys(a, b []string) bool {
	in := make(map[string]bool, len(a))
	for _, k := range a {
		in[k] = true
	}
	for _, k := range b {
		if !in[k] {
			return false
		}
	}
	return true
}

// setHolding is a lock set held by a stream.
type setHolding struct {
	s     *Server
	set   lock.SetLease
	actor string
}

func (h *setHolding) first() (string, any) { return "acquired", lockSetOf(h.set) }

func (h *setHolding) renew(ctx context.Context) (any, *lock.ReleaseRequest, error) {
	next, err := h.s.engine.RenewSet(lock.WithProof(ctx, h.set.Proof), h.set.Token, h.set.TTL, h.actor)
	if err != nil {
		return nil, nil, err
	}
	h.set = next
	return lockSetOf(next), nil, nil
}

func (h *setHolding) release(ctx context.Context) {
	_, _ = h.s.engine.ReleaseSet(lock.WithProof(ctx, h.set.Proof), h.set.Token, h.actor)
}

func (h *setHolding) ttl() time.Duration      { return h.set.TTL }
func (h *setHolding) expiresAt() time.Time    { return h.set.ExpiresAt }
func (h *setHolding) resource() lock.Resource { return lock.Resource{} }

// RenewLockSet renews every lease of a set by its token.
func (s *Server) RenewLockSet(ctx context.Context, r api.RenewLockSetRequestObject) (api.RenewLockSetResponseObject, error) {
	if r.Body == nil {
		return nil, invalid("token", "token is required: the token that acquire returned")
	}
	if err := checkToken(r.Body.Token, true); err != nil {
		return nil, err
	}
	ttl, err := s.ttlRange(callerOf(ctx), "ttl_ms", r.Body.TtlMs, 0, 100*time.Millisecond, s.cfg.MaxTTL)
	if err != nil {
		return nil, err
	}
	proof, err := checkSetProof(r.Body.Proof)
	if err != nil {
		return nil, err
	}
	set, err := s.engine.RenewSet(lock.WithProof(ctx, proof), r.Body.Token, ttl, callerOf(ctx).name)
	if err != nil {
		return nil, err
	}
	logOwner(ctx, set.Owner)
	return api.RenewLockSet200JSONResponse(lockSetOf(set)), nil
}

// ReleaseLockSet releases every lease of a set by its token.
func (s *Server) ReleaseLockSet(ctx context.Context, r api.ReleaseLockSetRequestObject) (api.ReleaseLockSetResponseObject, error) {
	if r.Body == nil {
		return nil, invalid("token", "token is required: the token that acquire returned")
	}
	if err := checkToken(r.Body.Token, true); err != nil {
		return nil, err
	}
	proof, err := checkSetProof(r.Body.Proof)
	if err != nil {
		return nil, err
	}
	n, err := s.engine.ReleaseSet(lock.WithProof(ctx, proof), r.Body.Token, callerOf(ctx).name)
	if err != nil {
		return nil, err
	}
	return api.ReleaseLockSet200JSONResponse{Released: n}, nil
}

// lockSetOf is a set on the wire: the token and the proof go to its
// holder only.
func lockSetOf(set lock.SetLease) api.LockSet {
	out := api.LockSet{Token: set.Token, Owner: set.Owner, TtlMs: set.TTL.Milliseconds(), ExpiresAt: set.ExpiresAt,
		Leases: make([]api.LockSetLease, 0, len(set.Leases))}
	if !set.AcquiredAt.IsZero() {
		out.AcquiredAt = ptr(set.AcquiredAt)
	}
	if set.Proof != "" {
		out.Proof = ptr(set.Proof)
	}
	for _, l := range set.Leases {
		out.Leases = append(out.Leases, api.LockSetLease{Key: l.Key, Fence: l.Fence})
	}
	return out
}

// refusedResource is the resource a refusal names itself, for an
// operation whose route names none (a lock set's acquire: the key that
// was not free).
func refusedResource(err error) lock.Resource {
	var held *lock.HeldError
	var queued *lock.QueuedError
	var delay *lock.DelayError
	var kept *lock.MinHoldError
	switch {
	case errors.As(err, &held):
		return held.Resource
	case errors.As(err, &queued):
		return queued.Resource
	case errors.As(err, &delay):
		return delay.Resource
	case errors.As(err, &kept):
		return kept.Resource
	}
	return lock.Resource{}
}

// checkSetProof validates the shape of an optional set proof, as
// checkProof a lease's: a bound on its length, lock.MaxSetProof (a set
// proof grows with its keys).
func checkSetProof(s *string) (string, error) {
	if s == nil {
		return "", nil
	}
	if len(*s) > lock.MaxSetProof {
		return "", invalid("proof", "proof must be at most %d characters: send back the proof a lock set's grant or renewal answered, as it came", lock.MaxSetProof)
	}
	return *s, nil
}
