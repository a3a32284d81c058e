package lock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockd/lockd/internal/embedded"
	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/redistest"
)

// backend is a store the engine runs on.
type backend struct {
	name string
	open func(t *testing.T) redis.UniversalClient
}

var backends = []backend{
	{"redis", func(t *testing.T) redis.UniversalClient { return redistest.Start(t).Client(t) }},
	{"embedded", func(t *testing.T) redis.UniversalClient {
		s, err := embedded.Start()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		c := redis.NewClient(&redis.Options{Addr: "embedded", Dialer: s.Dial})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}},
}

func newEngine(t *testing.T, rdb redis.UniversalClient) *lock.Engine {
	t.Helper()
	e := lock.New(rdb, lock.Options{})
	t.Cleanup(func() { _ = e.Close() })
	return e
}

func mustAcquire(t *testing.T, e lock.Service, res lock.Resource, req lock.AcquireRequest) lock.Lease {
	t.Helper()
	if req.TTL == 0 {
		req.TTL = 10 * time.Second
	}
	if req.Owner == "" {
		req.Owner = "test"
	}
	l, err := e.Acquire(context.Background(), res, req)
	if err != nil {
		t.Fatalf("acquire %s: %v", res, err)
	}
	return l
}

// TestContract runs the engine's core guarantees on real Redis and on the
// embedded store.
func TestContract(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			runContract(t, newEngine(t, b.open(t)))
		})
	}
}

