package lock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/lock"
)

// A lock set bound to a session is a grant of the session on every key:
// each key's lease ends with the session and moves with its renewals (not
// with the set's own), the session lists every key, and its end lets go
// of every key at once, as released by "session", serving the waiters.
func TestLockSetInSession(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) { setInSession(t, newEngine(t, b.open(t))) })
	}
}

func setInSession(t *testing.T, e lock.Service) {
	ctx := context.Background()
	s, err := e.CreateSession(ctx, "", "worker", 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	keys := []string{"lss:b", "lss:a", "lss:c"}
	set, err := e.AcquireSet(ctx, lock.SetRequest{Keys: keys, Session: s.ID})
	if err != nil {
		t.Fatal(err)
	}
	if set.Owner != "worker" || !set.InSession || len(set.Leases) != 3 {
		t.Fatalf("set in a session = %+v", set)
	}
	near(t, "the set's expiry and the session's", set.ExpiresAt, s.ExpiresAt, 100*time.Millisecond)
	shared, err := e.AcquireSet(ctx, lock.SetRequest{Keys: []string{"lss:r1", "lss:r2"}, Owner: "reader", Session: s.ID, Mode: lock.Shared})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range append(keys, "lss:r1", "lss:r2") {
		st, err := e.State(ctx, lock.Lock(k))
		if err != nil {
			t.Fatal(err)
		}
		if st.Set == 0 || st.Owner != "worker" && st.Owner != "reader" {
			t.Fatalf("state of %s: %+v", k, st)
		}
		near(t, "a key's expiry and the session's", st.ExpiresAt, s.ExpiresAt, 100*time.Millisecond)
	}
	got, err := e.GetSession(ctx, "", s.ID)
	if err != nil || len(got.Holds) != 5 {
		t.Fatalf("the session lists %+v, %v; want the 5 keys of its two sets", got.Holds, err)
	}

	// The set's own renewal keeps the keys' expiry, the session's.
	time.Sleep(100 * time.Millisecond)
	r, err := e.RenewSet(ctx, set.Token, time.Minute, "worker")
	if err != nil {
		t.Fatal(err)
	}
	near(t, "a set in a session renewed by its token", r.ExpiresAt, s.ExpiresAt, 100*time.Millisecond)
	if _, err := e.Release(ctx, lock.Lock("lss:a"), set.Token, "t"); !errors.Is(err, lock.ErrInLockSet) {
		t.Fatalf("a lone release of a key of a set in a session: %v", err)
	}

	// The session's renewal moves every key.
	time.Sleep(200 * time.Millisecond)
	s2, err := e.RenewSession(ctx, "", s.ID, "worker")
	if err != nil {
		t.Fatal(err)
	}
	if !s2.ExpiresAt.After(s.ExpiresAt.Add(250 * time.Millisecond)) {
		t.Fatalf("renewed session expires at %v, before at %v", s2.ExpiresAt, s.ExpiresAt)
	}
	for _, k := range append(keys, "lss:r1") {
		st, err := e.State(ctx, lock.Lock(k))
		if err != nil {
			t.Fatal(err)
		}
		near(t, "a key after the session's renewal", st.ExpiresAt, s2.ExpiresAt, 100*time.Millisecond)
	}
	r, err = e.RenewSet(ctx, set.Token, 0, "worker")
	if err != nil {
		t.Fatal(err)
	}
	near(t, "the set after the session's renewal", r.ExpiresAt, s2.ExpiresAt, 100*time.Millisecond)

	// A waiter is served when the session ends.
	served := make(chan error, 1)
	go func() {
		_, err := e.Acquire(ctx, lock.Lock("lss:c"), lock.AcquireRequest{Owner: "next", TTL: time.Minute, Wait: 10 * time.Second})
		served <- err
	}()
	waitFor(t, func() bool { st, _ := e.State(ctx, lock.Lock("lss:c")); return len(st.Queue) == 1 })
	if _, err := e.EndSession(ctx, "", s.ID); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-served:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the waiter was not served when the session ended")
	}
	for _, k := range []string{"lss:a", "lss:b", "lss:r1", "lss:r2"} {
		if ev := newestEvent(t, e, lock.Lock(k)); ev.Type != "released" || ev.Actor != "session" {
			t.Fatalf("%s: newest event %+v, want released by session", k, ev)
		}
		if _, err := e.State(ctx, lock.Lock(k)); !errors.Is(err, lock.ErrNotFound) {
			t.Fatalf("%s after the session's end: %v", k, err)
		}
	}
	for _, tok := range []string{set.Token, shared.Token} {
		if _, err := e.ReleaseSet(ctx, tok, "t"); !errors.Is(err, lock.ErrLeaseLost) {
			t.Fatalf("release of a set after its session's end: %v", err)
		}
	}
	if _, err := e.AcquireSet(ctx, lock.SetRequest{Keys: []string{"lss:x", "lss:y"}, Session: s.ID}); !errors.Is(err, lock.ErrSessionNotFound) {
		t.Fatalf("a set in an ended session: %v", err)
	}
}

