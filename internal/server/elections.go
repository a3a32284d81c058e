package server

import (
	"context"

	"github.com/lockd/lockd/api"
	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/wire"
)

// The election operations are the lock operations on a resource of kind
// lock.KindElection: a campaign is an exclusive acquire that waits in the
// FIFO queue, the leadership's fence is its term, proclaim is a renew
// with a value, resign a release. Only the words on the wire differ.

// campaignBody is a campaign's body as an acquire's. The candidate is
// checked here, so that a 400 names it as the client sent it.
func campaignBody(b *api.CampaignRequest) (acquireBody, error) {
	if b == nil {
		return acquireBody{}, nil
	}
	if b.Candidate != nil {
		if err := checkOwner(*b.Candidate); err != nil {
			return acquireBody{}, invalid("candidate", "candidate must be 1-128 printable characters")
		}
	}
	return acquireBody{owner: b.Candidate, ttlMs: b.TtlMs, waitMs: b.WaitMs, lockDelayMs: b.LockDelayMs, value: b.Value,
		session: b.Session}, nil
}

// Campaign waits in line to lead the election, then answers with the
// leadership.
func (s *Server) Campaign(ctx context.Context, r api.CampaignRequestObject) (api.CampaignResponseObject, error) {
	body, err := campaignBody(r.Body)
	if err != nil {
		return nil, err
	}
	req, err := s.acquireRequest(ctx, lock.KindElection, body, r.Params.IdempotencyKey)
	if err != nil {
		return nil, err
	}
	l, err := s.acquire(ctx, lock.Election(r.Key), req)
	if err != nil {
		return nil, err
	}
	return api.Campaign200JSONResponse{Body: wire.LeadershipOf(l, req.Value), Headers: api.Campaign200ResponseHeaders{IdempotentReplayed: replayed(l)}}, nil
}

// CampaignHold campaigns, then leads while the connection stays open.
func (s *Server) CampaignHold(ctx context.Context, r api.CampaignHoldRequestObject) (api.CampaignHoldResponseObject, error) {
	body, err := campaignBody(r.Body)
	if err != nil {
		return nil, err
	}
	return s.hold(ctx, lock.KindElection, r.Key, body)
}

// Proclaim sets the leader's value, keeping (and renewing) its leadership.
func (s *Server) Proclaim(ctx context.Context, r api.ProclaimRequestObject) (api.ProclaimResponseObject, error) {
	if r.Body == nil {
		return nil, invalid("token", "token is required: the token that campaign returned")
	}
	if err := checkToken(r.Body.Token, true); err != nil {
		return nil, err
	}
	value, err := checkValue(&r.Body.Value)
	if err != nil {
		return nil, err
	}
	proof, err := checkProof(r.Body.Proof)
	if err != nil {
		return nil, err
	}
	res := lock.Election(r.Key)
	l, err := s.engine.Renew(ctx, res, lock.RenewRequest{Token: r.Body.Token, Actor: callerOf(ctx).name, Value: value, Proof: proof})
	if err != nil {
		return nil, err
	}
	s.contention.renewed(res, l.AcquiredAt)
	logOwner(ctx, l.Owner)
	return api.Proclaim200JSONResponse(wire.LeadershipOf(l, value)), nil
}

// RenewLeadership extends the leadership (and, with a value, proclaims).
func (s *Server) RenewLeadership(ctx context.Context, r api.RenewLeadershipRequestObject) (api.RenewLeadershipResponseObject, error) {
	l, err := s.renew(ctx, lock.KindElection, r.Key, r.Body)
	if err != nil {
		return nil, err
	}
	value := ""
	if r.Body.Value != nil {
		value, _ = checkValue(r.Body.Value) // checked by renew
	}
	return api.RenewLeadership200JSONResponse(api.Leadership{
		Key: l.Key, Leader: l.Owner, Token: l.Token, Term: l.Fence, Value: valueOrNil(value),
		TtlMs: l.TtlMs, AcquiredAt: l.AcquiredAt, ExpiresAt: l.ExpiresAt, Proof: l.Proof,
	}), nil
}

// Resign gives up the leadership: the next candidate leads at once.
func (s *Server) Resign(ctx context.Context, r api.ResignRequestObject) (api.ResignResponseObject, error) {
	rel, err := s.release(ctx, lock.KindElection, r.Key, r.Body)
	if err != nil {
		return nil, err
	}
	return api.Resign200JSONResponse{Key: rel.Key, Resigned: rel.Released}, nil
}

// Handover gives up the leadership to a named candidate, who leads next
// ahead of the queue; 409 not_candidate when it is not campaigning.
func (s *Server) Handover(ctx context.Context, r api.HandoverRequestObject) (api.HandoverResponseObject, error) {
	if r.Body == nil {
		return nil, invalid("token", "token is required: the token that campaign returned")
	}
	if err := checkToken(r.Body.Token, true); err != nil {
		return nil, err
	}
	if err := checkOwner(r.Body.To); err != nil {
		return nil, invalid("to", "to must be the candidate that leads next: 1-128 printable characters")
	}
	res := lock.Election(r.Key)
	rel, err := s.engine.Handover(ctx, res, r.Body.Token, r.Body.To, callerOf(ctx).name)
	if err != nil {
		return nil, err
	}
	s.contention.ended(res, "released", rel.HeldFor)
	return api.Handover200JSONResponse{Key: r.Key, Resigned: rel.Released}, nil
}

// ForceReleaseElection breaks a stuck leadership.
func (s *Server) ForceReleaseElection(ctx context.Context, r api.ForceReleaseElectionRequestObject) (api.ForceReleaseElectionResponseObject, error) {
	b, err := s.forceRelease(ctx, lock.KindElection, r.Key, r.Body)
	if err != nil {
		return nil, err
	}
	return api.ForceReleaseElection200JSONResponse(b), nil
}

// GetElection reads who leads, and who waits.
func (s *Server) GetElection(ctx context.Context, r api.GetElectionRequestObject) (api.GetElectionResponseObject, error) {
	st, err := s.engine.State(ctx, lock.Election(r.Key))
	if err != nil {
		return nil, err
	}
	return api.GetElection200JSONResponse(wire.ElectionStateOf(st)), nil
}

// ListElections pages through elections with a leader.
func (s *Server) ListElections(ctx context.Context, r api.ListElectionsRequestObject) (api.ListElectionsResponseObject, error) {
	states, next, err := s.list(ctx, lock.KindElection, r.Params.Prefix, r.Params.Limit, r.Params.Cursor)
	if err != nil {
		return nil, err
	}
	out := make([]api.ElectionState, 0, len(states))
	for _, st := range states {
		out = append(out, wire.ElectionStateOf(st))
	}
	return api.ListElections200JSONResponse{Elections: out, NextCursor: next}, nil
}

// GetElectionHistory lists the election's recent events, newest first.
func (s *Server) GetElectionHistory(ctx context.Context, r api.GetElectionHistoryRequestObject) (api.GetElectionHistoryResponseObject, error) {
	h, err := s.history(ctx, lock.KindElection, r.Key, r.Params.Limit, r.Params.Type)
	if err != nil {
		return nil, err
	}
	return api.GetElectionHistory200JSONResponse(h), nil
}

func valueOrNil(v string) *api.Value {
	if v == "" {
		return nil
	}
	raw := api.Value(v)
	return &raw
}
