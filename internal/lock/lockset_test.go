package lock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/redistest"
)

// TestLockSets runs the lock set's guarantees on real Redis and on the
// embedded store, with two engines (two lockd processes) on one store;
// TestOnCluster runs them across a Cluster's slots.
func TestLockSets(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			rdb := b.open(t)
			runLockSets(t, newEngine(t, rdb), newEngine(t, rdb))
		})
	}
}

func runLockSets(t *testing.T, a, b lock.Service) {
	t.Run("all or nothing", func(t *testing.T) { setAllOrNothing(t, a, b) })
	t.Run("grant, state, renew, release", func(t *testing.T) { setCycle(t, a, b) })
	t.Run("waits for a release", func(t *testing.T) { setWaits(t, a, b) })
	t.Run("opposite orders both complete", func(t *testing.T) { setNoDeadlock(t, a, b) })
	t.Run("not starved by single keys", func(t *testing.T) { setNotStarved(t, a, b) })
	t.Run("shared sets", func(t *testing.T) { setShared(t, a, b) })
	t.Run("bad input", func(t *testing.T) { setBadInput(t, a) })
}

func setReq(owner string, keys ...string) lock.SetRequest {
	return lock.SetRequest{Keys: keys, Owner: owner, TTL: 10 * time.Second}
}

func setAllOrNothing(t *testing.T, a, b lock.Service) {
	ctx := context.Background()
	held := mustAcquire(t, a, lock.Lock("ls:n:b"), lock.AcquireRequest{Owner: "single"})
	_, err := b.AcquireSet(ctx, setReq("set", "ls:n:c", "ls:n:a", "ls:n:b"))
	var he *lock.HeldError
	if !errors.As(err, &he) || he.Resource.Name != "ls:n:b" || he.Owner != "single" {
		t.Fatalf("set with one key held: %v, want held ls:n:b by single", err)
	}
	for _, k := range []string{"ls:n:a", "ls:n:c"} {
		if s, err := b.State(ctx, lock.Lock(k)); !errors.Is(err, lock.ErrNotFound) {
			t.Fatalf("%s after a refused set: %+v, %v; want free", k, s, err)
		}
	}
	if _, err := a.Release(ctx, held.Resource, held.Token, "t"); err != nil {
		t.Fatal(err)
	}
	// Nothing the refused set left behind stands in a lone acquire's way.
	for _, k := range []string{"ls:n:a", "ls:n:b", "ls:n:c"} {
		l := mustAcquire(t, a, lock.Lock(k), lock.AcquireRequest{})
		if _, err := a.Release(ctx, l.Resource, l.Token, "t"); err != nil {
			t.Fatal(err)
		}
	}
}

func setCycle(t *testing.T, a, b lock.Service) {
	ctx := context.Background()
	keys := []string{"ls:c:3", "ls:c:1", "ls:c:2"}
	s, err := a.AcquireSet(ctx, setReq("cycle", keys...))
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Leases) != 3 || s.Token == "" || s.Owner != "cycle" || s.ExpiresAt.IsZero() {
		t.Fatalf("set = %+v", s)
	}
	for i, l := range s.Leases {
		if l.Key != keys[i] || l.Fence <= 0 {
			t.Fatalf("lease %d = %+v, want key %s with a fence", i, l, keys[i])
		}
		st, err := b.State(ctx, lock.Lock(l.Key))
		if err != nil {
			t.Fatal(err)
		}
		if st.Owner != "cycle" || st.Fence != l.Fence || st.Set != 3 || st.Mode != lock.Exclusive {
			t.Fatalf("state of %s = owner %q fence %d set %d; want cycle, %d, 3", l.Key, st.Owner, st.Fence, st.Set, l.Fence)
		}
		h, err := b.History(ctx, lock.Lock(l.Key), 1)
		if err != nil || len(h) != 1 || h[0].Type != "acquired" || h[0].Set != 3 {
			t.Fatalf("history of %s = %+v, %v; want acquired, set 3", l.Key, h, err)
		}
	}
	// Another set, or a lone acquire, of any of its keys is refused.
	if _, err := b.AcquireSet(ctx, setReq("other", "ls:c:0", "ls:c:2")); !errors.Is(err, lock.ErrHeld) {
		t.Fatalf("a set over a held key: %v", err)
	}
	r, err := b.RenewSet(ctx, s.Token, 20*time.Second, "t")
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Leases) != 3 || !r.ExpiresAt.After(s.ExpiresAt) {
		t.Fatalf("renewed set = %+v; was %+v", r, s)
	}
	st, _ := a.State(ctx, lock.Lock("ls:c:1"))
	if st.TTL != 20*time.Second || st.Set != 3 {
		t.Fatalf("state after the renewal: ttl %v set %d", st.TTL, st.Set)
	}
	if _, err := a.RenewSet(ctx, "not-the-token", 0, "t"); !errors.Is(err, lock.ErrLeaseLost) {
		t.Fatalf("renew with another token: %v", err)
	}
	n, err := b.ReleaseSet(ctx, s.Token, "t")
	if err != nil || n != 3 {
		t.Fatalf("release = %d, %v; want 3", n, err)
	}
	for _, k := range keys {
		if _, err := a.State(ctx, lock.Lock(k)); !errors.Is(err, lock.ErrNotFound) {
			t.Fatalf("%s after the set's release: %v", k, err)
		}
	}
	if _, err := a.ReleaseSet(ctx, s.Token, "t"); !errors.Is(err, lock.ErrLeaseLost) {
		t.Fatalf("second release: %v", err)
	}
}

