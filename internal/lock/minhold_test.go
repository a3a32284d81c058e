package lock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/redistest"
)

// A release inside a lease's hold window ends the lease but keeps the
// key, by nobody, until the window ends: others are refused with
// *MinHoldError, the old token finds no lease, the state shows the
// window, and the history records the release.
func TestMinHoldKeepsTheKeyAfterAnEarlyRelease(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			e := newEngine(t, b.open(t))
			ctx := context.Background()
			const window = 700 * time.Millisecond
			res := lock.Lock("mh:job")
			l := mustAcquire(t, e, res, lock.AcquireRequest{Owner: "node-1", TTL: time.Minute, MinHold: window})
			until := l.AcquiredAt.Add(window)
			st, err := e.State(ctx, res)
			if err != nil || !st.MinHoldUntil.Equal(until) || st.Count != 1 || len(st.Holders) != 1 {
				t.Fatalf("state while held: %+v, %v", st, err)
			}
			if rel, err := e.Release(ctx, res, l.Token, "node-1"); err != nil || !rel.Released {
				t.Fatalf("early release: %+v, %v", rel, err)
			}

			_, err = e.Acquire(ctx, res, lock.AcquireRequest{Owner: "node-2", TTL: time.Minute})
			var mh *lock.MinHoldError
			if !errors.As(err, &mh) || !errors.Is(err, lock.ErrMinHold) || mh.Owner != "node-1" ||
				mh.Remaining <= 0 || mh.Remaining > window {
				t.Fatalf("acquire inside the window: %v", err)
			}
			st, err = e.State(ctx, res)
			if err != nil || !st.MinHoldUntil.Equal(until) || st.Count != 0 || len(st.Holders) != 0 || st.HoldersTotal != 0 ||
				st.Owner != "node-1" || st.Fence != l.Fence || !st.ExpiresAt.Equal(until) {
				t.Fatalf("state inside the window: %+v, %v", st, err)
			}

			// The holder's token is done with, as after any release.
			if _, err := e.Renew(ctx, res, lock.RenewRequest{Token: l.Token, Actor: "node-1"}); !errors.Is(err, lock.ErrNotFound) {
				t.Fatalf("renew with the released token: %v", err)
			}
			if _, err := e.Release(ctx, res, l.Token, "node-1"); !errors.Is(err, lock.ErrNotFound) {
				t.Fatalf("release with the released token: %v", err)
			}
			if _, err := e.Acquire(ctx, res, lock.AcquireRequest{Owner: "node-1", TTL: time.Minute, Token: l.Token}); !errors.Is(err, lock.ErrLeaseLost) {
				t.Fatalf("re-entry with the released token: %v", err)
			}
			if _, err := e.RequestRelease(ctx, res, 0, "ops", "why", "ops"); !errors.Is(err, lock.ErrNotFound) {
				t.Fatalf("a request that nobody holds step aside: %v", err)
			}

			// A waiter is granted when the window ends, not before.
			next, err := e.Acquire(ctx, res, lock.AcquireRequest{Owner: "node-2", TTL: time.Minute, Wait: 5 * time.Second})
			if err != nil {
				t.Fatalf("waiting out the window: %v", err)
			}
			if next.AcquiredAt.Before(until) {
				t.Fatalf("granted at %v, inside the window that ends at %v", next.AcquiredAt, until)
			}
			events, err := e.History(ctx, res, 10)
			if err != nil {
				t.Fatal(err)
			}
			var types []string
			for _, ev := range events {
				types = append(types, ev.Type)
			}
			if len(types) != 3 || types[0] != "acquired" || types[1] != "released" || types[2] != "acquired" {
				t.Fatalf("history, newest first: %v", types)
			}
		})
	}
}

// A waiter queued while the holder works is granted when the window ends:
// the early release tells it when, and it does not wait for the lease's
// TTL.
func TestMinHoldWaiterGrantedAtTheWindowsEnd(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			e := newEngine(t, b.open(t))
			ctx := context.Background()
			const window = 800 * time.Millisecond
			res := lock.Lock("mh:wait")
			l := mustAcquire(t, e, res, lock.AcquireRequest{Owner: "first", TTL: time.Minute, MinHold: window})

			type result struct {
				l   lock.Lease
				err error
			}
			got := make(chan result, 1)
			go func() {
				l, err := e.Acquire(ctx, res, lock.AcquireRequest{Owner: "second", TTL: time.Minute, Wait: 10 * time.Second})
				got <- result{l, err}
			}()
			waitFor(t, func() bool {
				st, err := e.State(ctx, res)
				return err == nil && st.Waiters == 1
			})
			if _, err := e.Release(ctx, res, l.Token, "first"); err != nil {
				t.Fatal(err)
			}
			select {
			case r := <-got:
				if r.err != nil {
					t.Fatalf("the waiter: %v", r.err)
				}
				if until := l.AcquiredAt.Add(window); r.l.AcquiredAt.Before(until) {
					t.Fatalf("granted at %v, inside the window that ends at %v", r.l.AcquiredAt, until)
				}
			case <-time.After(window + 5*time.Second):
				t.Fatal("the waiter was not granted within 5 s of the window's end")
			}
		})
	}
}

