package client_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockd/lockd/api"
	"github.com/lockd/lockd/client"
	"github.com/lockd/lockd/internal/lockdtest"
)

// Many goroutines of one process contend for a semaphore for seconds:
// never more than limit of them hold a permit at once (by their own count
// and by the server's state), the limit is reached, and every goroutine
// gets its turn.
func TestSemaphoreLimitUnderContention(t *testing.T) {
	ld := startLockd(t)
	c := newClient(t, ld.URL)
	name := uniqueKey(t)
	const limit, workers, run = 3, 12, 3 * time.Second
	sem := c.Semaphore(name, limit)

	var inside, most atomic.Int64
	grants := make([]int, workers)
	stop := time.Now().Add(run)
	ctx := context.Background()

	// The server's view, sampled while the workers run.
	var serverMost atomic.Int64
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for time.Now().Before(stop) {
			if st, err := sem.State(ctx); err == nil {
				n := int64(len(st.Holders))
				if n > serverMost.Load() {
					serverMost.Store(n)
				}
				if st.Limit == nil || *st.Limit != limit {
					t.Errorf("state's limit = %v, want %d", st.Limit, limit)
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()

	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				err := client.WithPermit(ctx, sem, client.AcquireOptions{Owner: "worker", TTL: 2 * time.Second, Wait: 10 * time.Second},
					func(ctx context.Context) error {
						n := inside.Add(1)
						for {
							m := most.Load()
							if n <= m || most.CompareAndSwap(m, n) {
								break
							}
						}
						time.Sleep(5 * time.Millisecond)
						inside.Add(-1)
						return nil
					})
				if err != nil {
					t.Errorf("worker %d: %v", w, err)
					return
				}
				grants[w]++
			}
		}()
	}
	wg.Wait()
	<-sampled

	total := 0
	for _, g := range grants {
		total += g
	}
	t.Logf("limit %d, %d workers, %v: %d grants (per worker min %d, max %d); most holders at once: %d by the workers' count, %d in the server's state",
		limit, workers, run, total, minOf(grants), maxOf(grants), most.Load(), serverMost.Load())
	if most.Load() > limit || serverMost.Load() > limit {
		t.Fatalf("over the limit: %d inside at once, %d holders in the state; limit %d", most.Load(), serverMost.Load(), limit)
	}
	if most.Load() < limit {
		t.Errorf("at most %d inside at once: the limit %d was never reached, so the test proves little", most.Load(), limit)
	}
	if minOf(grants) == 0 {
		t.Errorf("a worker never got a permit: %v", grants)
	}
	if _, err := sem.State(ctx); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("state after every permit was released: %v, want ErrNotFound", err)
	}
}

func minOf(xs []int) int {
	m := xs[0]
	for _, x := range xs {
		m = min(m, x)
	}
	return m
}

func maxOf(xs []int) int {
	m := xs[0]
	for _, x := range xs {
		m = max(m, x)
	}
	return m
}

