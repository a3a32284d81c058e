package lock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// A lock set bound to a session (SetRequest.Session) is as many grants of
// the session as it has keys, each as one grant in the session is
// (session.go): its lease carries the session's handle, its expiry is the
// session's and moves with the session's renewals alone, and the
// session's end or lapse lets go of every key at once. The set's own
// renewal keeps its keys' expiry (as a lone grant's renewal in a session
// does) and its release lets go of them all.
//
// The session's list has one entry per key, under setGrantField: the
// set's keys share one token, and the list is by token. The session's
// renewal and end act on a set whole (its record names its keys): a set
// one of whose keys is lost is released, as RenewSet releases it.

// setGrantSep joins a set's token and a key in the session's list: no
// token has it (URL-safe base64).
const setGrantSep = "@"

// setGrantField is the session list's field of a set's key.
func setGrantField(token, id string) string { return token + setGrantSep + id }

// setToken is the set's token of a session's grant, if it is a set's key.
func (g sessionGrant) setToken() (string, bool) {
	t, _, ok := strings.Cut(g.token, setGrantSep)
	return t, ok
}

// acquireSetInSession is AcquireSet for a set bound to a session: its TTL
// is the session's time left, and once granted each key is on the
// session's list.
func (e *Engine) acquireSetInSession(ctx context.Context, req SetRequest) (SetLease, error) {
	h := sessionHandle(req.SessionScope, req.Session)
	r, err := e.n.session(ctx, sessionCall{handle: h, op: "check"}, false)
	if err != nil {
		return SetLease{}, err
	}
	req.TTL, req.sessionHandle = r.expiresAt.Sub(r.now), h
	if req.Owner == "" {
		// The set is the session owner's unless it says.
		req.Owner = r.owner
	}
	if req.TTL <= 0 {
		return SetLease{}, ErrSessionNotFound
	}
	set, err := e.AcquireSet(ctx, req)
	if err != nil {
		return SetLease{}, err
	}
	set.InSession = true
	for _, k := range req.Keys {
		// A key Redis lost with its data is put back bound to the session
		// (restore.go), as a lone grant in it is.
		e.n.ledger.fill(k, set.Token, AcquireRequest{Value: req.Value, sessionHandle: h})
	}
	replies := make([]sessionReply, len(set.Leases))
	errs := eachKey(req.Keys, func(i int, k string) (err error) {
		replies[i], err = e.n.session(ctx, sessionCall{handle: h, op: "attach", a: k, b: setGrantField(set.Token, k)}, false)
		return err
	})
	if err := errors.Join(errs...); err != nil {
		// The session ended or lapsed while the set was granted: the set
		// must not outlive it. (Unanswered: it lapses with the session.)
		_, _ = e.ReleaseSet(context.WithoutCancel(ctx), set.Token, req.Actor)
		return SetLease{}, err
	}
	a := replies[len(replies)-1]
	left := a.expiresAt.Sub(a.now)
	// A waiter's keys have the session's expiry as of its request; the
	// session may have been renewed since. No key may end before its
	// session (acquireInSession).
	if d := set.ExpiresAt.Sub(a.expiresAt); d > sessionSlack || d < 0 {
		renewed, err := e.renewSetKeys(ctx, set.Token, req.Keys, left, req.Actor)
		if err != nil {
			_, _ = e.ReleaseSet(context.WithoutCancel(ctx), set.Token, req.Actor)
			return SetLease{}, err
		}
		set.TTL, set.AcquiredAt, set.ExpiresAt = renewed.TTL, renewed.AcquiredAt, renewed.ExpiresAt
	}
	// The record lives as long as the keys: the session's renewals move
	// it with them (renewSessionSet).
	rec := setRecord{Keys: req.Keys, Owner: req.Owner, TTLMS: left.Milliseconds(), Session: h}
	if err := e.n.writeSetRecord(ctx, set.Token, rec, left+sessionSlack); err != nil {
		_, _ = e.ReleaseSet(context.WithoutCancel(ctx), set.Token, req.Actor)
		return SetLease{}, err
	}
	return set, nil
}