// runContract checks the engine's core guarantees on e; the topology tests
// run it on Sentinel and Cluster too.
func runContract(t *testing.T, e lock.Service) {
	t.Helper()
	ctx := context.Background()

	l := mustAcquire(t, e, lock.Lock("c:1"), lock.AcquireRequest{Owner: "w1", TTL: 5 * time.Second})
	if l.Count != 1 || l.Fence <= 0 || len(l.Token) < 22 || l.Outcome != lock.Granted || l.Owner != "w1" {
		t.Fatalf("fresh lease = %+v", l)
	}
	// Under Redlock the lease's validity is the TTL less the time the
	// majority took and the clock drift allowance (1 % + 2 ms).
	if d := l.ExpiresAt.Sub(l.AcquiredAt); d > 5*time.Second || d < 4900*time.Millisecond {
		t.Fatalf("expires_at - acquired_at = %v, want 5s", d)
	}

	_, err := e.Acquire(ctx, lock.Lock("c:1"), lock.AcquireRequest{Owner: "w2", TTL: time.Second})
	var held *lock.HeldError
	if !errors.As(err, &held) || held.Owner != "w1" || held.Remaining <= 0 || held.Remaining > 5*time.Second {
		t.Fatalf("second acquire: %v (%+v)", err, held)
	}

	re := mustAcquire(t, e, lock.Lock("c:1"), lock.AcquireRequest{Token: l.Token, TTL: 5 * time.Second})
	if re.Count != 2 || re.Fence != l.Fence || re.Token != l.Token || re.Outcome != lock.Reentered {
		t.Fatalf("re-entry = %+v", re)
	}

	rn, err := e.Renew(ctx, lock.Lock("c:1"), lock.RenewRequest{Token: l.Token, TTL: 7 * time.Second, Actor: "a"})
	if err != nil || rn.TTL != 7*time.Second || rn.Fence != l.Fence || rn.Count != 2 {
		t.Fatalf("renew = %+v, %v", rn, err)
	}
	if _, err := e.Renew(ctx, lock.Lock("c:1"), lock.RenewRequest{Token: "not-the-token", TTL: 0, Actor: "a"}); !errors.Is(err, lock.ErrLeaseLost) {
		t.Fatalf("renew with a wrong token: %v", err)
	}
	if _, err := e.Release(ctx, lock.Lock("c:1"), "not-the-token", "a"); !errors.Is(err, lock.ErrLeaseLost) {
		t.Fatalf("release with a wrong token: %v", err)
	}

	st, err := e.State(ctx, lock.Lock("c:1"))
	if err != nil || st.Count != 2 || st.Renewals != 1 || st.Owner != "w1" || st.Remaining <= 0 {
		t.Fatalf("state = %+v, %v", st, err)
	}

	r1, err := e.Release(ctx, lock.Lock("c:1"), l.Token, "a")
	if err != nil || r1.Released || r1.Count != 1 {
		t.Fatalf("first release = %+v, %v", r1, err)
	}
	r2, err := e.Release(ctx, lock.Lock("c:1"), l.Token, "a")
	if err != nil || !r2.Released || r2.Count != 0 {
		t.Fatalf("second release = %+v, %v", r2, err)
	}
	if _, err := e.State(ctx, lock.Lock("c:1")); !errors.Is(err, lock.ErrNotFound) {
		t.Fatalf("state after release: %v", err)
	}
	if _, err := e.Release(ctx, lock.Lock("c:1"), l.Token, "a"); !errors.Is(err, lock.ErrNotFound) {
		t.Fatalf("release after release: %v", err)
	}
	if _, err := e.Acquire(ctx, lock.Lock("c:1"), lock.AcquireRequest{Owner: "x", TTL: time.Second, Token: l.Token}); !errors.Is(err, lock.ErrLeaseLost) {
		t.Fatalf("re-entry with a released token: %v", err)
	}

	// Expiry frees the key, and the stale token cannot touch it.
	short := mustAcquire(t, e, lock.Lock("c:2"), lock.AcquireRequest{TTL: 150 * time.Millisecond})
	time.Sleep(300 * time.Millisecond)
	next := mustAcquire(t, e, lock.Lock("c:2"), lock.AcquireRequest{Owner: "new"})
	if next.Fence <= short.Fence {
		t.Fatalf("fence after expiry %d <= %d", next.Fence, short.Fence)
	}
	if _, err := e.Renew(ctx, lock.Lock("c:2"), lock.RenewRequest{Token: short.Token, TTL: 0, Actor: "a"}); !errors.Is(err, lock.ErrLeaseLost) {
		t.Fatalf("renew with an expired token: %v", err)
	}
	if _, err := e.Release(ctx, lock.Lock("c:2"), short.Token, "a"); !errors.Is(err, lock.ErrLeaseLost) {
		t.Fatalf("release with an expired token: %v", err)
	}
	if _, err := e.Acquire(ctx, lock.Lock("c:2"), lock.AcquireRequest{Owner: "x", TTL: time.Second, Token: short.Token}); !errors.Is(err, lock.ErrLeaseLost) {
		t.Fatalf("re-entry with an expired token: %v", err)
	}

	evs, err := e.History(ctx, lock.Lock("c:2"), 10)
	if err != nil {
		t.Fatal(err)
	}
	if got := eventTypes(evs); got != "acquired expired acquired" {
		t.Fatalf("history of c:2 = %q", got)
	}

	b, err := e.ForceReleaseFence(ctx, lock.Lock("c:2"), 0, "ops", "stuck")
	if err != nil || b.Owner != "new" || b.Fence != next.Fence {
		t.Fatalf("force-release = %+v, %v", b, err)
	}
	if _, err := e.ForceReleaseFence(ctx, lock.Lock("c:2"), 0, "ops", ""); !errors.Is(err, lock.ErrNotFound) {
		t.Fatalf("force-release of a free key: %v", err)
	}
	evs, _ = e.History(ctx, lock.Lock("c:2"), 1)
	if len(evs) != 1 || evs[0].Type != "force_released" || evs[0].Actor != "ops" || evs[0].Reason != "stuck" {
		t.Fatalf("last event = %+v", evs)
	}

	// Waiting: a release wakes the waiter.
	h := mustAcquire(t, e, lock.Lock("c:3"), lock.AcquireRequest{Owner: "first"})
	got := make(chan lock.Lease, 1)
	go func() {
		l, err := e.Acquire(ctx, lock.Lock("c:3"), lock.AcquireRequest{Owner: "second", TTL: time.Second, Wait: 5 * time.Second})
		if err != nil {
			t.Errorf("waiter: %v", err)
		}
		got <- l
	}()
	waitFor(t, func() bool { return e.Waiters() == 1 })
	if _, err := e.Release(ctx, lock.Lock("c:3"), h.Token, "a"); err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-got:
		if l.Owner != "second" {
			t.Fatalf("waiter got %+v", l)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("waiter was not woken by the release")
	}
}

