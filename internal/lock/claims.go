package lock

import (
	"context"
	"errors"
	"strconv"
	"time"
)

// How the engine uses proofs (proof.go): it signs one into every lease it
// answers a grant or renewal with, from Redis's answer, and reads back the
// one a holder sends when Redis no longer has the holder's lease.

// proofOf is l's proof for its holder. Redis's answer gives the fence,
// mode, owner, count, expiry, TTL and limit; the grant's value and session
// the caller knows or not (known). What it does not know, prev, the proof
// the holder sent with the request, gives when it verifies for this
// lease; otherwise the new proof says the value is unknown (and names no
// session). A proof that does not verify changes nothing else.
func (s *Signer) proofOf(l Lease, known grantKnown, prev string) string {
	if s == nil {
		return ""
	}
	c := Claim{
		Resource: l.Resource.id(), Mode: scriptMode(l.Mode), Fence: l.Fence, Owner: l.Owner, Count: l.Count,
		ExpiresMS: l.ExpiresAt.UnixMilli(), TTL: l.TTL, Limit: l.Limit, Session: known.session, Value: known.value,
	}
	if known.hasValue && known.hasSession {
		return s.Sign(c, l.Token)
	}
	p, err := s.open(prev, c.Resource, l.Token)
	if prev == "" || err != nil {
		c.ValueUnknown = !known.hasValue
		return s.Sign(c, l.Token)
	}
	if !known.hasValue {
		c.Value, c.ValueDigest, c.ValueUnknown = p.Value, p.ValueDigest, p.ValueUnknown
	}
	if !known.hasSession {
		c.Session = p.Session
	}
	return s.Sign(c, l.Token)
}

// grantKnown is what the engine knows of a grant beyond Redis's answer.
type grantKnown struct {
	value, session       string
	hasValue, hasSession bool
}

// scriptMode is the scripts' mode of a lease's Mode ("" is Redlock's
// exclusive lease).
func scriptMode(m Mode) string {
	switch m {
	case Shared:
		return "s"
	case Permit:
		return "p"
	default:
		return "x"
	}
}

// acquiredProof is the proof of a lease Acquire answers with req. A fresh
// grant has req's value and session; a re-entry or a replay takes over the
// lease's, known only when req names them.
func (s *Signer) acquiredProof(l Lease, req AcquireRequest) string {
	known := grantKnown{value: req.Value}
	if req.Session != "" {
		known.session = sessionHandle(req.SessionScope, req.Session)
	}
	known.hasValue = l.Outcome == Granted || req.Value != ""
	known.hasSession = l.Outcome == Granted || req.Session != ""
	return s.proofOf(l, known, req.Proof)
}

// renewedProof is the proof of a lease Renew answers with req: a
// renewal that sets the value knows it; the session is the previous
// proof's.
func (s *Signer) renewedProof(l Lease, req RenewRequest) string {
	return s.proofOf(l, grantKnown{value: req.Value, hasValue: req.Value != ""}, req.Proof)
}

// claimOf verifies, for a restore from a holder's proof (restoreFromProof),
// proof, sent with token for the lease on key (a resource id) that Redis
// no longer has, and returns what it vouches for. An error (errors.Is
// ErrBadProof; no Signer is ErrProofRetired) means it restores nothing,
// and the caller answers as it would without it. A claim that verifies
// is evidence, not an order: the restore still checks that nobody holds
// the key with a higher fence.
func (n *node) claimOf(key, token, proof string, now time.Time) (Claim, error) {
	if proof == "" {
		return Claim{}, ErrProofMalformed
	}
	return n.opts.Proofs.Verify(proof, key, token, now)
}

// restoreFromProof puts back the lease that proof, sent with token for
// the lease on key (a resource id) that Redis answered "not found" or
// "lost" (err), vouches for: when the lockd that granted or last renewed
// it died with Redis's data, the holder's proof is the evidence. It
// reports whether it did, for the caller to run its call again. A proof
// that does not verify, a lease this process saw end (or whose tombstone
// another lockd wrote back after the loss), a key held by a lease with a
// higher fence, or (when no loss was seen since the proof was signed) a
// key whose history shows the lease's end or a later one: nothing is put
// back, and the caller answers as it would have.
func (n *node) restoreFromProof(ctx context.Context, key, token, proof string, err error) bool {
	if proof == "" || !(errors.Is(err, ErrNotFound) || errors.Is(err, ErrLeaseLost)) {
		return false
	}
	c, verr := n.claimOf(key, token, proof, time.Now())
	if verr != nil || n.ledger.isEnded(key, token) {
		return false
	}
	r := restorable{key: key, token: token, known: known{mode: c.Mode, owner: c.Owner, fence: c.Fence, count: c.Count,
		ttl: c.TTL, acquired: time.UnixMilli(c.ExpiresMS - c.TTL.Milliseconds()), limit: c.Limit, session: c.Session}}
	if len(c.ValueDigest) == 0 && !c.ValueUnknown {
		r.value = c.Value
	}
	rc := restoreCallOf(key, n.sharedOf(key), r, "a holder's proof after redis lost its data")
	// The expiry the proof names, by Redis's clock.
	rc.leftMS = "@" + strconv.FormatInt(c.ExpiresMS, 10)
	if signed := time.UnixMilli(c.ExpiresMS - c.TTL.Milliseconds()); !n.lostSince(signed) {
		// No loss since the proof was signed: Redis kept its data, and
		// the lease may have ended by its holder's hand.
		rc.one = "1"
	}
	keys, argv := rc.args()
	v, rerr := n.st.Run(ctx, n.scripts.restore, keys, argv...)
	if rerr != nil {
		return false
	}
	out, _ := v.([]any)
	if len(out) == 0 || out[0] != "restored" {
		return false
	}
	n.restoredMu.Lock()
	n.restoredSum.Restored++
	n.restoredMu.Unlock()
	return true
}

// proofCtxKey carries the proof sent with a release in its context.
type proofCtxKey struct{}

// WithProof returns ctx carrying the holder's proof for the Release it
// is passed to (Release's arguments are the token and the actor, for its
// many callers; the proof is optional evidence, read only when Redis no
// longer has the lease).
func WithProof(ctx context.Context, proof string) context.Context {
	if proof == "" {
		return ctx
	}
	return context.WithValue(ctx, proofCtxKey{}, proof)
}

// proofFrom is the proof WithProof put in ctx, or "".
func proofFrom(ctx context.Context) string {
	p, _ := ctx.Value(proofCtxKey{}).(string)
	return p
}