// renewSetKeys renews every key of the set as its session does (the one
// renewal that moves a key bound to a session) to ttl, and answers the
// set as the earliest key's expiry says.
func (e *Engine) renewSetKeys(ctx context.Context, token string, keys []string, ttl time.Duration, actor string) (SetLease, error) {
	leases := make([]Lease, len(keys))
	errs := eachKey(keys, func(i int, k string) (err error) {
		leases[i], err = e.n.renewBy(ctx, k, RenewRequest{Token: token, TTL: ttl, Actor: actor}, true)
		return err
	})
	for i, err := range errs {
		if errors.Is(err, ErrLeaseLost) || errors.Is(err, ErrNotFound) {
			return SetLease{}, fmt.Errorf("%w: the set's key %s: %w", ErrLeaseLost, keys[i], err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return SetLease{}, err
	}
	return setLeaseOf(token, "", keys, leases), nil
}

// setLeaseOf is a set of its keys' leases: its expiry is the earliest.
func setLeaseOf(token, owner string, keys []string, leases []Lease) SetLease {
	l := SetLease{Token: token, Owner: owner}
	for i, kl := range leases {
		l.Leases = append(l.Leases, SetKey{Key: keys[i], Fence: kl.Fence})
		if l.ExpiresAt.IsZero() || kl.ExpiresAt.Before(l.ExpiresAt) {
			l.AcquiredAt, l.ExpiresAt, l.TTL = kl.AcquiredAt, kl.ExpiresAt, kl.TTL
		}
	}
	return l
}

// renewSetOfSession is RenewSet of a set bound to a session (r, its
// record): its keys keep their expiry, the session's, as a lone grant in
// a session renewed by its token does. A key the set no longer holds
// ends the set, as RenewSet says.
func (e *Engine) renewSetOfSession(ctx context.Context, token string, r setRecord, actor string) (SetLease, error) {
	leases, err := e.renewKeys(ctx, token, r, actor, func(k string) (Lease, error) {
		return e.n.renewAs(ctx, k, RenewRequest{Token: token, Actor: actor}, renewBySet)
	})
	if err != nil {
		return SetLease{}, err
	}
	l := setLeaseOf(token, r.Owner, r.Keys, leases)
	l.InSession = true
	return l, nil
}

// sessionSets splits a session's grants into its lone grants and its
// sets' keys, by set token.
func sessionSets(grants []sessionGrant) (lone []sessionGrant, sets map[string][]sessionGrant) {
	for _, g := range grants {
		if t, ok := g.setToken(); ok {
			if sets == nil {
				sets = map[string][]sessionGrant{}
			}
			sets[t] = append(sets[t], g)
		} else {
			lone = append(lone, g)
		}
	}
	return lone, sets
}

// renewSessionSet renews the set with token, bound to the session with
// handle h, to left (the session's time left): every key its record
// names, then the record. A set that is gone (released by its holder) or
// that lost a key is released and leaves the session's list (entries,
// the list's).
func (e *Engine) renewSessionSet(ctx context.Context, h, token string, entries []sessionGrant, left time.Duration, actor string) error {
	r, err := e.n.readSetRecord(ctx, token)
	if err == nil {
		_, err = e.renewSetKeys(ctx, token, r.Keys, left, actor)
		if err == nil {
			r.TTLMS, r.Session = left.Milliseconds(), h
			return e.n.writeSetRecord(ctx, token, r, left+sessionSlack)
		}
	}
	if !errors.Is(err, ErrLeaseLost) {
		return err
	}
	if _, err := e.ReleaseSet(ctx, token, actor); err != nil && !errors.Is(err, ErrLeaseLost) {
		return err
	}
	return eachGrant(entries, func(g sessionGrant) error {
		_, err := e.n.session(ctx, sessionCall{handle: h, op: "detach", a: g.id, b: g.token}, false)
		if errors.Is(err, ErrSessionNotFound) {
			err = nil
		}
		return err
	})
}

// endSessionSet releases the set with token, its session ended.
func (e *Engine) endSessionSet(ctx context.Context, token string) error {
	_, err := e.ReleaseSet(ctx, token, "session")
	if errors.Is(err, ErrLeaseLost) {
		return nil
	}
	return err
}