func eventTypes(evs []lock.Event) string {
	var s []string
	for i := len(evs) - 1; i >= 0; i-- {
		s = append(s, evs[i].Type)
	}
	return strings.Join(s, " ")
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	waitWithin(t, 5*time.Second, cond)
}

// waitWithin waits up to d for cond: for a wait whose length is the work
// it waits on, not a bound the engine promises.
func waitWithin(t *testing.T, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met in %v", d)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestFencesIncreaseAcrossReleaseExpiryAndCounterLoss(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	e := newEngine(t, rdb)
	ctx := context.Background()
	var last int64
	for i := range 30 {
		l := mustAcquire(t, e, lock.Lock("fence:k"), lock.AcquireRequest{TTL: 100 * time.Millisecond})
		if l.Fence <= last {
			t.Fatalf("grant %d: fence %d <= %d", i, l.Fence, last)
		}
		last = l.Fence
		switch i % 3 {
		case 0:
			if _, err := e.Release(ctx, lock.Lock("fence:k"), l.Token, "t"); err != nil {
				t.Fatal(err)
			}
		case 1:
			time.Sleep(120 * time.Millisecond) // let it expire
		case 2:
			// The counter lapses (retention) while the lease is released.
			if _, err := e.Release(ctx, lock.Lock("fence:k"), l.Token, "t"); err != nil {
				t.Fatal(err)
			}
			rdb.Del(ctx, "lockd:{fence:k}:fence")
		}
	}
	// Re-entry and renewal keep the fence.
	l := mustAcquire(t, e, lock.Lock("fence:k"), lock.AcquireRequest{})
	re := mustAcquire(t, e, lock.Lock("fence:k"), lock.AcquireRequest{Token: l.Token})
	rn, err := e.Renew(ctx, lock.Lock("fence:k"), lock.RenewRequest{Token: l.Token, TTL: 0, Actor: "t"})
	if err != nil || re.Fence != l.Fence || rn.Fence != l.Fence {
		t.Fatalf("fence changed: %d %d %d (%v)", l.Fence, re.Fence, rn.Fence, err)
	}
}

func TestMutualExclusion(t *testing.T) {
	srv := redistest.Start(t)
	// Two engines on separate clients stand for two lockd replicas.
	engines := []*lock.Engine{newEngine(t, srv.Client(t)), newEngine(t, srv.Client(t))}
	keys := []string{"mx:a", "mx:b", "mx:c"}
	inside := make([]atomic.Int32, len(keys))
	var grants, violations atomic.Int64
	var wg sync.WaitGroup
	for g := range 24 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e := engines[g%2]
			for i := range 15 {
				k := (g + i) % len(keys)
				l, err := e.Acquire(context.Background(), lock.Lock(keys[k]), lock.AcquireRequest{
					Owner: fmt.Sprint("g", g), TTL: 5 * time.Second, Wait: 10 * time.Second,
				})

				if err != nil {
					t.Errorf("acquire: %v", err)
					return
				}
				if inside[k].Add(1) != 1 {
					violations.Add(1)
				}
				grants.Add(1)
				time.Sleep(time.Millisecond)
				inside[k].Add(-1)
				if _, err := e.Release(context.Background(), lock.Lock(keys[k]), l.Token, "t"); err != nil {
					st, _ := e.State(context.Background(), lock.Lock(keys[k]))
					evs, _ := e.History(context.Background(), lock.Lock(keys[k]), 8)
					var hs []string
					for _, ev := range evs {
						hs = append(hs, fmt.Sprintf("%s %s %d %v", ev.Type, ev.Owner, ev.Fence, ev.At.Format("05.000")))
					}
					t.Errorf("release: %v; mine %s %d %v; now %s %d; history %v", err, l.Owner, l.Fence, l.AcquiredAt.Format("05.000"), st.Owner, st.Fence, hs)
					return
				}
			}
		}()
	}
	wg.Wait()
	if violations.Load() != 0 {
		t.Fatalf("%d times two holders were inside at once", violations.Load())
	}
	if grants.Load() != 24*15 {
		t.Fatalf("grants = %d, want %d", grants.Load(), 24*15)
	}
}