func TestSemaphoreErrors(t *testing.T) {
	ld := startLockd(t)
	c := newClient(t, ld.URL)
	ctx := context.Background()
	name := uniqueKey(t)
	sem := c.Semaphore(name, 2)
	var held []*client.Lease
	for _, owner := range []string{"first", "second"} {
		l, err := sem.Acquire(ctx, client.AcquireOptions{Owner: owner, TTL: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
	}
	defer func() {
		for _, l := range held {
			_ = l.Release(ctx)
		}
	}()
	const stranger = "not-the-token-not-the-token-xxxx"

	tests := []struct {
		name string
		call func() error
		want error
	}{
		{"no permit free", func() error {
			_, err := sem.Acquire(ctx, client.AcquireOptions{Owner: "third"})
			return err
		}, client.ErrNoPermits},
		{"no permit free after a wait", func() error {
			_, err := sem.Acquire(ctx, client.AcquireOptions{Owner: "third", Wait: 200 * time.Millisecond})
			return err
		}, client.ErrNoPermits},
		{"another limit", func() error {
			_, err := c.Semaphore(name, 3).Acquire(ctx, client.AcquireOptions{})
			return err
		}, client.ErrLimitMismatch},
		{"limit 0", func() error {
			_, err := c.Semaphore(name+".z", 0).Acquire(ctx, client.AcquireOptions{})
			return err
		}, client.ErrInvalid},
		{"limit over 10000", func() error {
			_, err := c.Semaphore(name+".big", 10001).Acquire(ctx, client.AcquireOptions{})
			return err
		}, client.ErrInvalid},
		{"a mode for a permit", func() error {
			_, err := c.Semaphore(name+".m", 2).Acquire(ctx, client.AcquireOptions{Mode: client.Shared})
			return err
		}, client.ErrInvalid},
		{"bad name", func() error {
			_, err := c.Semaphore("-bad/name", 2).Acquire(ctx, client.AcquireOptions{})
			return err
		}, client.ErrInvalid},
		{"renew with a stranger's token", func() error {
			_, err := sem.Renew(ctx, stranger, 0)
			return err
		}, client.ErrLeaseLost},
		{"release of a free semaphore", func() error {
			_, err := c.Semaphore(name+".free", 0).Release(ctx, stranger)
			return err
		}, client.ErrLeaseLost},
		{"state of a free semaphore", func() error {
			_, err := c.Semaphore(name+".free", 0).State(ctx)
			return err
		}, client.ErrNotFound},
		{"force-release of a fence nobody has", func() error {
			_, err := sem.ForceReleaseFence(ctx, 1, "test")
			return err
		}, client.ErrLeaseLost},
		{"a lock's token on the semaphore", func() error {
			// The lock of the same name is another key.
			l, err := c.Acquire(ctx, name, client.AcquireOptions{NoAutoRenew: true})
			if err != nil {
				return err
			}
			defer l.Release(ctx)
			_, err = sem.Renew(ctx, l.Token(), 0)
			return err
		}, client.ErrLeaseLost},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.call(); !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
		})
	}

	_, err := sem.Acquire(ctx, client.AcquireOptions{Owner: "third"})
	var np *client.NoPermitsError
	if !errors.As(err, &np) {
		t.Fatalf("err = %v, want *NoPermitsError", err)
	}
	if np.Name != name || (np.Holder != "first" && np.Holder != "second") || np.Remaining <= 0 || np.RetryAfter <= 0 {
		t.Errorf("no permits = %+v, want name %s, a holder and time left", np, name)
	}
	if errors.Is(err, client.ErrHeld) {
		t.Error("no_permits is also ErrHeld; they are different answers")
	}
}

