package lock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/redistest"
)

// near fails the test unless a and b are within d of each other.
func near(t *testing.T, what string, a, b time.Time, d time.Duration) {
	t.Helper()
	if diff := a.Sub(b); diff > d || diff < -d {
		t.Fatalf("%s: %v and %v are %v apart (at most %v)", what, a, b, diff, d)
	}
}

func newestEvent(t *testing.T, e lock.Service, res lock.Resource) lock.Event {
	t.Helper()
	evs, err := e.History(context.Background(), res, 1)
	if err != nil || len(evs) == 0 {
		t.Fatalf("history of %s: %v, %v", res, evs, err)
	}
	return evs[0]
}

// Grants in a session live as long as the session: they move with its
// renewals (and not with their own), leave with its end, all at once, as
// released by "session", and their waiters are served.
func TestSessionGrantsLiveAndDieWithIt(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			e := newEngine(t, b.open(t))
			ctx := context.Background()
			s, err := e.CreateSession(ctx, "", "worker-1", 3*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if !lock.ValidSessionID(s.ID) || s.Owner != "worker-1" || s.TTL != 3*time.Second {
				t.Fatalf("created %+v", s)
			}
			in := lock.AcquireRequest{Owner: "worker-1", Session: s.ID}
			x := mustAcquire(t, e, lock.Lock("sess:a"), in)
			p := in
			p.Limit = 2
			permit := mustAcquire(t, e, lock.Semaphore("sess:pool"), p)
			// A second permit of the same semaphore is a grant of its own.
			permit2 := mustAcquire(t, e, lock.Semaphore("sess:pool"), p)
			leader := mustAcquire(t, e, lock.Election("sess:leader"), in)
			for _, l := range []lock.Lease{x, permit, permit2, leader} {
				near(t, "a grant's expiry and the session's", l.ExpiresAt, s.ExpiresAt, 100*time.Millisecond)
			}
			got, err := e.GetSession(ctx, "", s.ID)
			if err != nil || len(got.Holds) != 4 || got.Owner != "worker-1" {
				t.Fatalf("get: %+v, %v", got, err)
			}

			// A renewal of the grant by its own token keeps its expiry.
			time.Sleep(100 * time.Millisecond)
			r, err := e.Renew(ctx, lock.Lock("sess:a"), lock.RenewRequest{Token: x.Token, TTL: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			near(t, "a grant renewed on its own", r.ExpiresAt, s.ExpiresAt, 100*time.Millisecond)

			// The session's renewal moves every grant.
			time.Sleep(200 * time.Millisecond)
			s2, err := e.RenewSession(ctx, "", s.ID, "worker-1")
			if err != nil {
				t.Fatal(err)
			}
			if !s2.ExpiresAt.After(s.ExpiresAt.Add(250 * time.Millisecond)) {
				t.Fatalf("renewed session expires at %v, before at %v", s2.ExpiresAt, s.ExpiresAt)
			}
			for _, res := range []lock.Resource{lock.Lock("sess:a"), lock.Election("sess:leader")} {
				st, err := e.State(ctx, res)
				if err != nil {
					t.Fatal(err)
				}
				near(t, "a grant after the session's renewal", st.ExpiresAt, s2.ExpiresAt, 100*time.Millisecond)
			}
			pool, err := e.State(ctx, lock.Semaphore("sess:pool"))
			if err != nil || len(pool.Holders) != 2 {
				t.Fatalf("the semaphore after the session's renewal: %+v, %v", pool, err)
			}
			for _, h := range pool.Holders {
				near(t, "a permit after the session's renewal", h.ExpiresAt, s2.ExpiresAt, 100*time.Millisecond)
			}

			// A waiter of the lock is served when the session ends.
			served := make(chan error, 1)
			go func() {
				_, err := e.Acquire(ctx, lock.Lock("sess:a"), lock.AcquireRequest{Owner: "next", TTL: time.Minute, Wait: 10 * time.Second})
				served <- err
			}()
			waitFor(t, func() bool { st, _ := e.State(ctx, lock.Lock("sess:a")); return len(st.Queue) == 1 })
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
			for _, res := range []lock.Resource{lock.Lock("sess:a"), lock.Semaphore("sess:pool"), lock.Election("sess:leader")} {
				ev := newestEvent(t, e, res)
				if res.Name == "sess:a" {
					evs, _ := e.History(ctx, res, 2)
					ev = evs[1] // the waiter's grant came after
				}
				if ev.Type != "released" || ev.Actor != "session" {
					t.Fatalf("%s: newest event %+v, want released by session", res, ev)
				}
			}
			if _, err := e.State(ctx, lock.Election("sess:leader")); !errors.Is(err, lock.ErrNotFound) {
				t.Fatalf("leader after the session's end: %v", err)
			}
			if _, err := e.GetSession(ctx, "", s.ID); !errors.Is(err, lock.ErrSessionNotFound) {
				t.Fatalf("get after the end: %v", err)
			}
			if _, err := e.Acquire(ctx, lock.Lock("sess:b"), in); !errors.Is(err, lock.ErrSessionNotFound) {
				t.Fatalf("acquire in an ended session: %v", err)
			}
			if _, err := e.RenewSession(ctx, "", s.ID, "w"); !errors.Is(err, lock.ErrSessionNotFound) {
				t.Fatalf("renew of an ended session: %v", err)
			}
		})
	}
}