func TestWakeUp(t *testing.T) {
	srv := redistest.Start(t)
	a := newEngine(t, srv.Client(t))
	b := newEngine(t, srv.Client(t)) // another lockd replica
	ctx := context.Background()

	tests := []struct {
		name   string
		waiter *lock.Engine
		ttl    time.Duration
		free   func(l lock.Lease) // nil: let the lease expire
		within time.Duration
	}{
		{"release, same process", a, 10 * time.Second, func(l lock.Lease) { _, _ = a.Release(ctx, l.Resource, l.Token, "t") }, time.Second},
		{"release through another process", b, 10 * time.Second, func(l lock.Lease) { _, _ = a.Release(ctx, l.Resource, l.Token, "t") }, time.Second},
		{"force-release", b, 10 * time.Second, func(l lock.Lease) { _, _ = a.ForceRelease(ctx, l.Resource, "ops", "") }, time.Second},
		{"expiry", b, 400 * time.Millisecond, nil, 1500 * time.Millisecond},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			key := fmt.Sprint("wake:", i)
			l := mustAcquire(t, a, lock.Lock(key), lock.AcquireRequest{TTL: tc.ttl})
			got := make(chan error, 1)
			go func() {
				_, err := tc.waiter.Acquire(ctx, lock.Lock(key), lock.AcquireRequest{Owner: "w", TTL: time.Second, Wait: 5 * time.Second})
				got <- err
			}()
			waitFor(t, func() bool { return tc.waiter.Waiters() == 1 })
			time.Sleep(20 * time.Millisecond) // let the subscription settle
			start := time.Now()
			if tc.free != nil {
				tc.free(l)
			}
			select {
			case err := <-got:
				if err != nil {
					t.Fatalf("waiter: %v", err)
				}
				t.Logf("woken %v after the key was freed", time.Since(start))
			case <-time.After(tc.within):
				t.Fatalf("waiter not woken within %v", tc.within)
			}
		})
	}
}

func TestWaitTimesOutWithHolder(t *testing.T) {
	e := newEngine(t, redistest.Start(t).Client(t))
	mustAcquire(t, e, lock.Lock("to:k"), lock.AcquireRequest{Owner: "holder", TTL: 10 * time.Second})
	start := time.Now()
	_, err := e.Acquire(context.Background(), lock.Lock("to:k"), lock.AcquireRequest{Owner: "w", TTL: time.Second, Wait: 300 * time.Millisecond})
	var held *lock.HeldError
	if !errors.As(err, &held) || held.Owner != "holder" || held.Remaining < 9*time.Second {
		t.Fatalf("err = %v", err)
	}
	if d := time.Since(start); d < 300*time.Millisecond || d > 2*time.Second {
		t.Fatalf("waited %v for a 300ms wait", d)
	}
	if e.Waiters() != 0 {
		t.Fatalf("waiters left: %d", e.Waiters())
	}
}

