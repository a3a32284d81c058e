package lock_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/redistest"
)

// goneSet says whether err answers a set that is gone: lost, not found,
// or (while a lockd that died may still have had it) the quarantine.
func goneSet(err error) bool {
	return errors.Is(err, lock.ErrLeaseLost) || errors.Is(err, lock.ErrNotFound) || errors.Is(err, lock.ErrRecovering)
}

// TestSetProofOutlivesRedis: after Redis lost its data (FLUSHALL) together
// with the lockd that granted and renewed a lock set, the holder's set
// proof puts every key back, with its fence, owner, mode and value, and
// the set's record, through a lockd that never knew the set; a proof that
// does not verify restores nothing.
func TestSetProofOutlivesRedis(t *testing.T) {
	for _, mode := range []lock.Mode{lock.Exclusive, lock.Shared} {
		t.Run(string(mode), func(t *testing.T) {
			ctx := context.Background()
			rs := redistest.Start(t)
			granting := lock.New(rs.Client(t), lock.Options{Proofs: proofSigner(t)})
			keys := []string{"sp:b:" + string(mode), "sp:a:" + string(mode)}
			s, err := granting.AcquireSet(ctx, lock.SetRequest{Keys: keys, Owner: "w1", TTL: 20 * time.Second, Mode: mode, Value: `{"job":7}`})
			if err != nil {
				t.Fatal(err)
			}
			if s.Proof == "" {
				t.Fatal("the grant answered no proof")
			}
			// The renewal's proof takes the value from the one sent.
			r, err := granting.RenewSet(lock.WithProof(ctx, s.Proof), s.Token, 0, "t")
			if err != nil {
				t.Fatal(err)
			}
			c, err := proofSigner(t).VerifySet(r.Proof, s.Token, time.Now())
			if err != nil || c.Value != `{"job":7}` || c.Owner != "w1" || !slices.Equal(c.Keys, s.Leases) ||
				c.ExpiresMS != r.ExpiresAt.UnixMilli() || c.TTL != 20*time.Second {
				t.Fatalf("the renewal's claim %+v, %v", c, err)
			}
			_ = granting.Close()
			if err := rs.Client(t).FlushAll(ctx).Err(); err != nil {
				t.Fatal(err)
			}

			other := lock.New(rs.Client(t), lock.Options{Proofs: proofSigner(t)})
			t.Cleanup(func() { _ = other.Close() })
			for _, proof := range []string{"garbage", "", s.Proof[:len(s.Proof)-2]} {
				if _, err := other.RenewSet(lock.WithProof(ctx, proof), s.Token, 0, "t"); !goneSet(err) {
					t.Fatalf("renew after the loss with proof %.12q: %v", proof, err)
				}
			}
			back, err := other.RenewSet(lock.WithProof(ctx, r.Proof), s.Token, 0, "t")
			if err != nil || !slices.Equal(back.Leases, s.Leases) || back.Owner != "w1" {
				t.Fatalf("renew with the proof after the loss: %+v, %v", back, err)
			}
			if c, err := proofSigner(t).VerifySet(back.Proof, s.Token, time.Now()); err != nil || c.Value != `{"job":7}` || c.Mode != modeArg(mode) {
				t.Fatalf("the claim of the renewal after the loss: %+v, %v", c, err)
			}
			for _, k := range keys {
				st, err := other.State(ctx, lock.Lock(k))
				if err != nil || st.Value != `{"job":7}` || st.Owner != "w1" || st.Mode != mode || st.Set != len(keys) {
					t.Fatalf("%s put back: %+v, %v", k, st, err)
				}
				h, err := other.History(ctx, lock.Lock(k), 1)
				if err != nil || len(h) != 1 || h[0].Type != "restored" || h[0].Set != len(keys) {
					t.Fatalf("%s's history after the restore: %+v, %v", k, h, err)
				}
			}
			if n, err := other.ReleaseSet(lock.WithProof(ctx, back.Proof), s.Token, "t"); err != nil || n != 2 {
				t.Fatalf("release after the loss: %d, %v", n, err)
			}
		})
	}
}

// modeArg is the scripts' mode of m, as a set claim names it.
func modeArg(m lock.Mode) string {
	if m == lock.Shared {
		return "s"
	}
	return "x"
}