// A session is found only in the scope that made it: in any other scope,
// the unscoped one included, its id names no session, and nothing the
// other scope does changes it.
func TestSessionScope(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			e := newEngine(t, b.open(t))
			ctx := context.Background()
			s, err := e.CreateSession(ctx, "tenant-a", "worker", 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			mustAcquire(t, e, lock.Lock("a:1"), lock.AcquireRequest{Session: s.ID, SessionScope: "tenant-a"})
			for _, scope := range []string{"tenant-b", ""} {
				if _, err := e.GetSession(ctx, scope, s.ID); !errors.Is(err, lock.ErrSessionNotFound) {
					t.Errorf("get from scope %q: %v", scope, err)
				}
				if _, err := e.RenewSession(ctx, scope, s.ID, "b"); !errors.Is(err, lock.ErrSessionNotFound) {
					t.Errorf("renew from scope %q: %v", scope, err)
				}
				if _, err := e.EndSession(ctx, scope, s.ID); !errors.Is(err, lock.ErrSessionNotFound) {
					t.Errorf("end from scope %q: %v", scope, err)
				}
				in := lock.AcquireRequest{Owner: "b", TTL: time.Second, Session: s.ID, SessionScope: scope}
				if _, err := e.Acquire(ctx, lock.Lock("b:1"), in); !errors.Is(err, lock.ErrSessionNotFound) {
					t.Errorf("acquire from scope %q: %v", scope, err)
				}
			}
			got, err := e.GetSession(ctx, "tenant-a", s.ID)
			if err != nil || len(got.Holds) != 1 || got.Holds[0] != lock.Lock("a:1") || !got.ExpiresAt.Equal(s.ExpiresAt) {
				t.Fatalf("the session after the other scopes' calls: %+v, %v", got, err)
			}
			if _, err := e.State(ctx, lock.Lock("b:1")); !errors.Is(err, lock.ErrNotFound) {
				t.Fatalf("b:1 after an acquire in another scope's session: %v", err)
			}
		})
	}
}

// A session nobody renews lapses, and its grants with it: recorded as
// released by "session" (reason "session expired"), with the lock-delay
// of a grant that asked for one, and their waiters served.
func TestSessionLapse(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			e := newEngine(t, b.open(t))
			ctx := context.Background()
			s, err := e.CreateSession(ctx, "", "crashes", 400*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			in := lock.AcquireRequest{Owner: "crashes", Session: s.ID}
			mustAcquire(t, e, lock.Lock("lapse:a"), in)
			delayed := in
			delayed.LockDelay = 500 * time.Millisecond
			mustAcquire(t, e, lock.Lock("lapse:d"), delayed)

			start := time.Now()
			l, err := e.Acquire(ctx, lock.Lock("lapse:a"), lock.AcquireRequest{Owner: "next", TTL: time.Minute, Wait: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			if took := time.Since(start); took > 2*time.Second {
				t.Fatalf("the waiter was served %v after the session's lapse", took)
			}
			evs, err := e.History(ctx, lock.Lock("lapse:a"), 2)
			if err != nil || len(evs) != 2 || evs[1].Type != "released" || evs[1].Actor != "session" || evs[1].Reason != "session expired" {
				t.Fatalf("history: %+v, %v", evs, err)
			}
			near(t, "the lapse", evs[1].At, s.ExpiresAt, 100*time.Millisecond)
			_ = l

			if _, err := e.Acquire(ctx, lock.Lock("lapse:d"), lock.AcquireRequest{Owner: "next", TTL: time.Minute}); !errors.Is(err, lock.ErrLockDelay) {
				t.Fatalf("acquire after a lapse with a lock-delay: %v", err)
			}
			if _, err := e.GetSession(ctx, "", s.ID); !errors.Is(err, lock.ErrSessionNotFound) {
				t.Fatalf("get after the lapse: %v", err)
			}
		})
	}
}