// A caller that goes away while waiting is never left holding the key.
func TestAbandonedWaiterHoldsNothing(t *testing.T) {
	e := newEngine(t, redistest.Start(t).Client(t))
	bg := context.Background()
	abandoned := 0 // the rounds that test something: the waiter left first
	for i := range 20 {
		key := fmt.Sprint("ab:", i)
		h := mustAcquire(t, e, lock.Lock(key), lock.AcquireRequest{TTL: 10 * time.Second})
		ctx, cancel := context.WithCancel(bg)
		done := make(chan error, 1)
		go func() {
			_, err := e.Acquire(ctx, lock.Lock(key), lock.AcquireRequest{Owner: "gone", TTL: 10 * time.Second, Wait: 5 * time.Second})
			done <- err
		}()
		waitFor(t, func() bool { return e.Waiters() == 1 })
		// Race the release against the cancellation.
		go func() { _, _ = e.Release(bg, lock.Lock(key), h.Token, "t") }()
		if i%2 == 0 {
			time.Sleep(time.Duration(i) * 100 * time.Microsecond)
		}
		cancel()
		err := <-done
		if err == nil {
			// Granted before the cancel was seen: that is a normal grant.
			continue
		}
		abandoned++
		waitFor(t, func() bool {
			_, err := e.State(bg, lock.Lock(key))
			return errors.Is(err, lock.ErrNotFound)
		})
	}
	// The early rounds cancel at once, before the release can be seen.
	if abandoned == 0 {
		t.Fatal("no round had the waiter leave before the grant: the test checked nothing")
	}
	t.Logf("%d of 20 waiters left before they were granted, none kept the key", abandoned)
}

func TestWaitersCountedAcrossProcesses(t *testing.T) {
	srv := redistest.Start(t)
	a := newEngine(t, srv.Client(t))
	b := newEngine(t, srv.Client(t))
	h := mustAcquire(t, a, lock.Lock("wc:k"), lock.AcquireRequest{TTL: 10 * time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e := a
			if i >= 2 {
				e = b
			}
			_, _ = e.Acquire(ctx, lock.Lock("wc:k"), lock.AcquireRequest{Owner: "w", TTL: time.Second, Wait: 10 * time.Second})
		}()
	}
	waitFor(t, func() bool {
		st, err := a.State(context.Background(), lock.Lock("wc:k"))
		return err == nil && st.Waiters == 5
	})
	cancel()
	wg.Wait()
	waitFor(t, func() bool {
		st, err := a.State(context.Background(), lock.Lock("wc:k"))
		return err == nil && st.Waiters == 0
	})
	_, _ = a.Release(context.Background(), lock.Lock("wc:k"), h.Token, "t")
}

func TestIdempotentAcquire(t *testing.T) {
	e := newEngine(t, redistest.Start(t).Client(t))
	ctx := context.Background()
	first := mustAcquire(t, e, lock.Lock("idem:k"), lock.AcquireRequest{IdempotencyKey: "delivery-1", Actor: "hook"})
	again := mustAcquire(t, e, lock.Lock("idem:k"), lock.AcquireRequest{IdempotencyKey: "delivery-1", Actor: "hook"})
	if again.Token != first.Token || again.Fence != first.Fence || again.Count != first.Count || again.Outcome != lock.Replayed {
		t.Fatalf("retry = %+v, first = %+v", again, first)
	}
	for _, req := range []lock.AcquireRequest{
		{Owner: "x", TTL: time.Second, IdempotencyKey: "delivery-1", Actor: "someone-else"},
		{Owner: "x", TTL: time.Second, IdempotencyKey: "delivery-2", Actor: "hook"},
		{Owner: "x", TTL: time.Second},
	} {
		if _, err := e.Acquire(ctx, lock.Lock("idem:k"), req); !errors.Is(err, lock.ErrHeld) {
			t.Fatalf("%+v: %v", req, err)
		}
	}
}

