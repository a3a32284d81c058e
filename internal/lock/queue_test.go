package lock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/redistest"
)

// queueUp starts a waiter on e and returns once the key's queue in Redis
// has n entries: its grant (or error) arrives on the channel.
func queueUp(t *testing.T, e *lock.Engine, res lock.Resource, req lock.AcquireRequest, n int) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		l, err := e.Acquire(context.Background(), res, req)
		if err == nil && l.Owner != req.Owner {
			err = fmt.Errorf("granted to %q", l.Owner)
		}
		done <- err
	}()
	waitFor(t, func() bool {
		st, err := e.State(context.Background(), res)
		return err == nil && len(st.Queue) == n
	})
	return done
}

// Waiters are granted in the order they began to wait, whichever replica
// they came through, and the state shows the queue in that order.
func TestQueueIsFIFOAcrossReplicas(t *testing.T) {
	srv := redistest.Start(t)
	engines := []*lock.Engine{newEngine(t, srv.Client(t)), newEngine(t, srv.Client(t))}
	ctx := context.Background()
	const key, n = "fifo:k", 8
	holder := mustAcquire(t, engines[0], lock.Lock(key), lock.AcquireRequest{Owner: "holder", TTL: time.Minute})

	type grant struct {
		who   int
		lease lock.Lease
	}
	granted := make(chan grant, n)
	for i := range n {
		// Alternate replicas, so that local order alone cannot explain the
		// result.
		e := engines[(i*7/3)%2]
		go func() {
			l, err := e.Acquire(ctx, lock.Lock(key), lock.AcquireRequest{Owner: fmt.Sprint("w", i), TTL: time.Minute, Wait: 30 * time.Second})
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				return
			}
			granted <- grant{i, l}
		}()
		waitFor(t, func() bool {
			st, err := e.State(ctx, lock.Lock(key))
			return err == nil && len(st.Queue) == i+1
		})
	}
	st, err := engines[1].State(ctx, lock.Lock(key))
	if err != nil {
		t.Fatal(err)
	}
	for i, q := range st.Queue {
		if q.Owner != fmt.Sprint("w", i) || q.Mode != lock.Exclusive || q.WaitingSince.IsZero() {
			t.Fatalf("queue[%d] = %+v, want w%d exclusive", i, q, i)
		}
	}
	if st.Waiters != n {
		t.Fatalf("waiters = %d, want %d", st.Waiters, n)
	}

	_, _ = engines[0].Release(ctx, lock.Lock(key), holder.Token, "t")
	for i := range n {
		g := <-granted
		if g.who != i {
			t.Fatalf("grant %d went to waiter %d", i, g.who)
		}
		// Every waiter still queued is behind the holder now.
		st, err := engines[0].State(ctx, lock.Lock(key))
		if err != nil || len(st.Queue) != n-1-i {
			t.Fatalf("after grant %d: queue %+v (%v)", i, st.Queue, err)
		}
		if _, err := engines[g.who%2].Release(ctx, lock.Lock(key), g.lease.Token, "t"); err != nil {
			t.Fatal(err)
		}
	}
}

// A try-once acquire never jumps the queue, and a waiter that gives up
// leaves it at once.
func TestQueueTryOnceAndLeaving(t *testing.T) {
	srv := redistest.Start(t)
	e := newEngine(t, srv.Client(t))
	ctx := context.Background()
	h := mustAcquire(t, e, lock.Lock("fifo:once"), lock.AcquireRequest{TTL: time.Minute})
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := e.Acquire(wctx, lock.Lock("fifo:once"), lock.AcquireRequest{Owner: "patient", TTL: time.Minute, Wait: 30 * time.Second})
		done <- err
	}()
	waitFor(t, func() bool {
		st, err := e.State(ctx, lock.Lock("fifo:once"))
		return err == nil && len(st.Queue) == 1
	})
	_, _ = e.Release(ctx, lock.Lock("fifo:once"), h.Token, "t")
	// The waiter is granted; a try-once request behind it is not.
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	st, _ := e.State(ctx, lock.Lock("fifo:once"))
	if st.Owner != "patient" {
		t.Fatalf("owner = %q, want the waiter", st.Owner)
	}

	// Now queue one and cancel it: the queue is empty again, and a
	// try-once request gets the key once it is free.
	go func() {
		_, err := e.Acquire(wctx, lock.Lock("fifo:once"), lock.AcquireRequest{Owner: "leaver", TTL: time.Minute, Wait: 30 * time.Second})
		done <- err
	}()
	waitFor(t, func() bool {
		st, err := e.State(ctx, lock.Lock("fifo:once"))
		return err == nil && len(st.Queue) == 1
	})
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled waiter: %v", err)
	}
	waitFor(t, func() bool {
		st, err := e.State(ctx, lock.Lock("fifo:once"))
		return err == nil && len(st.Queue) == 0
	})
	_, _ = e.ForceReleaseFence(ctx, lock.Lock("fifo:once"), 0, "t", "")
	mustAcquire(t, e, lock.Lock("fifo:once"), lock.AcquireRequest{})
}

