package client_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockd/lockd/client"
	"github.com/lockd/lockd/internal/lockdtest"
)

func newClient(t *testing.T, url string, opts ...client.Option) *client.Client {
	t.Helper()
	c, err := client.New(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestWatchdogKeepsLeasePastThreeTTLs(t *testing.T) {
	ld := startLockd(t)
	clock := &renewClock{}
	c := newClient(t, ld.URL, client.WithHTTPClient(&http.Client{Transport: clock}))
	ctx := context.Background()
	key := uniqueKey(t)

	const ttl = 300 * time.Millisecond
	start := time.Now()
	l, err := c.Acquire(ctx, key, client.AcquireOptions{Owner: "watchdog-test", TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	// 4× the TTL: without renewals the lease would be long gone.
	select {
	case <-l.Lost():
		t.Fatalf("lease lost while the watchdog ran: %v", l.Err())
	case <-time.After(4 * ttl):
	}
	st, err := c.State(ctx, key)
	if err != nil {
		t.Fatalf("state after 4×TTL: %v", err)
	}
	if st.Fence != l.Fence() {
		t.Errorf("fence changed: %d, lease has %d", st.Fence, l.Fence())
	}
	if st.Renewals < 3 {
		t.Errorf("renewals = %d after 4×TTL, want ≥ 3", st.Renewals)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("release: %v", err)
	}
	if _, err := c.State(ctx, key); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("state after release: %v, want ErrNotFound", err)
	}
	if cause := context.Cause(l.Context()); !errors.Is(cause, client.ErrReleased) {
		t.Errorf("lease context cause after release = %v, want ErrReleased", cause)
	}

	iv := clock.intervals(start)
	if len(iv) < 3 {
		t.Fatalf("only %d renewals recorded", len(iv))
	}
	var sum time.Duration
	for _, d := range iv {
		sum += d
	}
	t.Logf("renewal interval with ttl %v (ttl/3 = %v): mean %v, min %v, max %v over %d renewals (server counted %d)",
		ttl, ttl/3, sum/time.Duration(len(iv)), slices.Min(iv), slices.Max(iv), len(iv), st.Renewals)
	// The watchdog's promise is the lease kept (above), renewed every
	// ttl/3 from the answer to the previous renewal: the gaps are logged,
	// not bounded, since a busy machine stretches any one of them (one of
	// 207 ms for a 100 ms schedule under two busy loops). Their mean
	// shows a schedule of ttl/3, not of the TTL.
	if mean := sum / time.Duration(len(iv)); mean > ttl/2 {
		t.Errorf("renewals came every %v on average; the watchdog renews every ttl/3 (%v)", mean, ttl/3)
	}
}

func TestLossIsSignalled(t *testing.T) {
	ld := startLockd(t)
	c := newClient(t, ld.URL)
	ctx := context.Background()

	tests := []struct {
		name   string
		ttl    time.Duration
		break_ func(t *testing.T, key string)
		want   error // besides ErrLeaseLost
		// within bounds how long loss may take to be noticed.
		within time.Duration
	}{
		{
			name: "force-release",
			ttl:  600 * time.Millisecond,
			break_: func(t *testing.T, key string) {
				if _, err := c.ForceRelease(ctx, key, "test"); err != nil {
					t.Fatal(err)
				}
			},
			want:   client.ErrNotFound,
			within: 2 * time.Second, // ~ttl/3 expected
		},
		{
			name: "redis down until expiry",
			ttl:  600 * time.Millisecond,
			break_: func(t *testing.T, key string) {
				ld.redis.Stop()
				t.Cleanup(ld.redis.Restart)
			},
			want:   client.ErrUnavailable,
			within: 3 * time.Second, // ~ttl expected
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key := uniqueKey(t)
			l, err := c.Acquire(ctx, key, client.AcquireOptions{TTL: tt.ttl})
			if err != nil {
				t.Fatal(err)
			}
			broke := time.Now()
			tt.break_(t, key)
			select {
			case <-l.Lost():
			case <-time.After(tt.within):
				t.Fatalf("Lost() not closed within %v", tt.within)
			}
			t.Logf("%s: loss noticed %v after the break (ttl %v)", tt.name, time.Since(broke).Round(time.Millisecond), tt.ttl)
			if err := l.Err(); !errors.Is(err, client.ErrLeaseLost) || !errors.Is(err, tt.want) {
				t.Errorf("Err() = %v, want ErrLeaseLost and %v", err, tt.want)
			}
			if l.Context().Err() == nil {
				t.Error("lease context not cancelled on loss")
			}
			if cause := context.Cause(l.Context()); !errors.Is(cause, client.ErrLeaseLost) {
				t.Errorf("context cause = %v, want ErrLeaseLost", cause)
			}
			if err := l.Release(ctx); !errors.Is(err, client.ErrLeaseLost) {
				t.Errorf("Release after loss = %v, want ErrLeaseLost", err)
			}
		})
	}
}

func TestErrors(t *testing.T) {
	ld := startLockd(t)
	c := newClient(t, ld.URL)
	ctx := context.Background()
	key := uniqueKey(t)
	l, err := c.Acquire(ctx, key, client.AcquireOptions{Owner: "first", TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	dead := newClient(t, "http://127.0.0.1:1", client.WithRetry(0))

	tests := []struct {
		name string
		call func() error
		want error
	}{
		{"held", func() error {
			_, err := c.Acquire(ctx, key, client.AcquireOptions{Owner: "second"})
			return err
		}, client.ErrHeld},
		{"renew with a stranger's token", func() error {
			_, err := c.Renew(ctx, key, "not-the-token-not-the-token-xxxx", 0)
			return err
		}, client.ErrLeaseLost},
		{"release of a free key", func() error {
			_, err := c.Release(ctx, key+".free", "not-the-token-not-the-token-xxxx")
			return err
		}, client.ErrLeaseLost},
		{"state of a free key", func() error {
			_, err := c.State(ctx, key+".free")
			return err
		}, client.ErrNotFound},
		{"bad key", func() error {
			_, err := c.Acquire(ctx, "-bad/key", client.AcquireOptions{})
			return err
		}, client.ErrInvalid},
		{"ttl out of range", func() error {
			_, err := c.Acquire(ctx, key+".x", client.AcquireOptions{TTL: time.Millisecond})
			return err
		}, client.ErrInvalid},
		{"unreachable", func() error {
			_, err := dead.Acquire(ctx, key, client.AcquireOptions{})
			return err
		}, client.ErrUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.call(); !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
		})
	}

	_, err = c.Acquire(ctx, key, client.AcquireOptions{Owner: "second"})
	var held *client.HeldError
	if !errors.As(err, &held) {
		t.Fatalf("err = %v, want *HeldError", err)
	}
	if held.Holder != "first" || held.Key != key || held.Remaining <= 0 || held.RetryAfter <= 0 {
		t.Errorf("held = %+v, want holder first, key %s and time left", held, key)
	}
}

// count503 counts the 503 answers its client receives.
type count503 struct{ n atomic.Int64 }

func (c *count503) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err == nil && resp.StatusCode == http.StatusServiceUnavailable {
		c.n.Add(1)
	}
	return resp, err
}

func TestAcquireRetriesWhileRedisIsDown(t *testing.T) {
	ld := startLockd(t)
	seen := &count503{}
	c := newClient(t, ld.URL, client.WithRetry(10*time.Second), client.WithHTTPClient(&http.Client{Transport: seen}))
	ctx := context.Background()

	ld.redis.Stop()
	type result struct {
		l   *client.Lease
		err error
	}
	done := make(chan result, 1)
	start := time.Now()
	go func() {
		l, err := c.Acquire(ctx, uniqueKey(t), client.AcquireOptions{TTL: 2 * time.Second})
		done <- result{l, err}
	}()
	// The retry path must run: wait until Acquire has been answered 503
	// twice (a first try and a retry) before Redis comes back.
	lockdtest.Eventually(t, func() bool { return seen.n.Load() >= 2 }, 5*time.Second, "two 503s while Redis is down")
	down := time.Since(start)
	ld.redis.Restart()
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("acquire after Redis came back: %v", r.err)
		}
		t.Logf("acquire succeeded %v after it started, after %d 503s (Redis down for the first %v)",
			time.Since(start).Round(time.Millisecond), seen.n.Load(), down.Round(time.Millisecond))
		_ = r.l.Release(ctx)
	case <-time.After(8 * time.Second):
		t.Fatal("acquire did not succeed after Redis came back")
	}

	// Without retries the 503 is returned at once.
	ld.redis.Stop()
	t.Cleanup(ld.redis.Restart)
	once := newClient(t, ld.URL, client.WithRetry(0))
	if _, err := once.Acquire(ctx, uniqueKey(t)+".once", client.AcquireOptions{}); !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("err = %v, want ErrUnavailable", err)
	}
}