func TestListPagesEveryKeyOnce(t *testing.T) {
	e := newEngine(t, redistest.Start(t).Client(t))
	ctx := context.Background()
	want := map[string]bool{}
	for i := range 230 {
		k := fmt.Sprintf("list:%03d", i)
		mustAcquire(t, e, lock.Lock(k), lock.AcquireRequest{Owner: "o"})
		want[k] = true
	}
	mustAcquire(t, e, lock.Lock("other:1"), lock.AcquireRequest{})
	mustAcquire(t, e, lock.Lock("list*x"), lock.AcquireRequest{}) // '*' is not a key character, but must not act as a glob

	for _, limit := range []int{1, 7, 100, 1000} {
		seen := map[string]bool{}
		cursor, pages := "", 0
		for {
			p, err := e.List(ctx, lock.KindLock, "list:", limit, cursor)
			if err != nil {
				t.Fatal(err)
			}
			pages++
			if len(p.Locks) > limit {
				t.Fatalf("limit %d: page of %d", limit, len(p.Locks))
			}
			for _, s := range p.Locks {
				if seen[s.Resource.Name] {
					t.Fatalf("limit %d: %s returned twice", limit, s.Resource.Name)
				}
				if !want[s.Resource.Name] {
					t.Fatalf("limit %d: unexpected key %s", limit, s.Resource.Name)
				}
				seen[s.Resource.Name] = true
			}
			if p.NextCursor == "" {
				break
			}
			cursor = p.NextCursor
		}
		if len(seen) != len(want) {
			t.Fatalf("limit %d: saw %d keys of %d in %d pages", limit, len(seen), len(want), pages)
		}
	}
	if _, err := e.List(ctx, lock.KindLock, "", 10, "!!not-a-cursor"); !errors.Is(err, lock.ErrInvalidCursor) {
		t.Fatalf("bad cursor: %v", err)
	}
}

// The history keeps its story: 500 renewals go to their own capped list
// and never push out the lifecycle events; the history itself is capped.
func TestHistoryIsCapped(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	e := lock.New(rdb, lock.Options{HistoryMax: 20, RenewalsMax: 30, Retention: time.Hour})
	t.Cleanup(func() { _ = e.Close() })
	ctx := context.Background()
	l := mustAcquire(t, e, lock.Lock("cap:k"), lock.AcquireRequest{})
	for range 500 {
		if _, err := e.Renew(ctx, lock.Lock("cap:k"), lock.RenewRequest{Token: l.Token, TTL: 0, Actor: "t"}); err != nil {
			t.Fatal(err)
		}
	}
	evs, err := e.History(ctx, lock.Lock("cap:k"), 100)
	if err != nil || len(evs) != 1 || evs[0].Type != "acquired" {
		t.Fatalf("history after 500 renewals: %+v, %v; want just acquired", evs, err)
	}
	rs, err := e.Renewals(ctx, lock.Lock("cap:k"), 1000)
	if err != nil || len(rs) < 30 || len(rs) > 300 || rs[0].Type != "renewed" || rs[0].Left <= 0 || rs[0].Left > 30*time.Second {
		t.Fatalf("renewals: %d, newest %+v, %v; want about 30 with the time left", len(rs), rs[0], err)
	}
	for range 200 {
		l = mustAcquire(t, e, lock.Lock("cap:k"), lock.AcquireRequest{Token: l.Token})
		if _, err := e.Release(ctx, lock.Lock("cap:k"), l.Token, "t"); err != nil {
			t.Fatal(err)
		}
	}
	n, _ := rdb.LLen(ctx, lock.HistoryKey("cap:k")).Result()
	if n < 20 || n > 20+64 {
		t.Fatalf("history length %d, want 20 to 84 (its cap, and at most 64 more before a trim)", n)
	}
	if evs, err := e.History(ctx, lock.Lock("cap:k"), 1000); err != nil || len(evs) != 20 {
		t.Fatalf("history read with a limit of 1000: %d events, %v; want the cap, 20", len(evs), err)
	}
	ttl, _ := rdb.PTTL(ctx, lock.HistoryKey("cap:k")).Result()
	// The history outlives the lease's end (10 s here) by the retention,
	// and by at most a 24th of it more (it is extended once in a while,
	// not on every grant); it carries the fences (no counter of its own).
	if ttl <= time.Hour || ttl > time.Hour+10*time.Second+time.Hour/24 || rdb.Exists(ctx, "lockd:{cap:k}:fence").Val() != 0 {
		t.Fatalf("history TTL %v (want 1h + the 10 s lease + at most 2.5 min), fence counter %d (want none)", ttl, rdb.Exists(ctx, "lockd:{cap:k}:fence").Val())
	}
	evs, _ = e.History(ctx, lock.Lock("unknown:key"), 10)
	if len(evs) != 0 {
		t.Fatalf("unknown key history: %v", evs)
	}
}

