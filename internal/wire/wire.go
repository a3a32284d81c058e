// Package wire converts the engine's values (package lock) to the
// contract's (package api): leases, states and events as the API, the
// event stream and webhooks send them. It holds no policy: what a caller
// may see is decided before a value gets here.
//
// Tokens and proofs: a Lease carries its token and its proof (they go to
// the holder alone); a State and a LockEvent never do. A resource is shown by its name, and
// its kind by the route or the event's kind.
package wire

import (
	"github.com/lockd/lockd/api"
	"github.com/lockd/lockd/internal/lock"
)

// ModeOf is the mode of a grant on the wire. An engine that says none
// (Redlock) grants locks exclusively and semaphores by permit.
func ModeOf(m lock.Mode, semaphore bool) api.GrantMode {
	switch {
	case m != "":
		return api.GrantMode(m)
	case semaphore:
		return api.GrantModePermit
	default:
		return api.GrantModeExclusive
	}
}

// LeaseOf is a granted or renewed lease on the wire, token included: it
// is the holder's answer.
func LeaseOf(l lock.Lease) api.Lease {
	name, sem := l.Resource.Name, l.Resource.Kind == lock.KindSemaphore
	out := api.Lease{
		Key: name, Mode: ModeOf(l.Mode, sem), Owner: l.Owner, Token: l.Token, Fence: l.Fence, Count: l.Count,
		TtlMs: l.TTL.Milliseconds(), AcquiredAt: l.AcquiredAt, ExpiresAt: l.ExpiresAt,
	}
	if sem {
		out.Limit = ptr(l.Limit)
	}
	if l.Outcome == lock.Replayed {
		out.Replayed = ptr(true)
	}
	out.ReleaseRequested = releaseRequestedOf(l.ReleaseRequested)
	out.Proof = proofOf(l)
	return out
}

// proofOf is a lease's proof on the wire: absent when the server signs
// none.
func proofOf(l lock.Lease) *string {
	if l.Proof == "" {
		return nil
	}
	return ptr(l.Proof)
}

// releaseRequestedOf is a pending request that the holder step aside, nil
// for none.
func releaseRequestedOf(r *lock.ReleaseRequest) *api.ReleaseRequested {
	if r == nil {
		return nil
	}
	return &api.ReleaseRequested{By: r.By, Reason: r.Reason, At: r.At}
}

// StateOf is a live lock's or semaphore's state on the wire: its holders
// and its queue, never a token.
func StateOf(s lock.State) api.LockState {
	name, sem := s.Resource.Name, s.Resource.Kind == lock.KindSemaphore
	out := api.LockState{
		Key: name, Mode: ModeOf(s.Mode, sem), Owner: s.Owner, Fence: s.Fence, Count: s.Count,
		TtlMs: s.TTL.Milliseconds(), RemainingMs: s.Remaining.Milliseconds(),
		AcquiredAt: s.AcquiredAt, RenewedAt: s.RenewedAt, ExpiresAt: s.ExpiresAt,
		Renewals: s.Renewals, Waiters: s.Waiters, AtRisk: s.AtRisk, HoldersTotal: ptr(s.HoldersTotal),
		Holders: make([]api.Holder, 0, max(1, len(s.Holders))),
		Queue:   make([]api.Queued, 0, len(s.Queue)),
	}
	if sem {
		out.Limit = ptr(s.Limit)
	}
	out.Value = valueOf(s.Value)
	out.ReleaseRequested = releaseRequestedOf(s.ReleaseRequested)
	if !s.MinHoldUntil.IsZero() {
		out.MinHoldUntil = ptr(s.MinHoldUntil)
	}
	if s.Set > 0 {
		out.Set = ptr(s.Set)
	}
	holders := s.Holders
	if len(holders) == 0 && s.Count > 0 {
		// An engine that lists no holders (Redlock) has one: the one
		// the state describes. Count 0 is a key a hold window keeps
		// after its holder's release: nobody holds it.
		holders = []lock.Holder{{Owner: s.Owner, Mode: s.Mode, Fence: s.Fence, Count: s.Count, TTL: s.TTL,
			AcquiredAt: s.AcquiredAt, ExpiresAt: s.ExpiresAt, Remaining: s.Remaining, Value: s.Value}}
	}
	for _, h := range holders {
		out.Holders = append(out.Holders, api.Holder{
			Owner: h.Owner, Mode: ModeOf(h.Mode, sem), Fence: h.Fence, Count: h.Count, TtlMs: h.TTL.Milliseconds(),
			AcquiredAt: h.AcquiredAt, ExpiresAt: h.ExpiresAt, RemainingMs: h.Remaining.Milliseconds(),
			Value: valueOf(h.Value),
		})
	}
	for _, q := range s.Queue {
		out.Queue = append(out.Queue, api.Queued{Owner: q.Owner, Mode: ModeOf(q.Mode, sem), WaitingSince: q.WaitingSince})
	}
	return out
}