func TestSemaphorePermitIsALease(t *testing.T) {
	ld := startLockd(t)
	c := newClient(t, ld.URL)
	ctx := context.Background()
	name := uniqueKey(t)
	sem := c.Semaphore(name, 2)

	const ttl = 300 * time.Millisecond
	a, err := sem.Acquire(ctx, client.AcquireOptions{Owner: "a", TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	b, err := sem.Acquire(ctx, client.AcquireOptions{Owner: "b", TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	if a.Mode() != client.Permit || a.Limit() != 2 || a.Key() != name {
		t.Errorf("lease: mode %q, limit %d, key %q; want permit, 2, %s", a.Mode(), a.Limit(), a.Key(), name)
	}
	if a.Token() == b.Token() || a.Fence() == b.Fence() {
		t.Error("two permits share a token or a fence")
	}
	// The watchdog keeps both past 4 TTLs.
	select {
	case <-a.Lost():
		t.Fatalf("permit lost while the watchdog ran: %v", a.Err())
	case <-b.Lost():
		t.Fatalf("permit lost while the watchdog ran: %v", b.Err())
	case <-time.After(4 * ttl):
	}
	st, err := sem.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Holders) != 2 || st.Mode != api.GrantModePermit {
		t.Fatalf("state: mode %q, holders %+v; want 2 permits", st.Mode, st.Holders)
	}
	for _, h := range st.Holders {
		if h.Mode != api.GrantModePermit || h.RemainingMs <= 0 {
			t.Errorf("holder %+v", h)
		}
	}
	// The lock of the same name is unrelated: free.
	if _, err := c.State(ctx, name); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("lock %s: %v, want ErrNotFound", name, err)
	}

	// Breaking one permit by its fence loses that lease only.
	if _, err := sem.ForceReleaseFence(ctx, a.Fence(), "test"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-a.Lost():
		if !errors.Is(a.Err(), client.ErrLeaseLost) {
			t.Errorf("Err() = %v, want ErrLeaseLost", a.Err())
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the broken permit's Lost() was not closed")
	}
	select {
	case <-b.Lost():
		t.Fatalf("the other permit was lost too: %v", b.Err())
	case <-time.After(2 * ttl):
	}
	// The freed permit can be taken again while b holds its own.
	c2, err := sem.Acquire(ctx, client.AcquireOptions{Owner: "c", TTL: ttl})
	if err != nil {
		t.Fatalf("acquire after one permit was broken: %v", err)
	}
	for _, l := range []*client.Lease{b, c2} {
		if err := l.Release(ctx); err != nil {
			t.Errorf("release: %v", err)
		}
	}
	if _, err := sem.State(ctx); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("state after release: %v, want ErrNotFound", err)
	}

	h, err := sem.History(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[api.EventType]int{}
	for _, e := range h.Events {
		seen[e.Type]++
	}
	if seen[api.Acquired] != 3 || seen[api.ForceReleased] != 1 || seen[api.Released] != 2 {
		t.Errorf("history: %v, want 3 acquired, 1 force_released, 2 released", seen)
	}
}

// A permit that is not renewed expires and frees its slot for a waiter.
func TestSemaphorePermitExpiryFreesASlot(t *testing.T) {
	ld := startLockd(t)
	c := newClient(t, ld.URL)
	ctx := context.Background()
	sem := c.Semaphore(uniqueKey(t), 1)
	if _, err := sem.Acquire(ctx, client.AcquireOptions{Owner: "forgetful", TTL: 300 * time.Millisecond, NoAutoRenew: true}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	l, err := sem.Acquire(ctx, client.AcquireOptions{Owner: "patient", TTL: time.Second, Wait: 5 * time.Second})
	if err != nil {
		t.Fatalf("waiter: %v", err)
	}
	waited := time.Since(start)
	t.Logf("the waiter got the permit %v after it began to wait (the first permit had ≤ 300 ms left)", waited.Round(time.Millisecond))
	if waited > 2*time.Second {
		t.Errorf("waited %v for a permit that expired after 300 ms", waited)
	}
	_ = l.Release(ctx)
}

func TestWithPermit(t *testing.T) {
	ld := startLockd(t)
	c := newClient(t, ld.URL)
	ctx := context.Background()
	sem := c.Semaphore(uniqueKey(t), 2)
	fnErr := errors.New("fn failed")
	err := client.WithPermit(ctx, sem, client.AcquireOptions{Owner: "with-permit", TTL: time.Second}, func(ctx context.Context) error {
		st, err := sem.State(ctx)
		if err != nil || len(st.Holders) != 1 || st.Holders[0].Owner != "with-permit" {
			t.Errorf("state inside fn: %+v, %v", st, err)
		}
		return fnErr
	})
	if !errors.Is(err, fnErr) {
		t.Errorf("err = %v, want fn's error", err)
	}
	if _, err := sem.State(ctx); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("state after WithPermit: %v, want ErrNotFound", err)
	}

	// Loss cancels fn.
	err = client.WithPermit(ctx, sem, client.AcquireOptions{TTL: 600 * time.Millisecond}, func(ctx context.Context) error {
		if _, err := sem.ForceRelease(context.Background(), "test"); err != nil {
			t.Error(err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(3 * time.Second):
			return errors.New("fn's ctx was not cancelled")
		}
	})
	if !errors.Is(err, client.ErrLeaseLost) || !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want ErrLeaseLost and context.Canceled", err)
	}
}

func TestListSemaphores(t *testing.T) {
	ld := startLockd(t)
	c := newClient(t, ld.URL)
	ctx := context.Background()
	prefix := uniqueKey(t) + ":"
	var leases []*client.Lease
	for _, n := range []string{"a", "b"} {
		l, err := c.Semaphore(prefix+n, 4).Acquire(ctx, client.AcquireOptions{TTL: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, l)
	}
	lock, err := c.Acquire(ctx, prefix+"a", client.AcquireOptions{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	leases = append(leases, lock)
	defer func() {
		for _, l := range leases {
			_ = l.Release(ctx)
		}
	}()

	sems, err := c.ListSemaphores(ctx, prefix, 0, "")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range sems.Semaphores {
		names = append(names, s.Key)
		if s.Limit == nil || *s.Limit != 4 || len(s.Holders) != 1 {
			t.Errorf("%s: limit %v, holders %d; want 4 and 1", s.Key, s.Limit, len(s.Holders))
		}
	}
	if len(names) != 2 {
		t.Errorf("semaphores under %s: %q, want a and b", prefix, names)
	}
	locks, err := c.List(ctx, prefix, 0, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(locks.Locks) != 1 || locks.Locks[0].Key != prefix+"a" {
		t.Errorf("locks under %s: %+v, want only the lock %sa", prefix, locks.Locks, prefix)
	}
}

func TestSemaphoreIdempotencyKeyReplaysThePermit(t *testing.T) {
	ld := startLockd(t)
	c := newClient(t, ld.URL)
	ctx := context.Background()
	sem := c.Semaphore(uniqueKey(t), 1)
	opts := client.AcquireOptions{TTL: 5 * time.Second, IdempotencyKey: "delivery-7", NoAutoRenew: true}
	a, err := sem.Acquire(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	b, err := sem.Acquire(ctx, opts)
	if err != nil {
		t.Fatalf("second acquire with the same idempotency key: %v", err)
	}
	if a.Token() != b.Token() || a.Fence() != b.Fence() || !b.Replayed() {
		t.Error("the retry got another permit, or was not marked replayed")
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestSemaphoreAcquireRetriesWhileRedisIsDown(t *testing.T) {
	ld := startLockd(t)
	seen := &count503{}
	c := newClient(t, ld.URL, client.WithRetry(10*time.Second), client.WithHTTPClient(&http.Client{Transport: seen}))
	ctx := context.Background()
	ld.redis.Stop()
	done := make(chan error, 1)
	go func() {
		l, err := c.Semaphore(uniqueKey(t), 2).Acquire(ctx, client.AcquireOptions{TTL: 2 * time.Second})
		if err == nil {
			_ = l.Release(ctx)
		}
		done <- err
	}()
	lockdtest.Eventually(t, func() bool { return seen.n.Load() >= 2 }, 5*time.Second, "two 503s while Redis is down")
	ld.redis.Restart()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("acquire after Redis came back: %v", err)
		}
	case <-time.After(8 * time.Second):
		t.Fatal("acquire did not succeed after Redis came back")
	}
}

// Answers that the real server gives only in setups the other tests do
// not build (a Redlock server) map to their sentinels too.
func TestProblemCodes(t *testing.T) {
	tests := []struct {
		code string
		want error
	}{
		{"unsupported", client.ErrUnsupported},
		{"limit_mismatch", client.ErrLimitMismatch},
		{"no_permits", client.ErrNoPermits},
		{"lock_held", client.ErrHeld},
	}
	for _, tt := range tests {
		t.Run(tt.code, func(t *testing.T) {
			hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/problem+json")
				w.Header().Set("Retry-After", "2")
				w.WriteHeader(http.StatusConflict)
				_, _ = w.Write([]byte(`{"type":"/problems/` + tt.code + `","title":"x","status":409,"code":"` + tt.code + `","key":"k","holder":"h","remaining_ms":1500}`))
			}))
			defer hs.Close()
			c := newClient(t, hs.URL, client.WithRetry(0))
			_, err := c.Semaphore("k", 2).Acquire(context.Background(), client.AcquireOptions{})
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			var np *client.NoPermitsError
			if errors.As(err, &np) && (np.Name != "k" || np.Holder != "h" || np.Remaining != 1500*time.Millisecond || np.RetryAfter != 2*time.Second) {
				t.Errorf("no permits = %+v", np)
			}
		})
	}
}