func setWaits(t *testing.T, a, b lock.Service) {
	ctx := context.Background()
	held := mustAcquire(t, a, lock.Lock("ls:w:2"), lock.AcquireRequest{Owner: "single"})
	type result struct {
		s   lock.SetLease
		err error
	}
	done := make(chan result, 1)
	queued := make(chan struct{})
	go func() {
		req := setReq("waiter", "ls:w:1", "ls:w:2", "ls:w:3")
		req.Wait = 10 * time.Second
		close(queued)
		s, err := b.AcquireSet(ctx, req)
		done <- result{s, err}
	}()
	<-queued
	// The set queues on ls:w:2 and holds none of its keys meanwhile.
	waitFor(t, func() bool {
		st, err := a.State(ctx, lock.Lock("ls:w:2"))
		return err == nil && st.Waiters == 1
	})
	for _, k := range []string{"ls:w:1", "ls:w:3"} {
		if _, err := a.State(ctx, lock.Lock(k)); !errors.Is(err, lock.ErrNotFound) {
			t.Fatalf("%s while the set waits: %v, want nobody holding it", k, err)
		}
	}
	if _, err := a.Release(ctx, held.Resource, held.Token, "t"); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if _, err := b.ReleaseSet(ctx, r.s.Token, "t"); err != nil {
		t.Fatal(err)
	}
}

func setNoDeadlock(t *testing.T, a, b lock.Service) {
	ctx := context.Background()
	for round := range 20 {
		var wg sync.WaitGroup
		errs := make(chan error, 2)
		for i, e := range []lock.Service{a, b} {
			keys := []string{"ls:d:p", "ls:d:q", "ls:d:r"}
			if i == 1 {
				keys = []string{"ls:d:r", "ls:d:q", "ls:d:p"}
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				req := setReq(fmt.Sprintf("s%d", i), keys...)
				req.Wait = 10 * time.Second
				s, err := e.AcquireSet(ctx, req)
				if err != nil {
					errs <- fmt.Errorf("round %d, set %d: %w", round, i, err)
					return
				}
				if _, err := e.ReleaseSet(ctx, s.Token, "t"); err != nil {
					errs <- err
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	}
}

func setNotStarved(t *testing.T, a, b lock.Service) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Two lone clients take turns on ls:st:a without a moment's gap: one
	// always waits while the other holds.
	var wg sync.WaitGroup
	started := make(chan struct{}, 2)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ctx.Err() == nil; n++ {
				l, err := a.Acquire(ctx, lock.Lock("ls:st:a"), lock.AcquireRequest{Owner: fmt.Sprintf("lone%d", i), TTL: 5 * time.Second, Wait: 5 * time.Second})
				if err != nil {
					continue
				}
				if n == 0 {
					started <- struct{}{}
				}
				_, _ = a.Release(context.Background(), l.Resource, l.Token, "t")
			}
		}()
	}
	<-started
	req := setReq("set", "ls:st:a", "ls:st:b")
	req.Wait = 10 * time.Second
	s, err := b.AcquireSet(context.Background(), req)
	cancel()
	wg.Wait()
	if err != nil {
		t.Fatalf("a set among a loop of lone acquires: %v", err)
	}
	if _, err := b.ReleaseSet(context.Background(), s.Token, "t"); err != nil {
		t.Fatal(err)
	}
}