// A waiter in a session that was renewed while it waited gets the
// session's expiry, not the one it asked with; a grant its holder
// released leaves the session's list at the next renewal.
func TestSessionWaiterAndReleasedGrant(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			e := newEngine(t, b.open(t))
			ctx := context.Background()
			s, err := e.CreateSession(ctx, "", "w", 2*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			holder := mustAcquire(t, e, lock.Lock("sw:a"), lock.AcquireRequest{Owner: "other", TTL: time.Minute})
			got := make(chan lock.Lease, 1)
			go func() {
				l, err := e.Acquire(ctx, lock.Lock("sw:a"), lock.AcquireRequest{Owner: "w", Session: s.ID, Wait: 10 * time.Second})
				if err != nil {
					t.Error(err)
				}
				got <- l
			}()
			waitFor(t, func() bool { st, _ := e.State(ctx, lock.Lock("sw:a")); return len(st.Queue) == 1 })
			time.Sleep(600 * time.Millisecond)
			s2, err := e.RenewSession(ctx, "", s.ID, "w")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := e.Release(ctx, lock.Lock("sw:a"), holder.Token, "other"); err != nil {
				t.Fatal(err)
			}
			l := <-got
			near(t, "the waiter's grant", l.ExpiresAt, s2.ExpiresAt, 100*time.Millisecond)

			if _, err := e.Release(ctx, lock.Lock("sw:a"), l.Token, "w"); err != nil {
				t.Fatal(err)
			}
			s3, err := e.RenewSession(ctx, "", s.ID, "w")
			if err != nil || len(s3.Holds) != 1 {
				t.Fatalf("renew lists %+v, %v (the list as it was)", s3.Holds, err)
			}
			if s4, err := e.GetSession(ctx, "", s.ID); err != nil || len(s4.Holds) != 0 {
				t.Fatalf("after the renewal the session holds %+v, %v", s4.Holds, err)
			}
		})
	}
}

// A grant never ends before its session: a waiter granted just after a
// renewal of its session (its TTL was the session's time left when it
// asked, some 45 ms before that renewal's worth of time) is moved to the
// session's expiry, not left up to 50 ms short of it, where a renewal of
// the session that comes late in its TTL, but in time, would find the
// grant gone.
func TestSessionGrantNeverEndsBeforeItsSession(t *testing.T) {
	e := newEngine(t, backends[0].open(t))
	ctx := context.Background()
	s, err := e.CreateSession(ctx, "", "w", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// The waiter asks this much after the session began: its TTL is the
	// session's time left then. (Longer under load only makes the gap
	// wider than the slack, which the old code corrected too.)
	time.Sleep(45 * time.Millisecond)
	holder := mustAcquire(t, e, lock.Lock("sn:a"), lock.AcquireRequest{Owner: "other", TTL: time.Minute})
	got := make(chan lock.Lease, 1)
	go func() {
		l, err := e.Acquire(ctx, lock.Lock("sn:a"), lock.AcquireRequest{Owner: "w", Session: s.ID, Wait: 10 * time.Second})
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitFor(t, func() bool { st, _ := e.State(ctx, lock.Lock("sn:a")); return len(st.Queue) == 1 })
	if _, err := e.RenewSession(ctx, "", s.ID, "w"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Release(ctx, lock.Lock("sn:a"), holder.Token, "other"); err != nil {
		t.Fatal(err)
	}
	l := <-got
	now, err := e.GetSession(ctx, "", s.ID)
	if err != nil {
		t.Fatal(err)
	}
	st, err := e.State(ctx, lock.Lock("sn:a"))
	if err != nil {
		t.Fatal(err)
	}
	for what, at := range map[string]time.Time{"the waiter's lease": l.ExpiresAt, "the key's state": st.ExpiresAt} {
		if at.Before(now.ExpiresAt) {
			t.Errorf("%s expires at %v, %v before its session", what, at, now.ExpiresAt.Sub(at))
		}
	}
}

// A renewal of a session whose caller goes away once the session's record
// has moved (its answer came too late: a client's renewal times out at
// the session's expiry) still renews every grant of the session: else the
// session would live on past grants that lapse at its previous expiry.
func TestSessionRenewalOutlivesItsCaller(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	e := newEngine(t, rdb)
	ctx := context.Background()
	s, err := e.CreateSession(ctx, "", "w", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	mustAcquire(t, e, lock.Lock("so:a"), lock.AcquireRequest{Owner: "w", Session: s.ID})
	// So that the renewal moves the session's expiry by a measurable step.
	time.Sleep(100 * time.Millisecond)
	renewCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	rdb.AddHook(cancelAfterSessionRenew{cancel})
	_, err = e.RenewSession(renewCtx, "", s.ID, "w")
	t.Logf("the renewal whose caller went away answered %v", err)
	now, err := e.GetSession(ctx, "", s.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !now.ExpiresAt.After(s.ExpiresAt) {
		t.Fatalf("the session's record did not move: %v, before %v", now.ExpiresAt, s.ExpiresAt)
	}
	st, err := e.State(ctx, lock.Lock("so:a"))
	if err != nil {
		t.Fatal(err)
	}
	if st.ExpiresAt.Before(now.ExpiresAt) {
		t.Fatalf("the grant expires at %v, %v before its session", st.ExpiresAt, now.ExpiresAt.Sub(st.ExpiresAt))
	}
}

// cancelAfterSessionRenew cancels a context as soon as session.lua's renew
// has answered: the caller of the renewal goes away just then.
type cancelAfterSessionRenew struct{ cancel context.CancelFunc }

func (h cancelAfterSessionRenew) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h cancelAfterSessionRenew) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if isSessionRenew(cmd) {
			h.cancel()
		}
		return err
	}
}

func (h cancelAfterSessionRenew) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			if isSessionRenew(c) {
				h.cancel()
			}
		}
		return err
	}
}