// A force-release ends a window its holder released inside: a person
// breaking a stuck key frees it.
func TestMinHoldForceReleaseEndsTheWindow(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			e := newEngine(t, b.open(t))
			ctx := context.Background()
			res := lock.Lock("mh:force")
			l := mustAcquire(t, e, res, lock.AcquireRequest{Owner: "job", TTL: time.Minute, MinHold: time.Minute})
			if _, err := e.Release(ctx, res, l.Token, "job"); err != nil {
				t.Fatal(err)
			}
			broken, err := e.ForceReleaseFence(ctx, res, l.Fence, "ops", "rerun now")
			if err != nil || broken.Owner != "job" || broken.Fence != l.Fence {
				t.Fatalf("force-release of the window: %+v, %v", broken, err)
			}
			mustAcquire(t, e, res, lock.AcquireRequest{Owner: "again", TTL: time.Minute})
		})
	}
}

// A re-entry keeps the first grant's window, and a renewal does not move
// it: a shorter TTL on the way keeps the lease until the window ends.
func TestMinHoldReentryAndRenewalKeepTheWindow(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			e := newEngine(t, b.open(t))
			ctx := context.Background()
			res := lock.Lock("mh:keep")
			l := mustAcquire(t, e, res, lock.AcquireRequest{Owner: "job", TTL: time.Minute, MinHold: 30 * time.Second})
			until := l.AcquiredAt.Add(30 * time.Second)
			in := mustAcquire(t, e, res, lock.AcquireRequest{Owner: "job", TTL: time.Minute, Token: l.Token, MinHold: time.Minute})
			if in.Count != 2 {
				t.Fatalf("re-entry: %+v", in)
			}
			r, err := e.Renew(ctx, res, lock.RenewRequest{Token: l.Token, TTL: time.Second, Actor: "job"})
			if err != nil || r.TTL != time.Second || r.ExpiresAt.Before(until) {
				t.Fatalf("a renewal shorter than the window: %+v, %v", r, err)
			}
			for range 2 {
				if _, err := e.Release(ctx, res, l.Token, "job"); err != nil {
					t.Fatal(err)
				}
			}
			st, err := e.State(ctx, res)
			if err != nil || !st.MinHoldUntil.Equal(until) || st.Count != 0 {
				t.Fatalf("state after both releases: %+v, %v", st, err)
			}
		})
	}
}

// A waiter that asked for a window and is handed the key by a release
// gets its window, as one granted by its own try.
func TestMinHoldOfAHandedGrant(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			e := newEngine(t, b.open(t))
			ctx := context.Background()
			res := lock.Lock("mh:handed")
			l := mustAcquire(t, e, res, lock.AcquireRequest{Owner: "first", TTL: time.Minute})
			got := make(chan error, 1)
			go func() {
				_, err := e.Acquire(ctx, res, lock.AcquireRequest{Owner: "second", TTL: time.Minute, MinHold: 20 * time.Second,
					Wait: 10 * time.Second})
				got <- err
			}()
			waitFor(t, func() bool {
				st, err := e.State(ctx, res)
				return err == nil && st.Waiters == 1
			})
			if _, err := e.Release(ctx, res, l.Token, "first"); err != nil {
				t.Fatal(err)
			}
			if err := <-got; err != nil {
				t.Fatalf("the waiter: %v", err)
			}
			st, err := e.State(ctx, res)
			if err != nil || st.Owner != "second" || !st.MinHoldUntil.Equal(st.AcquiredAt.Add(20*time.Second)) {
				t.Fatalf("the handed grant's state: %+v, %v", st, err)
			}
		})
	}
}

// A hold window is for an exclusive lock's grant of at most its TTL, not
// in a session; Redlock has none.
func TestMinHoldRefused(t *testing.T) {
	e := newEngine(t, redistest.Start(t).Client(t))
	ctx := context.Background()
	s, err := e.CreateSession(ctx, "", "w", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		res lock.Resource
		req lock.AcquireRequest
	}{
		{lock.Lock("mh:long"), lock.AcquireRequest{TTL: time.Second, MinHold: time.Second + time.Millisecond}},
		{lock.Lock("mh:neg"), lock.AcquireRequest{TTL: time.Second, MinHold: -time.Millisecond}},
		{lock.Lock("mh:s"), lock.AcquireRequest{TTL: time.Minute, Mode: lock.Shared, MinHold: time.Second}},
		{lock.Semaphore("mh:p"), lock.AcquireRequest{TTL: time.Minute, Limit: 2, MinHold: time.Second}},
		{lock.Election("mh:e"), lock.AcquireRequest{TTL: time.Minute, MinHold: time.Second}},
		{lock.Lock("mh:sess"), lock.AcquireRequest{Session: s.ID, MinHold: time.Second}},
	} {
		tc.req.Owner = "w"
		if _, err := e.Acquire(ctx, tc.res, tc.req); err == nil {
			t.Errorf("%v with %+v granted", tc.res, tc.req)
		}
	}
	r := redlockOn(t, threeMasters(t), lock.Options{})
	_, err = r.Acquire(ctx, lock.Lock("mh:redlock"), lock.AcquireRequest{Owner: "w", TTL: time.Minute, MinHold: time.Second})
	if !errors.Is(err, lock.ErrNoMinHold) {
		t.Fatalf("Redlock: %v", err)
	}
}

// A grant given back because its caller never had it (GiveBack) keeps no
// window: nobody worked under it.
func TestMinHoldNotAfterAGiveBack(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			e := newEngine(t, b.open(t))
			ctx := context.Background()
			res := lock.Lock("mh:back")
			l := mustAcquire(t, e, res, lock.AcquireRequest{Owner: "gone", TTL: time.Minute, MinHold: time.Minute})
			if rel, err := e.GiveBack(ctx, res, l.Token, "lockd"); err != nil || !rel.Released {
				t.Fatalf("give-back: %+v, %v", rel, err)
			}
			mustAcquire(t, e, res, lock.AcquireRequest{Owner: "next", TTL: time.Minute})
		})
	}
}