// A session nobody renews lapses, and every key of its sets with it,
// recorded as released by "session" (reason "session expired"), their
// waiters served.
func TestLockSetSessionLapse(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			e := newEngine(t, b.open(t))
			ctx := context.Background()
			s, err := e.CreateSession(ctx, "", "crashes", 400*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := e.AcquireSet(ctx, lock.SetRequest{Keys: []string{"lsl:a", "lsl:b"}, Session: s.ID}); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			if _, err := e.AcquireSet(ctx, lock.SetRequest{Keys: []string{"lsl:b", "lsl:a"}, Owner: "next", TTL: time.Minute,
				Wait: 5 * time.Second}); err != nil {
				t.Fatal(err)
			}
			if took := time.Since(start); took > 2*time.Second {
				t.Fatalf("the waiter was served %v after the session's lapse", took)
			}
			for _, k := range []string{"lsl:a", "lsl:b"} {
				evs, err := e.History(ctx, lock.Lock(k), 2)
				if err != nil || len(evs) != 2 || evs[1].Type != "released" || evs[1].Actor != "session" || evs[1].Reason != "session expired" {
					t.Fatalf("history of %s: %+v, %v", k, evs, err)
				}
				near(t, "the lapse", evs[1].At, s.ExpiresAt, 100*time.Millisecond)
			}
		})
	}
}

// A set asks for a session as one grant does: in its scope only, and a set
// released by its token, or broken on one key, leaves the session's list
// at the session's next renewal (the broken one released whole).
func TestLockSetSessionScopeAndEnds(t *testing.T) {
	e := newEngine(t, backends[0].open(t))
	ctx := context.Background()
	s, err := e.CreateSession(ctx, "tenant-a", "worker", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for _, scope := range []string{"tenant-b", ""} {
		_, err := e.AcquireSet(ctx, lock.SetRequest{Keys: []string{"lsx:a", "lsx:b"}, Session: s.ID, SessionScope: scope})
		if !errors.Is(err, lock.ErrSessionNotFound) {
			t.Fatalf("a set in another scope's session (%q): %v", scope, err)
		}
		if _, err := e.State(ctx, lock.Lock("lsx:a")); !errors.Is(err, lock.ErrNotFound) {
			t.Fatalf("lsx:a after a set in another scope's session: %v", err)
		}
	}
	in := func(keys ...string) lock.SetLease {
		set, err := e.AcquireSet(ctx, lock.SetRequest{Keys: keys, Session: s.ID, SessionScope: "tenant-a"})
		if err != nil {
			t.Fatal(err)
		}
		return set
	}
	released, broken, kept := in("lsx:a", "lsx:b"), in("lsx:c", "lsx:d"), in("lsx:e", "lsx:f")
	if n, err := e.ReleaseSet(ctx, released.Token, "worker"); err != nil || n != 2 {
		t.Fatalf("release of a set in a session: %d, %v", n, err)
	}
	if _, err := e.ForceReleaseFence(ctx, lock.Lock("lsx:c"), 0, "admin", "stuck"); err != nil {
		t.Fatal(err)
	}
	got, err := e.RenewSession(ctx, "tenant-a", s.ID, "worker")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.State(ctx, lock.Lock("lsx:d")); !errors.Is(err, lock.ErrNotFound) {
		t.Fatalf("the other key of a broken set after the session's renewal: %v", err)
	}
	if got, err = e.GetSession(ctx, "tenant-a", s.ID); err != nil || len(got.Holds) != 2 {
		t.Fatalf("the session after its renewal lists %+v, %v; want the 2 keys of the set it still holds", got.Holds, err)
	}
	if _, err := e.RenewSet(ctx, broken.Token, 0, "worker"); !errors.Is(err, lock.ErrLeaseLost) {
		t.Fatalf("renew of a broken set: %v", err)
	}
	if _, err := e.RenewSet(ctx, kept.Token, 0, "worker"); err != nil {
		t.Fatal(err)
	}
}