func setBadInput(t *testing.T, e lock.Service) {
	many := make([]string, 65)
	for i := range many {
		many[i] = fmt.Sprintf("ls:b:%d", i)
	}
	for _, c := range []struct {
		name  string
		req   lock.SetRequest
		field string
	}{
		{"one key", setReq("o", "ls:b:1"), "keys"},
		{"65 keys", setReq("o", many...), "keys"},
		{"duplicate", setReq("o", "ls:b:1", "ls:b:2", "ls:b:3", "ls:b:1"), "keys[3]"},
		{"bad key", setReq("o", "ls:b:1", "-bad"), "keys[1]"},
		{"bad mode", lock.SetRequest{Keys: []string{"ls:b:1", "ls:b:2"}, TTL: time.Second, Mode: "both"}, "mode"},
		{"no ttl", lock.SetRequest{Keys: []string{"ls:b:1", "ls:b:2"}}, "ttl_ms"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := e.AcquireSet(context.Background(), c.req)
			var ie *lock.SetInputError
			if !errors.As(err, &ie) || ie.Field != c.field {
				t.Fatalf("%v, want a SetInputError on %s", err, c.field)
			}
			if !strings.Contains(ie.Error(), c.field) {
				t.Fatalf("error %q does not name %s", ie.Error(), c.field)
			}
		})
	}
}