func TestWithLock(t *testing.T) {
	ld := startLockd(t)
	c := newClient(t, ld.URL)
	ctx := context.Background()

	t.Run("releases after fn", func(t *testing.T) {
		key := uniqueKey(t)
		fnErr := errors.New("fn failed")
		err := client.WithLock(ctx, c, key, client.AcquireOptions{TTL: time.Second}, func(ctx context.Context) error {
			if _, err := c.State(ctx, key); err != nil {
				t.Errorf("state inside fn: %v", err)
			}
			return fnErr
		})
		if !errors.Is(err, fnErr) {
			t.Errorf("err = %v, want fn's error", err)
		}
		if _, err := c.State(ctx, key); !errors.Is(err, client.ErrNotFound) {
			t.Errorf("state after WithLock: %v, want ErrNotFound", err)
		}
	})

	t.Run("cancels fn on loss", func(t *testing.T) {
		key := uniqueKey(t)
		var broke atomic.Int64
		err := client.WithLock(ctx, c, key, client.AcquireOptions{TTL: 600 * time.Millisecond}, func(ctx context.Context) error {
			broke.Store(time.Now().UnixNano())
			if _, err := c.ForceRelease(context.Background(), key, "test"); err != nil {
				t.Error(err)
			}
			select {
			case <-ctx.Done():
				t.Logf("fn's ctx cancelled %v after the force-release", time.Since(time.Unix(0, broke.Load())).Round(time.Millisecond))
				return ctx.Err()
			case <-time.After(3 * time.Second):
				return errors.New("fn's ctx was not cancelled")
			}
		})
		if !errors.Is(err, client.ErrLeaseLost) || !errors.Is(err, context.Canceled) {
			t.Errorf("err = %v, want ErrLeaseLost and context.Canceled", err)
		}
	})
}

