package lock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/redistest"
)

func proofSigner(t *testing.T) *lock.Signer {
	t.Helper()
	s, err := lock.NewSigner([]byte(strings.Repeat("p", 32)))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// verifyProof verifies l's proof now and checks what Redis answered.
func verifyProof(t *testing.T, s *lock.Signer, l lock.Lease) lock.Claim {
	t.Helper()
	c, err := s.Verify(l.Proof, lock.ResourceID(l.Resource), l.Token, time.Now())
	if err != nil {
		t.Fatalf("proof of %s: %v", l.Resource, err)
	}
	if c.Fence != l.Fence || c.Owner != l.Owner || c.Count != l.Count || c.ExpiresMS != l.ExpiresAt.UnixMilli() ||
		c.TTL != l.TTL || c.Limit != l.Limit {
		t.Fatalf("claim %+v of lease %+v", c, l)
	}
	return c
}

// TestProofsOfLeases: every grant and renewal carries a proof of the lease
// as Redis answered it; the value and the session go on from the proof a
// renewal brings; a bad proof changes no answer.
func TestProofsOfLeases(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			s := proofSigner(t)
			e := lock.New(b.open(t), lock.Options{Proofs: s})
			t.Cleanup(func() { _ = e.Close() })

			res := lock.Lock("proof:1")
			l := mustAcquire(t, e, res, lock.AcquireRequest{Owner: "w1", TTL: 5 * time.Second, Value: `{"a":1}`})
			if c := verifyProof(t, s, l); c.Mode != "x" || c.Value != `{"a":1}` || c.ValueUnknown {
				t.Fatalf("grant's claim %+v", c)
			}
			re := mustAcquire(t, e, res, lock.AcquireRequest{Owner: "w1", Token: l.Token, Proof: l.Proof})
			if c := verifyProof(t, s, re); c.Count != 2 || c.Value != `{"a":1}` {
				t.Fatalf("re-entry's claim %+v: the value goes on from the proof sent", c)
			}

			renewed, err := e.Renew(ctx, res, lock.RenewRequest{Token: l.Token, TTL: 8 * time.Second, Proof: re.Proof})
			if err != nil {
				t.Fatal(err)
			}
			c := verifyProof(t, s, renewed)
			if c.ExpiresMS <= l.ExpiresAt.UnixMilli() || c.Value != `{"a":1}` || c.Count != 2 {
				t.Fatalf("renewal's claim %+v, grant's expiry %v", c, l.ExpiresAt)
			}
			// Without a proof, or with a bad one, the renewal answers as
			// before; its proof says the value is not known.
			for _, bad := range []string{"", "garbage", l.Proof[:len(l.Proof)-2] + "AA", strings.Repeat("x", 5000)} {
				r, err := e.Renew(ctx, res, lock.RenewRequest{Token: l.Token, Proof: bad})
				if err != nil {
					t.Fatalf("renew with proof %.20q: %v", bad, err)
				}
				if c := verifyProof(t, s, r); !c.ValueUnknown || c.Value != "" {
					t.Fatalf("claim %+v after a renewal with proof %.20q", c, bad)
				}
			}
			// A renewal that sets the value knows it.
			r, err := e.Renew(ctx, res, lock.RenewRequest{Token: l.Token, Value: `"b"`, Proof: "garbage"})
			if err != nil {
				t.Fatal(err)
			}
			if c := verifyProof(t, s, r); c.Value != `"b"` || c.ValueUnknown {
				t.Fatalf("claim %+v after a renewal with a value", c)
			}

			// A bad proof beside a release changes nothing either.
			if _, err := e.Release(lock.WithProof(ctx, "garbage"), res, l.Token, "t"); err != nil {
				t.Fatal(err)
			}
			rel, err := e.Release(lock.WithProof(ctx, "!!"), res, l.Token, "t")
			if err != nil || !rel.Released {
				t.Fatalf("release = %+v, %v", rel, err)
			}

			// The lease is gone: a renewal or release with its proof still
			// answers as today, and the hook sees the claim the proof
			// vouches for.
			if _, err := e.Renew(ctx, res, lock.RenewRequest{Token: l.Token, Proof: r.Proof}); !errors.Is(err, lock.ErrNotFound) && !errors.Is(err, lock.ErrLeaseLost) {
				t.Fatalf("renew of a released lease: %v", err)
			}
			if _, err := e.Release(lock.WithProof(ctx, r.Proof), res, l.Token, "t"); !errors.Is(err, lock.ErrNotFound) && !errors.Is(err, lock.ErrLeaseLost) {
				t.Fatalf("release of a released lease: %v", err)
			}
			if c, err := e.ClaimOf(res, l.Token, r.Proof, time.Now()); err != nil || c.Fence != l.Fence {
				t.Fatalf("claimOf = %+v, %v", c, err)
			}
			if _, err := e.ClaimOf(lock.Lock("proof:2"), l.Token, r.Proof, time.Now()); !errors.Is(err, lock.ErrProofOtherKey) {
				t.Fatalf("claimOf on another key: %v", err)
			}
			if _, err := e.ClaimOf(res, "another-token", r.Proof, time.Now()); !errors.Is(err, lock.ErrProofForged) {
				t.Fatalf("claimOf with another token: %v", err)
			}
			if _, err := e.ClaimOf(res, l.Token, r.Proof, r.ExpiresAt.Add(time.Millisecond)); !errors.Is(err, lock.ErrProofExpired) {
				t.Fatalf("claimOf past the expiry: %v", err)
			}

			// A permit: its mode and limit; a shared hold; a grant in a session.
			sem := mustAcquire(t, e, lock.Semaphore("proof:pool"), lock.AcquireRequest{Limit: 3})
			if c := verifyProof(t, s, sem); c.Mode != "p" || c.Limit != 3 {
				t.Fatalf("permit's claim %+v", c)
			}
			sh := mustAcquire(t, e, lock.Lock("proof:shared"), lock.AcquireRequest{Mode: lock.Shared})
			if c := verifyProof(t, s, sh); c.Mode != "s" || c.Value != "" || c.ValueUnknown {
				t.Fatalf("shared hold's claim %+v", c)
			}
			sess, err := e.CreateSession(ctx, "", "agent", 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			in := mustAcquire(t, e, lock.Lock("proof:sess"), lock.AcquireRequest{Owner: "agent", Session: sess.ID, TTL: -1})
			c = verifyProof(t, s, in)
			if c.Session == "" || strings.Contains(c.Session, sess.ID) || strings.Contains(in.Proof, sess.ID) {
				t.Fatalf("a grant in a session: claim %+v (the session by its handle, never its id)", c)
			}
		})
	}
}