// One Redis round trip per uncontended acquire, renew and release, counted
// both by the client (a hook) and by Redis (INFO commandstats).
func TestOneRoundTripPerOperation(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	sent := &redistest.Counter{}
	rdb.AddHook(sent)
	e := newEngine(t, rdb)
	admin := srv.Client(t)
	ctx := context.Background()

	// Load the scripts once, as a running server has.
	l := mustAcquire(t, e, lock.Lock("rt:warm"), lock.AcquireRequest{})
	_, _ = e.Renew(ctx, lock.Lock("rt:warm"), lock.RenewRequest{Token: l.Token, TTL: 0, Actor: "t"})
	_, _ = e.Release(ctx, lock.Lock("rt:warm"), l.Token, "t")
	mustAcquire(t, e, lock.Lock("rt:warm"), lock.AcquireRequest{})
	_, _ = e.ForceRelease(ctx, lock.Lock("rt:warm"), "t", "")

	var lease lock.Lease
	ops := []struct {
		name string
		run  func() error
	}{
		{"acquire", func() (err error) {
			lease, err = e.Acquire(ctx, lock.Lock("rt:k"), lock.AcquireRequest{Owner: "o", TTL: 10 * time.Second})
			return err
		}},
		{"renew", func() error {
			_, err := e.Renew(ctx, lock.Lock("rt:k"), lock.RenewRequest{Token: lease.Token, TTL: 0, Actor: "t"})
			return err
		}},
		{"release", func() error { _, err := e.Release(ctx, lock.Lock("rt:k"), lease.Token, "t"); return err }},
		{"force-release", func() error {
			if _, err := e.Acquire(ctx, lock.Lock("rt:f"), lock.AcquireRequest{Owner: "o", TTL: time.Second}); err != nil {
				return err
			}
			sent.Commands.Store(0)
			if err := admin.ConfigResetStat(ctx).Err(); err != nil {
				return err
			}
			_, err := e.ForceRelease(ctx, lock.Lock("rt:f"), "ops", "")
			return err
		}},
	}
	for _, op := range ops {
		if err := admin.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		sent.Commands.Store(0)
		if err := op.run(); err != nil {
			t.Fatalf("%s: %v", op.name, err)
		}
		stats := commandStats(t, admin)
		// One FCALL: the scripts run as Redis Functions (store.Functions).
		if sent.Commands.Load() != 1 || stats["fcall"] != 1 || stats["evalsha"] != 0 || stats["eval"] != 0 {
			t.Fatalf("%s: client sent %d commands; Redis counted fcall=%d evalsha=%d eval=%d",
				op.name, sent.Commands.Load(), stats["fcall"], stats["evalsha"], stats["eval"])
		}
	}
}

// A server that lost its functions (a restart without persistence, a
// FUNCTION FLUSH, a node new to a Cluster) gets the library again on the
// first call that misses it, and the call is answered.
func TestFunctionsLoadedAgain(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	e := newEngine(t, srv.Client(t))
	ctx := context.Background()
	mustAcquire(t, e, lock.Lock("fn:a"), lock.AcquireRequest{})
	if err := admin.FunctionFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	l := mustAcquire(t, e, lock.Lock("fn:b"), lock.AcquireRequest{})
	if _, err := e.Release(ctx, lock.Lock("fn:b"), l.Token, "t"); err != nil {
		t.Fatal(err)
	}
	stats := commandStats(t, admin)
	if stats["function|load"] != 1 || stats["fcall"] != 3 || stats["evalsha"] != 0 {
		t.Fatalf("after FUNCTION FLUSH: %v; want one FUNCTION LOAD and 3 FCALLs (the miss, its retry, the release)", stats)
	}
}