func TestIdempotencyKeyReplaysTheLease(t *testing.T) {
	ld := startLockd(t)
	c := newClient(t, ld.URL)
	ctx := context.Background()
	key := uniqueKey(t)
	opts := client.AcquireOptions{TTL: 5 * time.Second, IdempotencyKey: "delivery-42", NoAutoRenew: true}
	a, err := c.Acquire(ctx, key, opts)
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Acquire(ctx, key, opts)
	if err != nil {
		t.Fatalf("second acquire with the same idempotency key: %v", err)
	}
	if a.Token() != b.Token() || a.Fence() != b.Fence() {
		t.Error("the retry got another lease")
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestAPIKeyIsSentAsBearer(t *testing.T) {
	var got atomic.Value
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Store(r.Header.Get("Authorization"))
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(`{"type":"/problems/unauthorized","title":"Unauthorized","status":401,"code":"unauthorized"}`))
	}))
	defer hs.Close()
	c := newClient(t, hs.URL, client.WithAPIKey("s3cret"))
	_, err := c.State(context.Background(), "k")
	if !errors.Is(err, client.ErrUnauthorized) {
		t.Errorf("err = %v, want ErrUnauthorized", err)
	}
	if got.Load() != "Bearer s3cret" {
		t.Errorf("Authorization = %q", got.Load())
	}
}

func TestManualRenew(t *testing.T) {
	ld := startLockd(t)
	c := newClient(t, ld.URL)
	ctx := context.Background()
	l, err := c.Acquire(ctx, uniqueKey(t), client.AcquireOptions{TTL: time.Second, NoAutoRenew: true})
	if err != nil {
		t.Fatal(err)
	}
	before := l.Info().ExpiresAt
	// Expiries are whole milliseconds of Redis's clock: a renew in the
	// same millisecond as the grant moves nothing.
	time.Sleep(5 * time.Millisecond)
	if err := l.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	if !l.Info().ExpiresAt.After(before) || l.Renewals() != 1 {
		t.Errorf("renew did not move the expiry (%v → %v)", before, l.Info().ExpiresAt)
	}
	if _, err := c.ForceRelease(ctx, l.Key(), ""); err != nil {
		t.Fatal(err)
	}
	if err := l.Renew(ctx); !errors.Is(err, client.ErrLeaseLost) {
		t.Fatalf("renew after force-release = %v, want ErrLeaseLost", err)
	}
	select {
	case <-l.Lost():
	default:
		t.Error("Lost() not closed after a renew said lost")
	}
}