// TestQueueHelperProcess is not a test: it is the replica that
// TestDeadReplicaLeavesQueue kills and TestQueuedIsNotHeld stops. It waits
// for a key (LOCKD_QUEUE_KEY, default dead:k) and never returns.
func TestQueueHelperProcess(t *testing.T) {
	addr := os.Getenv("LOCKD_QUEUE_HELPER")
	if addr == "" {
		t.Skip("only run by TestDeadReplicaLeavesQueue")
	}
	key := os.Getenv("LOCKD_QUEUE_KEY")
	if key == "" {
		key = "dead:k"
	}
	e := lock.New(redis.NewClient(&redis.Options{Addr: addr}), lock.Options{})
	_, err := e.Acquire(context.Background(), lock.Lock(key), lock.AcquireRequest{Owner: "doomed", TTL: time.Minute, Wait: time.Minute})
	t.Fatalf("the helper was to be killed while waiting, got %v", err)
}

// A waiter whose replica dies (SIGKILL: no goodbye) leaves the queue within
// 2 s, and the waiter behind it gets the key.
func TestDeadReplicaLeavesQueue(t *testing.T) {
	srv := redistest.Start(t)
	e := newEngine(t, srv.Client(t))
	ctx := context.Background()
	h := mustAcquire(t, e, lock.Lock("dead:k"), lock.AcquireRequest{Owner: "holder", TTL: time.Minute})

	cmd := exec.Command(os.Args[0], "-test.run=^TestQueueHelperProcess$")
	cmd.Env = append(os.Environ(), "LOCKD_QUEUE_HELPER="+srv.Addr)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	waitFor(t, func() bool {
		st, err := e.State(ctx, lock.Lock("dead:k"))
		return err == nil && len(st.Queue) == 1 && st.Queue[0].Owner == "doomed"
	})
	// The helper tries once more when Redis confirms its subscription to
	// the key's wake-ups (wait.Hub): were that try sent before the kill and
	// run after the release, the dead waiter would be granted the key, as
	// the first in the queue. Under load it came that late; let it come
	// before the kill.
	waitFor(t, func() bool {
		n, err := srv.Client(t).PubSubNumSub(ctx, lock.WakeChannel("dead:k")).Result()
		return err == nil && n[lock.WakeChannel("dead:k")] == 1
	})
	time.Sleep(200 * time.Millisecond)
	done := queueUp(t, e, lock.Lock("dead:k"), lock.AcquireRequest{Owner: "behind", TTL: time.Minute, Wait: 30 * time.Second}, 2)

	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	_, _ = e.Release(ctx, lock.Lock("dead:k"), h.Token, "t")
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	took := time.Since(killed)
	t.Logf("the dead replica's waiter left the queue; the next waiter was granted %v after the kill", took.Round(time.Millisecond))
	if took > 2*time.Second {
		t.Fatalf("the next waiter waited %v after the kill, want at most 2 s", took)
	}
}