// isSessionRenew says whether cmd runs session.lua's renew: a session key
// among its keys and "renew" as its op.
func isSessionRenew(cmd redis.Cmder) bool {
	var session, renew bool
	for _, a := range cmd.Args() {
		v := fmt.Sprint(a)
		session = session || strings.Contains(v, "{sess/")
		renew = renew || v == "renew"
	}
	return session && renew
}

// runSessions checks sessions through two engines on one topology (a
// Sentinel's master, a Cluster's masters, where the session and its grants
// are in different slots): a session made through a holds grants taken
// through b, a renewal through b moves them all, its end through b serves
// a waiter on a, and a lapse ends its grants as released by "session".
func runSessions(t *testing.T, a, b *lock.Engine) {
	t.Helper()
	ctx := context.Background()
	s, err := a.CreateSession(ctx, "", "topo", 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	in := lock.AcquireRequest{Owner: "topo", Session: s.ID}
	keys := []string{"topo:s:1", "topo:s:2", "topo:s:3", "topo:s:4"}
	for _, k := range keys {
		mustAcquire(t, b, lock.Lock(k), in)
	}
	// Long enough that a grant the renewal did not move would be 600 ms
	// off the session's expiry; on a Cluster the renewal moves the grants
	// slot by slot, one call each, which under load took 114 ms.
	time.Sleep(600 * time.Millisecond)
	s2, err := b.RenewSession(ctx, "", s.ID, "topo")
	if err != nil || len(s2.Holds) != len(keys) {
		t.Fatalf("renew: %+v, %v", s2, err)
	}
	for _, k := range keys {
		st, err := a.State(ctx, lock.Lock(k))
		if err != nil {
			t.Fatal(err)
		}
		near(t, k+" after the session's renewal", st.ExpiresAt, s2.ExpiresAt, 300*time.Millisecond)
	}
	// Later subtests measure the restart quarantine, which covers every
	// live lease: the waiter's is short and released.
	served := make(chan error, 1)
	go func() {
		l, err := a.Acquire(ctx, lock.Lock(keys[0]), lock.AcquireRequest{Owner: "next", TTL: 2 * time.Second, Wait: 10 * time.Second})
		if err == nil {
			_, err = a.Release(ctx, lock.Lock(keys[0]), l.Token, "next")
		}
		served <- err
	}()
	waitFor(t, func() bool { st, _ := a.State(ctx, lock.Lock(keys[0])); return len(st.Queue) == 1 })
	if _, err := b.EndSession(ctx, "", s.ID); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-served:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("the waiter was not served when the session ended")
	}
	for _, k := range keys[1:] {
		if ev := newestEvent(t, a, lock.Lock(k)); ev.Type != "released" || ev.Actor != "session" {
			t.Fatalf("%s: %+v", k, ev)
		}
	}

	short, err := b.CreateSession(ctx, "", "lapses", 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	mustAcquire(t, a, lock.Lock("topo:s:lapse"), lock.AcquireRequest{Owner: "lapses", Session: short.ID})
	waitFor(t, func() bool {
		_, err := b.State(ctx, lock.Lock("topo:s:lapse"))
		return errors.Is(err, lock.ErrNotFound)
	})
	if ev := newestEvent(t, b, lock.Lock("topo:s:lapse")); ev.Type != "released" || ev.Actor != "session" || ev.Reason != "session expired" {
		t.Fatalf("after the lapse: %+v", ev)
	}
}
