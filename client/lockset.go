package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lockd/lockd/api"
)

// LockSet is several locks held all or nothing with one token (LockMany).
// Unless taken with NoAutoRenew, a watchdog renews every key every ttl/3,
// as a Lease's does, until Release or loss; losing one key loses the set.
// Its methods are safe for concurrent use.
type LockSet struct {
	c      *Client
	token  string
	ttl    time.Duration
	leases []api.LockSetLease

	holding
	proof string // the latest the server answered
}

// LockMany takes every key of keys (2 … 64 distinct lock keys), exclusively
// (or with opts.Mode Shared, shared), or none of them, waiting up to opts.Wait: sets wait for their keys in
// one order, so two sets never wait for each other, and a waiting set
// holds none of its keys. A key that is not free answers the error a lone
// Acquire of it would (ErrHeld, ErrQueued, ErrLockDelay), naming that key.
// opts.Owner, TTL, Wait, Mode, Value, NoAutoRenew, Session and SessionID
// apply; a lock-delay, a hold window and an idempotency key are not
// offered for sets. In a session (opts.Session or opts.SessionID) every
// key lives as long as the session, TTL is not sent and the set has no
// watchdog of its own; with opts.Session it is lost when the session is.
func (c *Client) LockMany(ctx context.Context, keys []string, opts AcquireOptions) (*LockSet, error) {
	var mode *api.LockMode
	switch opts.Mode {
	case "", Exclusive:
	case Shared:
		mode = ptr(api.LockModeShared)
	default:
		return nil, fmt.Errorf("%w: mode %q: a lock set is held exclusive or shared", ErrInvalid, opts.Mode)
	}
	if opts.LockDelay > 0 || opts.MinHold > 0 || opts.IdempotencyKey != "" {
		return nil, fmt.Errorf("%w: a lock set takes no lock-delay, hold window or idempotency key", ErrInvalid)
	}
	body := api.LockSetRequest{Keys: keys, Mode: mode}
	if opts.Owner != "" {
		body.Owner = &opts.Owner
	}
	switch {
	case opts.Session != nil:
		body.Session = &opts.Session.id
	case opts.SessionID != "":
		body.Session = &opts.SessionID
	case opts.TTL > 0:
		body.TtlMs = ptr(opts.TTL.Milliseconds())
	}
	if opts.Value != nil {
		body.Value = &opts.Value
	}
	waitUntil := time.Now().Add(opts.Wait)
	for {
		if w := time.Until(waitUntil); w > 0 {
			w = min(w, roundMax)
			if m := time.Duration(c.maxWait.Load()); m > 0 {
				w = min(w, m)
			}
			body.WaitMs = ptr(w.Milliseconds())
		} else {
			body.WaitMs = nil
		}
		sent := time.Now()
		resp, err := c.raw.AcquireLockSet(ctx, body)
		set, err := decode[api.LockSet](ctx, resp, err)
		if err == nil {
			s := newLockSet(c, set, sent, time.Now(), !opts.NoAutoRenew && body.Session == nil)
			if opts.Session != nil {
				s.inSession(opts.Session)
			}
			return s, nil
		}
		// A set keeps no place in line from one round to the next (it has
		// no idempotency key): a round that ended refused starts over.
		if !c.nextRound(err, body.WaitMs, waitUntil) {
			return nil, err
		}
	}
}

func newLockSet(c *Client, set api.LockSet, sent, arrived time.Time, watchdog bool) *LockSet {
	ttl := time.Duration(set.TtlMs) * time.Millisecond
	s := &LockSet{c: c, token: set.Token, ttl: ttl, leases: set.Leases}
	s.start(grantExpiry(sent, arrived, ttl))
	if set.Proof != nil {
		s.proof = *set.Proof
	}
	if watchdog {
		go s.watch()
	} else {
		close(s.done)
	}
	return s
}

// Token is the set's secret: it renews and releases every key.
func (s *LockSet) Token() string { return s.token }

// Proof is the set's latest proof, from its grant or last renewal ("": the
// server signs none): evidence from which any lockd restores every key of
// the set should Redis lose them with the lockd that knew them. Renew and
// Release send it by themselves. A secret as the token is: keep it out of
// logs.
func (s *LockSet) Proof() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proof
}

// Leases are the set's keys with their fences, in the order LockMany named
// them.
func (s *LockSet) Leases() []api.LockSetLease { return append([]api.LockSetLease(nil), s.leases...) }

// Fence is key's fence in the set (0 for a key not in it).
func (s *LockSet) Fence(key string) int64 {
	for _, l := range s.leases {
		if l.Key == key {
			return l.Fence
		}
	}
	return 0
}

// TTL is every lease's time to live.
func (s *LockSet) TTL() time.Duration { return s.ttl }

// Lost is closed when the set is lost.
func (s *LockSet) Lost() <-chan struct{} { return s.lost }

// Err says why the set was lost (nil while held).
func (s *LockSet) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Context is cancelled when the set is lost (cause: Err) or released.
func (s *LockSet) Context() context.Context { return s.ctx }

// Renew extends every key by the set's TTL now. The watchdog calls it; call
// it yourself with NoAutoRenew. An answer that the set is gone marks it
// lost.
func (s *LockSet) Renew(ctx context.Context) error {
	if err := s.Err(); err != nil {
		return err
	}
	sent := time.Now()
	resp, err := s.c.raw.RenewLockSet(ctx, api.LockSetRenewRequest{Token: s.token, TtlMs: ptr(s.ttl.Milliseconds()), Proof: nonEmpty(s.Proof())})
	set, err := decode[api.LockSet](ctx, resp, err)
	if err != nil {
		if errors.Is(err, ErrLeaseLost) {
			s.lose(err)
			return s.Err()
		}
		return err
	}
	s.mu.Lock()
	s.expires, s.renewNow = sent.Add(s.ttl), false
	if set.Proof != nil {
		s.proof = *set.Proof
	}
	s.mu.Unlock()
	return nil
}

// Release stops the watchdog and gives every key back. A set that was lost
// returns its Err without asking the server.
func (s *LockSet) Release(ctx context.Context) error {
	if !s.stopWatch() {
		return nil
	}
	if err := s.Err(); err != nil {
		return err
	}
	resp, err := s.c.raw.ReleaseLockSet(ctx, api.LockSetReleaseRequest{Token: s.token, Proof: nonEmpty(s.Proof())})
	_, err = decode[api.LockSetReleaseResult](ctx, resp, err)
	if errors.Is(err, ErrLeaseLost) {
		s.lose(err)
		return s.Err()
	}
	s.cancel(ErrReleased)
	return err
}

// inSession ties the set to its session: it is lost when the session is.
func (s *LockSet) inSession(sess *Session) { s.endsWith(sess, s.lose, func() {}) }

func (s *LockSet) lose(cause error) { s.holding.lose(cause, "lock set") }

// watch renews every ttl/3 until Release or loss.
func (s *LockSet) watch() { s.keep(s.ttl, "lock set", s.Renew, s.lose) }