// TestNoProofsWithoutSigner: an engine without Options.Proofs answers no
// proof, and takes any.
func TestNoProofsWithoutSigner(t *testing.T) {
	e := newEngine(t, backends[1].open(t))
	l := mustAcquire(t, e, lock.Lock("proof:none"), lock.AcquireRequest{})
	if l.Proof != "" {
		t.Fatalf("proof %q without a signer", l.Proof)
	}
	r, err := e.Renew(context.Background(), l.Resource, lock.RenewRequest{Token: l.Token, Proof: "x"})
	if err != nil || r.Proof != "" {
		t.Fatalf("renew = %q, %v", r.Proof, err)
	}
	if _, err := e.ClaimOf(l.Resource, l.Token, "x", time.Now()); !errors.Is(err, lock.ErrBadProof) {
		t.Fatalf("claimOf without a signer: %v", err)
	}
}

// TestProofOutlivesRedis: after Redis lost its data (FLUSHALL), a lockd
// with the same secret that never saw the lease (the granting one is gone)
// reads back from the holder's proof the lease as it was, and puts it
// back when the holder renews with it; a proof that does not verify
// restores nothing.
func TestProofOutlivesRedis(t *testing.T) {
	// Redis and the lockd that granted and renewed a permit are lost
	// together; the holder's proof restores it through another lockd.
	ctx := context.Background()
	rs := redistest.Start(t)
	granting := lock.New(rs.Client(t), lock.Options{Proofs: proofSigner(t)})
	res := lock.Semaphore("proof:flush")
	l := mustAcquire(t, granting, res, lock.AcquireRequest{Owner: "w1", TTL: 20 * time.Second, Limit: 4, Value: `{"job":7}`})
	again := mustAcquire(t, granting, res, lock.AcquireRequest{Token: l.Token, Proof: l.Proof, Limit: 4, TTL: 20 * time.Second})
	r, err := granting.Renew(ctx, res, lock.RenewRequest{Token: l.Token, Proof: again.Proof})
	if err != nil {
		t.Fatal(err)
	}
	_ = granting.Close()
	if err := rs.Client(t).FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}

	other := lock.New(rs.Client(t), lock.Options{Proofs: proofSigner(t)})
	t.Cleanup(func() { _ = other.Close() })
	c, err := other.ClaimOf(res, l.Token, r.Proof, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	want := lock.Claim{Resource: "sem/proof:flush", Mode: "p", Fence: l.Fence, Owner: "w1", Count: 2,
		ExpiresMS: r.ExpiresAt.UnixMilli(), TTL: 20 * time.Second, Limit: 4, Value: `{"job":7}`}
	if c.Resource != want.Resource || c.Mode != want.Mode || c.Fence != want.Fence || c.Owner != want.Owner || c.Count != want.Count ||
		c.ExpiresMS != want.ExpiresMS || c.TTL != want.TTL || c.Limit != want.Limit || c.Value != want.Value || c.ValueUnknown {
		t.Fatalf("claim after the loss:\n got %+v\nwant %+v", c, want)
	}
	// A proof that does not verify restores nothing.
	for _, proof := range []string{"garbage", ""} {
		_, err := other.Renew(ctx, res, lock.RenewRequest{Token: l.Token, Proof: proof})
		if !errors.Is(err, lock.ErrNotFound) && !errors.Is(err, lock.ErrLeaseLost) && !errors.Is(err, lock.ErrRecovering) {
			t.Fatalf("renew after the loss with proof %.12q: %v", proof, err)
		}
	}
	// The holder's proof puts the permit back, as it was, through a
	// lockd that never knew it.
	back, err := other.Renew(ctx, res, lock.RenewRequest{Token: l.Token, Proof: r.Proof})
	if err != nil || back.Fence != l.Fence || back.Count != 2 || back.Owner != "w1" {
		t.Fatalf("renew with the proof after the loss: %+v, %v", back, err)
	}
	if st, err := other.State(ctx, res); err != nil || st.Value != `{"job":7}` {
		t.Fatalf("the permit put back: %+v, %v", st, err)
	}
	for range 2 {
		if _, err := other.Release(lock.WithProof(ctx, back.Proof), res, l.Token, "t"); err != nil {
			t.Fatalf("release after the loss with the proof: %v", err)
		}
	}
}