// TestSetProofReleasesAfterALoss: a release that finds no set after the
// loss puts it back from the proof and gives every key back.
func TestSetProofReleasesAfterALoss(t *testing.T) {
	ctx := context.Background()
	rs := redistest.Start(t)
	granting := lock.New(rs.Client(t), lock.Options{Proofs: proofSigner(t)})
	s, err := granting.AcquireSet(ctx, lock.SetRequest{Keys: []string{"spr:a", "spr:b", "spr:c"}, Owner: "w", TTL: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	_ = granting.Close()
	if err := rs.Client(t).FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	other := lock.New(rs.Client(t), lock.Options{Proofs: proofSigner(t)})
	t.Cleanup(func() { _ = other.Close() })
	if n, err := other.ReleaseSet(lock.WithProof(ctx, s.Proof), s.Token, "t"); err != nil || n != 3 {
		t.Fatalf("release after the loss with the proof: %d, %v", n, err)
	}
	for _, k := range []string{"spr:a", "spr:b", "spr:c"} {
		if _, err := other.Acquire(ctx, lock.Lock(k), lock.AcquireRequest{TTL: time.Second}); err != nil {
			t.Fatalf("%s after the set's release: %v", k, err)
		}
	}
}

// Set claims are verified, never trusted: after Redis lost its data with
// the lockd that granted the sets, a holder's set proof restores its own
// set through another lockd, and nothing else does: an altered proof, a
// proof sent with another set's token, a proof past the set's expiry, one
// signed with a retired secret, and the proof of a set released before the
// loss (through a lockd that lives: it writes its keys' tombstones back)
// each answer as a set that is gone, and put no key back.
func TestSetProofRestoresOnlyWhatItVouchesFor(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	signer := proofSigner(t)
	opts := lock.Options{Proofs: signer, EpochRefresh: 100 * time.Millisecond, CallTimeout: 500 * time.Millisecond}
	granting := lock.New(srv.Client(t), opts)
	other := lock.New(srv.Client(t), opts)
	t.Cleanup(func() { _ = other.Close() })

	take := func(e *lock.Engine, ttl time.Duration, keys ...string) lock.SetLease {
		t.Helper()
		s, err := e.AcquireSet(ctx, lock.SetRequest{Keys: keys, Owner: "o", TTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	held := take(granting, 30*time.Second, "pvs:h1", "pvs:h2")
	second := take(granting, 30*time.Second, "pvs:s1", "pvs:s2")
	short := take(granting, 300*time.Millisecond, "pvs:x1", "pvs:x2")
	// Released through the lockd that lives, which renewed it first.
	gone := take(granting, 30*time.Second, "pvs:g1", "pvs:g2")
	renewed, err := other.RenewSet(lock.WithProof(ctx, gone.Proof), gone.Token, 0, "g")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.ReleaseSet(ctx, gone.Token, "g"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // the lockds read the marker
	_ = granting.Close()
	srv.Restart()
	waitFor(t, func() bool { return other.Recovering() > 0 || other.RestoredLeases() != lock.Restored{} })
	time.Sleep(400 * time.Millisecond) // short's set ends

	retired, err := lock.NewSigner([]byte(strings.Repeat("r", 32)))
	if err != nil {
		t.Fatal(err)
	}
	other2 := lock.New(srv.Client(t), lock.Options{Proofs: retired})
	t.Cleanup(func() { _ = other2.Close() })
	altered := []byte(held.Proof)
	altered[len(altered)/2] ^= 1
	for _, c := range []struct {
		name         string
		e            *lock.Engine
		token, proof string
		keys         []string
	}{
		{"an altered proof", other, held.Token, string(altered), []string{"pvs:h1", "pvs:h2"}},
		{"a proof with another set's token", other, second.Token, held.Proof, []string{"pvs:h1", "pvs:s1"}},
		{"a proof past its set's expiry", other, short.Token, short.Proof, []string{"pvs:x1", "pvs:x2"}},
		{"a proof signed with a retired secret", other2, held.Token, held.Proof, []string{"pvs:h1", "pvs:h2"}},
		{"the proof of a set released before the loss", other, gone.Token, renewed.Proof, []string{"pvs:g1", "pvs:g2"}},
	} {
		if _, err := c.e.RenewSet(lock.WithProof(ctx, c.proof), c.token, 0, "t"); !goneSet(err) {
			t.Errorf("%s: renew answered %v, want lost or recovering", c.name, err)
		}
		if _, err := c.e.ReleaseSet(lock.WithProof(ctx, c.proof), c.token, "t"); !goneSet(err) {
			t.Errorf("%s: release answered %v, want lost or recovering", c.name, err)
		}
		for _, k := range c.keys {
			if st, err := other.State(ctx, lock.Lock(k)); err == nil && st.Owner != "" {
				t.Errorf("%s: %s put back: %+v", c.name, k, st)
			}
		}
	}
	// The holder's own proof restores its set, as it was.
	l, err := other.RenewSet(lock.WithProof(ctx, held.Proof), held.Token, 0, "h")
	if err != nil || !slices.Equal(l.Leases, held.Leases) || l.Owner != "o" {
		t.Fatalf("the holder's proof: %+v, %v", l, err)
	}
	for _, k := range []string{"pvs:h1", "pvs:h2"} {
		if hist, err := other.History(ctx, lock.Lock(k), 2); err != nil || len(hist) == 0 || hist[len(hist)-1].Type != "restored" {
			t.Fatalf("%s's history: %+v, %v", k, hist, err)
		}
	}
	// And the next grant of its keys gets higher fences.
	if n, err := other.ReleaseSet(ctx, held.Token, "h"); err != nil || n != 2 {
		t.Fatalf("release: %d, %v", n, err)
	}
	if _, err := other.EndQuarantine(ctx); err != nil {
		t.Fatal(err)
	}
	next := take(other, time.Second, "pvs:h2", "pvs:h1")
	for i, k := range next.Leases {
		if was := held.Leases[1-i]; k.Fence <= was.Fence {
			t.Fatalf("the next grant of %s: fence %d, the restored lease's %d", k.Key, k.Fence, was.Fence)
		}
	}
}

// TestSetProofRestoresALostKey: Redis lost one key's lease of a set but
// not the set's record (a Cluster master that lost its data, a failover
// that missed a write), and the lockd that granted the set is gone: the
// set's renewal puts the key back from the set's proof; without the
// proof the key is lost, and the set with it.
func TestSetProofRestoresALostKey(t *testing.T) {
	ctx := context.Background()
	rs := redistest.Start(t)
	granting := lock.New(rs.Client(t), lock.Options{Proofs: proofSigner(t)})
	take := func(keys ...string) lock.SetLease {
		t.Helper()
		s, err := granting.AcquireSet(ctx, lock.SetRequest{Keys: keys, Owner: "w", TTL: 20 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	with, without := take("slk:a", "slk:b", "slk:c"), take("slk:d", "slk:e")
	_ = granting.Close()
	if err := rs.Client(t).Del(ctx, "lockd:{slk:b}:lease", "lockd:{slk:e}:lease").Err(); err != nil {
		t.Fatal(err)
	}
	other := lock.New(rs.Client(t), lock.Options{Proofs: proofSigner(t)})
	t.Cleanup(func() { _ = other.Close() })
	back, err := other.RenewSet(lock.WithProof(ctx, with.Proof), with.Token, 0, "t")
	if err != nil || !slices.Equal(back.Leases, with.Leases) {
		t.Fatalf("renew with the proof: %+v, %v", back, err)
	}
	if _, err := other.RenewSet(ctx, without.Token, 0, "t"); !errors.Is(err, lock.ErrLeaseLost) {
		t.Fatalf("renew without the proof: %v, want the set lost", err)
	}
	if n, err := other.ReleaseSet(ctx, with.Token, "t"); err != nil || n != 3 {
		t.Fatalf("release: %d, %v", n, err)
	}
}

// TestSetProofYieldsToAHigherFence: of two claims on a key the higher
// fence wins, for a set's key as for a lease's: a key granted anew after
// the loss keeps its holder, and the set, no longer whole, ends at the
// renewal that brought its proof, giving its other keys back.
func TestSetProofYieldsToAHigherFence(t *testing.T) {
	ctx := context.Background()
	rs := redistest.Start(t)
	granting := lock.New(rs.Client(t), lock.Options{Proofs: proofSigner(t)})
	s, err := granting.AcquireSet(ctx, lock.SetRequest{Keys: []string{"hf:a", "hf:b"}, Owner: "set", TTL: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	_ = granting.Close()
	if err := rs.Client(t).FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	other := lock.New(rs.Client(t), lock.Options{Proofs: proofSigner(t)})
	t.Cleanup(func() { _ = other.Close() })
	newer := mustAcquire(t, other, lock.Lock("hf:b"), lock.AcquireRequest{Owner: "newer", TTL: 20 * time.Second})
	if newer.Fence <= s.Leases[1].Fence {
		t.Fatalf("the new grant's fence %d, the set's %d", newer.Fence, s.Leases[1].Fence)
	}
	if _, err := other.RenewSet(lock.WithProof(ctx, s.Proof), s.Token, 0, "t"); !errors.Is(err, lock.ErrLeaseLost) {
		t.Fatalf("renew of a set whose key another holds now: %v, want lost", err)
	}
	if st, err := other.State(ctx, lock.Lock("hf:b")); err != nil || st.Owner != "newer" || st.Fence != newer.Fence {
		t.Fatalf("hf:b after the set's claim: %+v, %v", st, err)
	}
	mustAcquire(t, other, lock.Lock("hf:a"), lock.AcquireRequest{TTL: time.Second})
}