// commandStats reads INFO commandstats as command → calls.
func commandStats(t *testing.T, c *redis.Client) map[string]int {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		var calls int
		fmt.Sscanf(rest, "calls=%d", &calls)
		out[strings.TrimPrefix(name, "cmdstat_")] = calls
	}
	return out
}

func TestRedisDownIsUnavailable(t *testing.T) {
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, DialTimeout: 300 * time.Millisecond,
		ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond, MaxRetries: 1})
	t.Cleanup(func() { _ = rdb.Close() })
	e := newEngine(t, rdb)
	mustAcquire(t, e, lock.Lock("down:k"), lock.AcquireRequest{TTL: 500 * time.Millisecond})
	srv.Stop()
	start := time.Now()
	_, err := e.Acquire(context.Background(), lock.Lock("down:k2"), lock.AcquireRequest{Owner: "o", TTL: time.Second})
	if !errors.Is(err, lock.ErrUnavailable) {
		t.Fatalf("acquire with Redis down: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("took %v to say unavailable", d)
	}
	// Redis came back empty: the restart quarantine (as long as the
	// longest lease granted, 500 ms) ends by itself.
	srv.Restart()
	waitFor(t, func() bool {
		_, err := e.Acquire(context.Background(), lock.Lock("down:k3"), lock.AcquireRequest{Owner: "o", TTL: time.Second})
		return err == nil
	})
}

func TestForceReleaseOnlyTheFenceSeen(t *testing.T) {
	e := newEngine(t, redistest.Start(t).Client(t))
	ctx := context.Background()
	first := mustAcquire(t, e, lock.Lock("fr:k"), lock.AcquireRequest{Owner: "first"})
	if _, err := e.ForceReleaseFence(ctx, lock.Lock("fr:k"), first.Fence, "ops", "seen"); err != nil {
		t.Fatal(err)
	}
	second := mustAcquire(t, e, lock.Lock("fr:k"), lock.AcquireRequest{Owner: "second"})
	// A second confirmation of the first holder's page must not break the second holder.
	if _, err := e.ForceReleaseFence(ctx, lock.Lock("fr:k"), first.Fence, "ops", "stale page"); !errors.Is(err, lock.ErrLeaseLost) {
		t.Fatalf("force-release with a stale fence: %v", err)
	}
	if st, err := e.State(ctx, lock.Lock("fr:k")); err != nil || st.Fence != second.Fence {
		t.Fatalf("second lease after a stale force-release: %+v %v", st, err)
	}
}

func TestWaiterCaps(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	e := lock.New(rdb, lock.Options{MaxWaiters: 3, MaxWaitersPerKey: 2})
	t.Cleanup(func() { _ = e.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wait := func(key string) chan error {
		c := make(chan error, 1)
		go func() {
			_, err := e.Acquire(ctx, lock.Lock(key), lock.AcquireRequest{Owner: "w", TTL: time.Second, Wait: 10 * time.Second})
			c <- err
		}()
		return c
	}
	mustAcquire(t, e, lock.Lock("cap:a"), lock.AcquireRequest{})
	mustAcquire(t, e, lock.Lock("cap:b"), lock.AcquireRequest{})
	wait("cap:a")
	wait("cap:a")
	waitFor(t, func() bool { return e.Waiters() == 2 })
	if err := <-wait("cap:a"); !errors.Is(err, lock.ErrTooManyWaiters) {
		t.Fatalf("third waiter on one key: %v", err)
	}
	wait("cap:b")
	waitFor(t, func() bool { return e.Waiters() == 3 })
	if err := <-wait("cap:b"); !errors.Is(err, lock.ErrTooManyWaiters) {
		t.Fatalf("fourth waiter in all: %v", err)
	}
	// Trying once is never capped.
	if _, err := e.Acquire(context.Background(), lock.Lock("cap:b"), lock.AcquireRequest{Owner: "x", TTL: time.Second}); !errors.Is(err, lock.ErrHeld) {
		t.Fatalf("try-once: %v", err)
	}
}