// LockEventOf is a change as the event stream and webhooks send it: never
// a token. A semaphore's event carries its name as the key, and kind
// semaphore.
func LockEventOf(c lock.Change) api.LockEvent {
	kind := api.LockEventKindLock
	switch c.Resource.Kind {
	case lock.KindSemaphore:
		kind = api.LockEventKindSemaphore
	case lock.KindElection:
		kind = api.LockEventKindElection
	}
	out := api.LockEvent{
		Id: c.ID, Type: api.LockEventType(c.Type), Kind: kind, Key: c.Resource.Name, At: c.At,
		Owner: c.Owner, Fence: c.Fence, Actor: c.Actor, Reason: c.Reason,
	}
	if c.Set > 0 {
		out.Set = ptr(c.Set)
	}
	return out
}

// EventOf is an event of a key's history on the wire; a renewal carries
// the time that was left.
func EventOf(e lock.Event) api.Event {
	out := api.Event{
		Type: api.EventType(e.Type), At: e.At, Owner: e.Owner, Fence: e.Fence,
		TtlMs: e.TTL.Milliseconds(), Count: e.Count, Actor: e.Actor, Reason: e.Reason,
	}
	if e.Type == string(api.Renewed) {
		out.RemainingMs = ptr(e.Left.Milliseconds())
	}
	if e.TraceID != "" {
		out.TraceId = ptr(e.TraceID)
	}
	if e.Set > 0 {
		out.Set = ptr(e.Set)
	}
	return out
}

func ptr[T any](v T) *T { return &v }

// valueOf is a grant's value on the wire: absent when it has none.
func valueOf(v string) *api.Value {
	if v == "" {
		return nil
	}
	raw := api.Value(v)
	return &raw
}

// LeadershipOf is a leadership on the wire, token included: the leader's
// answer. value is the leader's value as it stands ("" for none).
func LeadershipOf(l lock.Lease, value string) api.Leadership {
	out := api.Leadership{
		Key: l.Resource.Name, Leader: l.Owner, Token: l.Token, Term: l.Fence, Value: valueOf(value),
		TtlMs: l.TTL.Milliseconds(), AcquiredAt: l.AcquiredAt, ExpiresAt: l.ExpiresAt,
	}
	if l.Outcome == lock.Replayed {
		out.Replayed = ptr(true)
	}
	out.Proof = proofOf(l)
	return out
}

// ElectionStateOf is an election's state on the wire: its leader, value
// and term, and its candidates in line; never a token.
func ElectionStateOf(s lock.State) api.ElectionState {
	out := api.ElectionState{Key: s.Resource.Name, Candidates: make([]api.Candidate, 0, len(s.Queue))}
	if s.Owner != "" || s.Fence != 0 {
		out.Leader, out.Term, out.Value = ptr(s.Owner), ptr(s.Fence), valueOf(s.Value)
		out.Since, out.ExpiresAt, out.RemainingMs = ptr(s.AcquiredAt), ptr(s.ExpiresAt), ptr(s.Remaining.Milliseconds())
	}
	for _, q := range s.Queue {
		out.Candidates = append(out.Candidates, api.Candidate{Candidate: q.Owner, WaitingSince: q.WaitingSince})
	}
	return out
}