// The event stream's "acquired" of each key of a set carries the set's
// size, and never its token.
func TestLockSetEvents(t *testing.T) {
	e := newEngine(t, redistest.Start(t).Client(t))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sub, err := e.Subscribe(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	s, err := e.AcquireSet(ctx, setReq("ev", "ls:ev:a", "ls:ev:b"))
	if err != nil {
		t.Fatal(err)
	}
	marked := map[string]int{}
	for len(marked) < 2 {
		c, err := sub.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if c.Type == "acquired" {
			marked[c.Resource.Name] = c.Set
		}
	}
	if marked["ls:ev:a"] != 2 || marked["ls:ev:b"] != 2 {
		t.Fatalf("acquired events: %v", marked)
	}
	if _, err := e.ReleaseSet(ctx, s.Token, "t"); err != nil {
		t.Fatal(err)
	}
}

// A lockd that dies while its set waits (first on one key, queued on the
// other) blocks nobody past its liveness: its places lapse, and it never
// held a key.
func TestLockSetWaiterDies(t *testing.T) {
	srv := redistest.Start(t)
	b := newEngine(t, srv.Client(t))
	doomed := srv.Client(t)
	a := lock.New(doomed, lock.Options{})
	t.Cleanup(func() { _ = a.Close() })
	ctx := context.Background()
	held := mustAcquire(t, b, lock.Lock("ls:die:2"), lock.AcquireRequest{Owner: "holder"})
	go func() {
		req := setReq("doomed", "ls:die:1", "ls:die:2")
		req.Wait = 30 * time.Second
		_, _ = a.AcquireSet(ctx, req)
	}()
	waitFor(t, func() bool {
		st, err := b.State(ctx, lock.Lock("ls:die:2"))
		return err == nil && st.Waiters == 1
	})
	// The set is first on ls:die:1, which nobody holds.
	if _, err := b.Acquire(ctx, lock.Lock("ls:die:1"), lock.AcquireRequest{Owner: "lone", TTL: time.Second}); !errors.Is(err, lock.ErrQueued) {
		t.Fatalf("a lone acquire of the key the set is first on: %v, want queued", err)
	}
	if _, err := b.State(ctx, lock.Lock("ls:die:1")); !errors.Is(err, lock.ErrNotFound) {
		t.Fatalf("ls:die:1 while the set waits: %v", err)
	}
	// The set's lockd loses Redis for good: its places lapse within its
	// liveness (1.6 s), and the lone acquire gets the key.
	_ = doomed.Close()
	l, err := b.Acquire(ctx, lock.Lock("ls:die:1"), lock.AcquireRequest{Owner: "lone", TTL: time.Second, Wait: 5 * time.Second})
	if err != nil {
		t.Fatalf("after the set's lockd died: %v", err)
	}
	if _, err := b.Release(ctx, l.Resource, l.Token, "t"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Release(ctx, held.Resource, held.Token, "t"); err != nil {
		t.Fatal(err)
	}
}

// Shared sets hold their keys together with other shared holders; an
// exclusive set waits until they have all let go, and holds none of its
// keys meanwhile.
func setShared(t *testing.T, a, b lock.Service) {
	ctx := context.Background()
	shared := func(owner string, keys ...string) lock.SetRequest {
		r := setReq(owner, keys...)
		r.Mode = lock.Shared
		return r
	}
	s1, err := a.AcquireSet(ctx, shared("r1", "ls:sh:1", "ls:sh:2"))
	if err != nil {
		t.Fatal(err)
	}
	s2, err := b.AcquireSet(ctx, shared("r2", "ls:sh:2", "ls:sh:3"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := a.State(ctx, lock.Lock("ls:sh:2"))
	if err != nil || st.Mode != lock.Shared || len(st.Holders) != 2 || st.Set != 2 {
		t.Fatalf("a key of two shared sets: %+v, %v", st, err)
	}
	if _, err := a.AcquireSet(ctx, setReq("w", "ls:sh:0", "ls:sh:3")); !errors.Is(err, lock.ErrHeld) {
		t.Fatalf("an exclusive set over a shared one: %v", err)
	}
	type result struct {
		s   lock.SetLease
		err error
	}
	done := make(chan result, 1)
	go func() {
		req := setReq("writer", "ls:sh:0", "ls:sh:2")
		req.Wait = 10 * time.Second
		s, err := b.AcquireSet(ctx, req)
		done <- result{s, err}
	}()
	waitFor(t, func() bool {
		st, err := a.State(ctx, lock.Lock("ls:sh:2"))
		return err == nil && st.Waiters == 1
	})
	// Behind the waiting writer, a new shared set on its key waits too.
	if _, err := a.AcquireSet(ctx, shared("r3", "ls:sh:2", "ls:sh:4")); !errors.Is(err, lock.ErrQueued) {
		t.Fatalf("a shared set behind a waiting exclusive one: %v", err)
	}
	for _, s := range []lock.SetLease{s1, s2} {
		if _, err := a.ReleaseSet(ctx, s.Token, "t"); err != nil {
			t.Fatal(err)
		}
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if st, _ := a.State(ctx, lock.Lock("ls:sh:2")); st.Mode != lock.Exclusive || st.Owner != "writer" || st.Set != 2 {
		t.Fatalf("after the readers: %+v", st)
	}
	if _, err := b.ReleaseSet(ctx, r.s.Token, "t"); err != nil {
		t.Fatal(err)
	}
}

// A key kept by a hold window after its holder's release refuses a set as
// it refuses a lone acquire (min_hold), and the set takes none of its keys.
func TestLockSetHoldWindow(t *testing.T) {
	e := newEngine(t, redistest.Start(t).Client(t))
	ctx := context.Background()
	l := mustAcquire(t, e, lock.Lock("ls:hw:b"), lock.AcquireRequest{Owner: "cron", TTL: time.Minute, MinHold: 30 * time.Second})
	if _, err := e.Release(ctx, l.Resource, l.Token, "t"); err != nil {
		t.Fatal(err)
	}
	_, err := e.AcquireSet(ctx, setReq("set", "ls:hw:a", "ls:hw:b"))
	var kept *lock.MinHoldError
	if !errors.As(err, &kept) || kept.Resource.Name != "ls:hw:b" {
		t.Fatalf("a set over a key kept by its hold window: %v", err)
	}
	if _, err := e.State(ctx, lock.Lock("ls:hw:a")); !errors.Is(err, lock.ErrNotFound) {
		t.Fatalf("ls:hw:a after the refused set: %v", err)
	}
}