// Shared holders hold together; an exclusive request waits for all of
// them, and a shared request that comes after it waits behind it.
func TestSharedAndExclusive(t *testing.T) {
	srv := redistest.Start(t)
	a, b := newEngine(t, srv.Client(t)), newEngine(t, srv.Client(t))
	ctx := context.Background()
	const key = "rw:k"
	r1 := mustAcquire(t, a, lock.Lock(key), lock.AcquireRequest{Owner: "r1", Mode: lock.Shared, TTL: time.Minute})
	r2 := mustAcquire(t, b, lock.Lock(key), lock.AcquireRequest{Owner: "r2", Mode: lock.Shared, TTL: time.Minute})
	if r1.Token == r2.Token || r2.Fence <= r1.Fence || r1.Mode != lock.Shared {
		t.Fatalf("shared holders: %+v %+v", r1, r2)
	}
	if _, err := a.Acquire(ctx, lock.Lock(key), lock.AcquireRequest{Owner: "x", TTL: time.Minute}); !errors.Is(err, lock.ErrHeld) {
		t.Fatalf("exclusive try while shared held: %v", err)
	}
	st, err := a.State(ctx, lock.Lock(key))
	if err != nil || st.Mode != lock.Shared || len(st.Holders) != 2 || st.Owner != "r2" || st.Fence != r2.Fence {
		t.Fatalf("state: %+v (%v)", st, err)
	}

	writer := queueUp(t, a, lock.Lock(key), lock.AcquireRequest{Owner: "writer", TTL: time.Minute, Wait: 30 * time.Second}, 1)
	// No writer starvation: a reader after the writer waits.
	reader := queueUp(t, b, lock.Lock(key), lock.AcquireRequest{Owner: "late", Mode: lock.Shared, TTL: time.Minute, Wait: 30 * time.Second}, 2)
	// The key is shared by readers, but kept for the writer first: the
	// answer says queued, naming no holder.
	if _, err := b.Acquire(ctx, lock.Lock(key), lock.AcquireRequest{Owner: "once", Mode: lock.Shared, TTL: time.Minute}); !errors.Is(err, lock.ErrQueued) {
		t.Fatalf("shared try-once behind a waiting writer: %v", err)
	}

	// Per holder: renew one, re-enter it, release the other.
	if l, err := a.Renew(ctx, lock.Lock(key), lock.RenewRequest{Token: r1.Token, TTL: 2 * time.Minute, Actor: "t"}); err != nil || l.Fence != r1.Fence || l.TTL != 2*time.Minute || l.Mode != lock.Shared {
		t.Fatalf("renew r1: %+v %v", l, err)
	}
	if l, err := a.Acquire(ctx, lock.Lock(key), lock.AcquireRequest{Owner: "r1", Mode: lock.Shared, TTL: time.Minute, Token: r1.Token}); err != nil || l.Count != 2 || l.Outcome != lock.Reentered {
		t.Fatalf("re-enter r1: %+v %v", l, err)
	}
	if _, err := b.Release(ctx, lock.Lock(key), r2.Token, "t"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Release(ctx, lock.Lock(key), r2.Token, "t"); !errors.Is(err, lock.ErrLeaseLost) {
		t.Fatalf("second release of r2: %v", err)
	}
	select {
	case err := <-writer:
		t.Fatalf("the writer got in while r1 holds: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	for range 2 { // r1 holds two levels
		if _, err := a.Release(ctx, lock.Lock(key), r1.Token, "t"); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-writer; err != nil {
		t.Fatal(err)
	}
	st, _ = a.State(ctx, lock.Lock(key))
	if st.Mode != lock.Exclusive || st.Owner != "writer" || len(st.Queue) != 1 || st.Queue[0].Mode != lock.Shared {
		t.Fatalf("after the readers: %+v", st)
	}
	if _, err := a.ForceReleaseFence(ctx, lock.Lock(key), 0, "admin", "test"); err != nil {
		t.Fatal(err)
	}
	if err := <-reader; err != nil {
		t.Fatal(err)
	}
}

// Force-release breaks one shared holder by its fence, or all of them.
func TestForceReleaseSharedHolders(t *testing.T) {
	srv := redistest.Start(t)
	e := newEngine(t, srv.Client(t))
	ctx := context.Background()
	const key = "rw:force"
	var ls []lock.Lease
	for i := range 3 {
		ls = append(ls, mustAcquire(t, e, lock.Lock(key), lock.AcquireRequest{Owner: fmt.Sprint("r", i), Mode: lock.Shared}))
	}
	br, err := e.ForceReleaseFence(ctx, lock.Lock(key), ls[1].Fence, "admin", "one")
	if err != nil || br.Owner != "r1" || br.Fence != ls[1].Fence {
		t.Fatalf("break r1: %+v %v", br, err)
	}
	if _, err := e.Renew(ctx, lock.Lock(key), lock.RenewRequest{Token: ls[1].Token, TTL: 0, Actor: "t"}); !errors.Is(err, lock.ErrLeaseLost) {
		t.Fatalf("renew of the broken holder: %v", err)
	}
	if _, err := e.ForceReleaseFence(ctx, lock.Lock(key), ls[1].Fence, "admin", "again"); !errors.Is(err, lock.ErrLeaseLost) {
		t.Fatalf("break a gone fence: %v", err)
	}
	st, _ := e.State(ctx, lock.Lock(key))
	if len(st.Holders) != 2 || st.Holders[0].Owner != "r0" || st.Holders[1].Owner != "r2" {
		t.Fatalf("holders: %+v", st.Holders)
	}
	if br, err := e.ForceReleaseFence(ctx, lock.Lock(key), 0, "admin", "all"); err != nil || br.Owner != "r2" {
		t.Fatalf("break all: %+v %v", br, err)
	}
	if _, err := e.State(ctx, lock.Lock(key)); !errors.Is(err, lock.ErrNotFound) {
		t.Fatalf("state after breaking all: %v", err)
	}
	evs, _ := e.History(ctx, lock.Lock(key), 10)
	if got := eventTypes(evs); got != "acquired acquired acquired force_released force_released force_released" {
		t.Fatalf("history: %s", got)
	}
	mustAcquire(t, e, lock.Lock(key), lock.AcquireRequest{Owner: "x"})
}

// A semaphore never has more than its limit of permits held, under
// contention from two replicas.
func TestSemaphoreNeverOverLimit(t *testing.T) {
	srv := redistest.Start(t)
	engines := []*lock.Engine{newEngine(t, srv.Client(t)), newEngine(t, srv.Client(t))}
	key := lock.Semaphore("pool")
	const limit = 3
	var inside, most, grants atomic.Int64
	var wg sync.WaitGroup
	stop := time.Now().Add(2 * time.Second)
	for g := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e := engines[g%2]
			for time.Now().Before(stop) {
				l, err := e.Acquire(context.Background(), key, lock.AcquireRequest{
					Owner: fmt.Sprint("g", g), TTL: 5 * time.Second, Wait: 10 * time.Second, Limit: limit,
				})

				if err != nil {
					t.Errorf("acquire: %v", err)
					return
				}
				n := inside.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				grants.Add(1)
				time.Sleep(2 * time.Millisecond)
				inside.Add(-1)
				if _, err := e.Release(context.Background(), key, l.Token, "t"); err != nil {
					t.Errorf("release: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("%d permits granted, at most %d held at once", grants.Load(), most.Load())
	if most.Load() > limit {
		t.Fatalf("%d permits held at once, limit %d", most.Load(), limit)
	}
	if most.Load() < 2 {
		t.Fatalf("never more than %d permit held at once: the semaphore acts as a lock", most.Load())
	}
}

// A semaphore's limit is its holders'; no free permit is ErrHeld; a
// permit that expires frees its slot for a waiter.
func TestSemaphoreLimitAndExpiry(t *testing.T) {
	srv := redistest.Start(t)
	e := newEngine(t, srv.Client(t))
	ctx := context.Background()
	key := lock.Semaphore("jobs")
	p1 := mustAcquire(t, e, key, lock.AcquireRequest{Owner: "a", Limit: 2, TTL: 300 * time.Millisecond})
	p2 := mustAcquire(t, e, key, lock.AcquireRequest{Owner: "b", Limit: 2, TTL: time.Minute})
	if p1.Mode != lock.Permit || p1.Limit != 2 || p1.Fence >= p2.Fence {
		t.Fatalf("permits: %+v %+v", p1, p2)
	}
	if l, err := e.Renew(ctx, key, lock.RenewRequest{Token: p2.Token, TTL: 0, Actor: "t"}); err != nil || l.Mode != lock.Permit || l.Limit != 2 || l.Fence != p2.Fence {
		t.Fatalf("renewed permit: %+v %v", l, err)
	}
	if _, err := e.Acquire(ctx, key, lock.AcquireRequest{Owner: "c", Limit: 3}); !errors.Is(err, lock.ErrLimitMismatch) {
		t.Fatalf("another limit: %v", err)
	}
	var held *lock.HeldError
	if _, err := e.Acquire(ctx, key, lock.AcquireRequest{Owner: "c", Limit: 2}); !errors.As(err, &held) || held.Remaining > 300*time.Millisecond {
		t.Fatalf("full semaphore: %v", err)
	}
	st, err := e.State(ctx, key)
	if err != nil || st.Mode != lock.Permit || st.Limit != 2 || len(st.Holders) != 2 {
		t.Fatalf("state: %+v %v", st, err)
	}
	// The first permit is never released: its expiry lets the waiter in.
	start := time.Now()
	l, err := e.Acquire(ctx, key, lock.AcquireRequest{Owner: "c", Limit: 2, TTL: time.Minute, Wait: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(start); waited > 2*time.Second {
		t.Fatalf("waited %v for an expired permit", waited)
	}
	if _, err := e.Release(ctx, key, p1.Token, "t"); !errors.Is(err, lock.ErrLeaseLost) {
		t.Fatalf("release of the expired permit: %v", err)
	}
	evs, _ := e.History(ctx, key, 10)
	if !strings.Contains(eventTypes(evs), "expired") {
		t.Fatalf("no expiry in the history: %s", eventTypes(evs))
	}
	_, _ = e.Release(ctx, key, l.Token, "t")
	_, _ = e.Release(ctx, key, p2.Token, "t")
	if _, err := e.State(ctx, key); !errors.Is(err, lock.ErrNotFound) {
		t.Fatalf("state of an empty semaphore: %v", err)
	}
	// Empty, it takes a new limit; a lock of the same name is another key.
	mustAcquire(t, e, key, lock.AcquireRequest{Limit: 5})
	mustAcquire(t, e, lock.Lock("jobs"), lock.AcquireRequest{})
	page, err := e.List(ctx, lock.KindSemaphore, "", 10, "")
	if err != nil || len(page.Locks) != 1 || page.Locks[0].Resource != key {
		t.Fatalf("semaphores: %+v %v", page, err)
	}
	page, err = e.List(ctx, lock.KindLock, "", 10, "")
	if err != nil || len(page.Locks) != 1 || page.Locks[0].Resource != lock.Lock("jobs") {
		t.Fatalf("locks: %+v %v", page, err)
	}
}

// TestPrimitives runs runPrimitives on real Redis and on the embedded store.
func TestPrimitives(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			c := b.open(t)
			runPrimitives(t, newEngine(t, c), newEngine(t, c))
		})
	}
}

// runPrimitives checks, through two engines on one store, the queue's order,
// shared holds and a semaphore; the topology tests run it on Sentinel and
// Cluster too.
func runPrimitives(t *testing.T, a, b *lock.Engine) {
	t.Helper()
	ctx := context.Background()
	h := mustAcquire(t, a, lock.Lock("prim:k"), lock.AcquireRequest{Owner: "h", TTL: time.Minute})
	w1 := queueUp(t, b, lock.Lock("prim:k"), lock.AcquireRequest{Owner: "w1", Mode: lock.Shared, TTL: time.Minute, Wait: 20 * time.Second}, 1)
	w2 := queueUp(t, a, lock.Lock("prim:k"), lock.AcquireRequest{Owner: "w2", Mode: lock.Shared, TTL: time.Minute, Wait: 20 * time.Second}, 2)
	w3 := queueUp(t, b, lock.Lock("prim:k"), lock.AcquireRequest{Owner: "w3", TTL: time.Minute, Wait: 20 * time.Second}, 3)
	if _, err := a.Release(ctx, lock.Lock("prim:k"), h.Token, "t"); err != nil {
		t.Fatal(err)
	}
	// Both readers are granted together; the writer behind them waits.
	for _, w := range []<-chan error{w1, w2} {
		if err := <-w; err != nil {
			t.Fatal(err)
		}
	}
	st, err := a.State(ctx, lock.Lock("prim:k"))
	if err != nil || st.Mode != lock.Shared || len(st.Holders) != 2 || len(st.Queue) != 1 || st.Queue[0].Owner != "w3" {
		t.Fatalf("state: %+v %v", st, err)
	}
	if _, err := a.ForceReleaseFence(ctx, lock.Lock("prim:k"), 0, "t", ""); err != nil {
		t.Fatal(err)
	}
	if err := <-w3; err != nil {
		t.Fatal(err)
	}
	_, _ = a.ForceReleaseFence(ctx, lock.Lock("prim:k"), 0, "t", "")

	sem := lock.Semaphore("prim")
	p1 := mustAcquire(t, a, sem, lock.AcquireRequest{Owner: "p1", Limit: 2})
	mustAcquire(t, b, sem, lock.AcquireRequest{Owner: "p2", Limit: 2})
	p3 := queueUp(t, b, sem, lock.AcquireRequest{Owner: "p3", Limit: 2, TTL: time.Minute, Wait: 20 * time.Second}, 1)
	if _, err := a.Release(ctx, sem, p1.Token, "t"); err != nil {
		t.Fatal(err)
	}
	if err := <-p3; err != nil {
		t.Fatal(err)
	}
	st, err = b.State(ctx, sem)
	if err != nil || st.Mode != lock.Permit || st.Limit != 2 || len(st.Holders) != 2 {
		t.Fatalf("semaphore state: %+v %v", st, err)
	}
	_, _ = a.ForceReleaseFence(ctx, sem, 0, "t", "")
}

// A release hands the key to the next waiter at once when it waits in the
// same lockd: the waiter is answered with no Redis call of its own.
func TestReleaseHandsOffLocally(t *testing.T) {
	srv := redistest.Start(t)
	// Calls outside pipelines: every engine operation is one; the
	// liveness of the process is a pipeline.
	calls := &redistest.Counter{}
	c := srv.Client(t)
	c.AddHook(calls)
	e := lock.New(c, lock.Options{NoSweep: true, EpochRefresh: time.Hour})
	t.Cleanup(func() { _ = e.Close() })
	ctx := context.Background()
	// Load the release script first: a first EVALSHA is NOSCRIPT, then EVAL.
	warm := mustAcquire(t, e, lock.Lock("handoff:warm"), lock.AcquireRequest{})
	_, _ = e.Release(ctx, lock.Lock("handoff:warm"), warm.Token, "t")
	h := mustAcquire(t, e, lock.Lock("handoff:k"), lock.AcquireRequest{Owner: "h", TTL: time.Minute})
	got := make(chan lock.Lease, 1)
	go func() {
		l, err := e.Acquire(ctx, lock.Lock("handoff:k"), lock.AcquireRequest{Owner: "next", TTL: 30 * time.Second, Wait: 20 * time.Second})
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitFor(t, func() bool {
		st, err := e.State(ctx, lock.Lock("handoff:k"))
		return err == nil && len(st.Queue) == 1
	})
	// The waiter's queue tries once more when Redis confirms its
	// subscription; let that pass.
	time.Sleep(200 * time.Millisecond)
	before := calls.Singles.Load()
	if _, err := e.Release(ctx, lock.Lock("handoff:k"), h.Token, "t"); err != nil {
		t.Fatal(err)
	}
	l := <-got
	n := calls.Singles.Load() - before
	if l.Owner != "next" || l.Fence <= h.Fence || l.TTL != 30*time.Second || l.Count != 1 || l.Token == "" {
		t.Fatalf("handed lease: %+v", l)
	}
	if n != 1 {
		t.Fatalf("%d Redis calls from the release to the grant, want 1 (the release)", n)
	}
	st, err := e.State(ctx, lock.Lock("handoff:k"))
	if err != nil || st.Owner != "next" || st.Fence != l.Fence || len(st.Queue) != 0 {
		t.Fatalf("state: %+v %v", st, err)
	}
	if _, err := e.Renew(ctx, lock.Lock("handoff:k"), lock.RenewRequest{Token: l.Token, TTL: 0, Actor: "t"}); err != nil {
		t.Fatalf("renew the handed lease: %v", err)
	}
	evs, _ := e.History(ctx, lock.Lock("handoff:k"), 10)
	if got := eventTypes(evs); got != "acquired released acquired" {
		t.Fatalf("history: %s", got)
	}
}

// A key that nobody holds but that is kept for an earlier waiter is not
// "held": a try-once acquire answers ErrQueued with the queue's length and
// its first waiter, never ErrHeld naming the waiter as holder. The waiter's
// replica is stopped (SIGSTOP) so that the key stays free and kept.
func TestQueuedIsNotHeld(t *testing.T) {
	srv := redistest.Start(t)
	e := newEngine(t, srv.Client(t))
	ctx := context.Background()
	const key = "q409:k"
	h := mustAcquire(t, e, lock.Lock(key), lock.AcquireRequest{Owner: "holder", TTL: time.Minute})
	if _, err := e.Acquire(ctx, lock.Lock(key), lock.AcquireRequest{Owner: "other", TTL: time.Second}); !errors.Is(err, lock.ErrHeld) {
		t.Fatalf("try-once on a held key: %v, want ErrHeld", err)
	}

	cmd := exec.Command(os.Args[0], "-test.run=^TestQueueHelperProcess$")
	cmd.Env = append(os.Environ(), "LOCKD_QUEUE_HELPER="+srv.Addr, "LOCKD_QUEUE_KEY="+key)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	waitFor(t, func() bool {
		st, err := e.State(ctx, lock.Lock(key))
		return err == nil && len(st.Queue) == 1 && st.Queue[0].Owner == "doomed"
	})
	redistest.StopProcess(t, cmd.Process)
	// A try the helper wrote just before it stopped must run before the
	// release, not after it (Redis serves the sockets that are ready in
	// one turn of its loop in no set order): one round trip after the
	// stop lets Redis read everything that was written before it.
	if err := srv.Client(t).Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Release(ctx, lock.Lock(key), h.Token, "t"); err != nil {
		t.Fatal(err)
	}
	_, err := e.Acquire(ctx, lock.Lock(key), lock.AcquireRequest{Owner: "other", TTL: time.Second})
	var queued *lock.QueuedError
	if !errors.As(err, &queued) || errors.Is(err, lock.ErrHeld) {
		t.Fatalf("try-once on a free key kept for a waiter: %v, want a QueuedError", err)
	}
	if queued.Waiters != 1 || queued.Next.Owner != "doomed" || queued.Next.Since.IsZero() ||
		queued.RetryAfter <= 0 || queued.RetryAfter > 1600*time.Millisecond {
		t.Fatalf("queued = %+v, want 1 waiter, next doomed, retry within the 1.6 s liveness", *queued)
	}
	t.Logf("%v", err)
	// The stopped replica's entry lapses: the key is granted.
	got := retryQueued(t, func() (lock.Lease, error) {
		return e.Acquire(ctx, lock.Lock(key), lock.AcquireRequest{Owner: "other", TTL: time.Second})
	})
	if got.Owner != "other" {
		t.Fatalf("owner %q", got.Owner)
	}
}

// retryQueued repeats op while it answers ErrQueued, for up to 5 s.
func retryQueued(t *testing.T, op func() (lock.Lease, error)) lock.Lease {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		l, err := op()
		if err == nil {
			return l
		}
		if !errors.Is(err, lock.ErrQueued) || time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A grant's answer describes the lease Redis holds, never the request: a
// re-entry or replay without a mode takes the lease's mode and limit, one
// that names another is refused before anything is written.
func TestGrantAnswersTheLeaseHeld(t *testing.T) {
	srv := redistest.Start(t)
	e := newEngine(t, srv.Client(t))
	ctx := context.Background()
	key := lock.Lock("held:as")
	r1 := mustAcquire(t, e, key, lock.AcquireRequest{Owner: "r1", Mode: lock.Shared, TTL: time.Minute, IdempotencyKey: "d1"})
	mustAcquire(t, e, key, lock.AcquireRequest{Owner: "r2", Mode: lock.Shared, TTL: time.Minute})
	sem := lock.Semaphore("held")
	p := mustAcquire(t, e, sem, lock.AcquireRequest{Owner: "p", Limit: 2, TTL: time.Minute, IdempotencyKey: "d2"})
	x := mustAcquire(t, e, lock.Lock("held:x"), lock.AcquireRequest{Owner: "x", TTL: time.Minute, IdempotencyKey: "d3"})

	tests := []struct {
		name      string
		key       lock.Resource
		req       lock.AcquireRequest
		err       error
		mode      lock.Mode
		limit     int
		outcome   lock.Outcome
		countLeft int // the holder's count after the call
	}{
		{"shared re-entry naming exclusive", key, lock.AcquireRequest{Token: r1.Token, Mode: lock.Exclusive}, lock.ErrModeMismatch, "", 0, "", 1},
		{"shared re-entry without a mode", key, lock.AcquireRequest{Token: r1.Token}, nil, lock.Shared, 0, lock.Reentered, 2},
		{"shared replay without a mode", key, lock.AcquireRequest{Owner: "r1", IdempotencyKey: "d1"}, nil, lock.Shared, 0, lock.Replayed, 2},
		{"shared replay naming exclusive", key, lock.AcquireRequest{Owner: "r1", Mode: lock.Exclusive, IdempotencyKey: "d1"}, lock.ErrIdempotencyMismatch, "", 0, "", 2},
		{"exclusive re-entry naming shared", lock.Lock("held:x"), lock.AcquireRequest{Token: x.Token, Mode: lock.Shared}, lock.ErrModeMismatch, "", 0, "", 1},
		{"exclusive replay naming shared", lock.Lock("held:x"), lock.AcquireRequest{Owner: "x", Mode: lock.Shared, IdempotencyKey: "d3"}, lock.ErrIdempotencyMismatch, "", 0, "", 1},
		{"exclusive replay without a mode", lock.Lock("held:x"), lock.AcquireRequest{Owner: "x", IdempotencyKey: "d3"}, nil, lock.Exclusive, 0, lock.Replayed, 1},
		{"permit re-entry with another limit", sem, lock.AcquireRequest{Token: p.Token, Limit: 7}, lock.ErrLimitMismatch, "", 0, "", 1},
		{"permit re-entry with its limit", sem, lock.AcquireRequest{Token: p.Token, Limit: 2}, nil, lock.Permit, 2, lock.Reentered, 2},
		{"permit replay with another limit", sem, lock.AcquireRequest{Owner: "p", Limit: 7, IdempotencyKey: "d2"}, lock.ErrIdempotencyMismatch, "", 0, "", 2},
		{"permit replay with its limit", sem, lock.AcquireRequest{Owner: "p", Limit: 2, IdempotencyKey: "d2"}, nil, lock.Permit, 2, lock.Replayed, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.req.TTL = time.Minute
			if tc.req.Owner == "" {
				tc.req.Owner = "again"
			}
			l, err := e.Acquire(ctx, tc.key, tc.req)
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("%v, want %v", err, tc.err)
				}
			} else if err != nil || l.Mode != tc.mode || l.Limit != tc.limit || l.Outcome != tc.outcome {
				t.Fatalf("%+v (%v), want mode %s limit %d outcome %s", l, err, tc.mode, tc.limit, tc.outcome)
			}
			st, err := e.State(ctx, tc.key)
			if err != nil {
				t.Fatal(err)
			}
			owner := map[lock.Resource]string{key: "r1", lock.Lock("held:x"): "x", sem: "p"}[tc.key]
			count := -1
			if len(st.Holders) == 0 && st.Owner == owner {
				count = st.Count
			}
			for _, h := range st.Holders {
				if h.Owner == owner {
					count = h.Count
				}
			}
			if count != tc.countLeft {
				t.Fatalf("%s's count is %d, want %d: a refused call wrote", owner, count, tc.countLeft)
			}
		})
	}
}

// failLeaves fails the first n leave calls before they are sent, as a
// Redis that does not answer would.
type failLeaves struct{ n atomic.Int32 }

func (h *failLeaves) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *failLeaves) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if args := cmd.Args(); cmd.Name() == "fcall" && len(args) > 1 && strings.HasSuffix(fmt.Sprint(args[1]), "_leave") && h.n.Add(-1) >= 0 {
			cmd.SetErr(context.DeadlineExceeded)
			return context.DeadlineExceeded
		}
		return next(ctx, cmd)
	}
}

func (h *failLeaves) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A waiter that gives up while Redis does not answer its leave still
// leaves the queue once Redis does, not only at its deadline: a waiter
// left behind counts as live, ahead of those after it.
func TestLeaveRetriedUntilRedisAnswers(t *testing.T) {
	srv := redistest.Start(t)
	rdb := tunedClient(t, srv)
	fail := &failLeaves{}
	fail.n.Store(3)
	rdb.AddHook(fail)
	e := lock.New(rdb, lock.Options{})
	t.Cleanup(func() { _ = e.Close() })
	ctx := context.Background()
	mustAcquire(t, e, lock.Lock("lr:k"), lock.AcquireRequest{TTL: time.Minute})
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = e.Acquire(wctx, lock.Lock("lr:k"), lock.AcquireRequest{Owner: "w", TTL: time.Second, Wait: 30 * time.Second})
	}()
	waitFor(t, func() bool { st, err := e.State(ctx, lock.Lock("lr:k")); return err == nil && st.Waiters == 1 })
	cancel()
	<-done
	waitFor(t, func() bool { st, err := e.State(ctx, lock.Lock("lr:k")); return err == nil && st.Waiters == 0 })
	if left := fail.n.Load(); left >= 0 {
		t.Fatalf("%d of the 3 failed leave calls were not made: the test proves nothing", left+1)
	}
}

// cutShort answers the first acquire only once its caller has given up:
// the script ran, and queued the caller, but the caller never heard.
type cutShort struct{ used atomic.Bool }

func (h *cutShort) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *cutShort) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if args := cmd.Args(); cmd.Name() == "fcall" && len(args) > 1 && strings.HasSuffix(fmt.Sprint(args[1]), "_acquire") &&
			ctx.Value(cutKey{}) != nil && h.used.CompareAndSwap(false, true) {
			<-ctx.Done()
			cmd.SetErr(ctx.Err())
			return ctx.Err()
		}
		return err
	}
}

func (h *cutShort) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

type cutKey struct{}

// A waiter that leaves while its first try is under way, the try having
// queued it, is taken off the queue again.
func TestWaiterLeavingDuringItsFirstTry(t *testing.T) {
	srv := redistest.Start(t)
	rdb := tunedClient(t, srv)
	rdb.AddHook(&cutShort{})
	e := lock.New(rdb, lock.Options{})
	t.Cleanup(func() { _ = e.Close() })
	ctx := context.Background()
	mustAcquire(t, e, lock.Lock("lf:k"), lock.AcquireRequest{TTL: time.Minute})
	wctx, cancel := context.WithCancel(context.WithValue(ctx, cutKey{}, true))
	done := make(chan error, 1)
	go func() {
		_, err := e.Acquire(wctx, lock.Lock("lf:k"), lock.AcquireRequest{Owner: "w", TTL: time.Second, Wait: 30 * time.Second})
		done <- err
	}()
	waitFor(t, func() bool { st, err := e.State(ctx, lock.Lock("lf:k")); return err == nil && st.Waiters == 1 })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("the waiter's answer: %v", err)
	}
	waitFor(t, func() bool { st, err := e.State(ctx, lock.Lock("lf:k")); return err == nil && st.Waiters == 0 })
}
