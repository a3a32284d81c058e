package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/lockd/lockd/api"
	"github.com/lockd/lockd/client"
)

// Shared holders hold a key together, each with its own lease; an
// exclusive request waits for all of them, and a shared request that
// comes after a waiting exclusive one waits behind it.
func TestSharedHoldersCoexist(t *testing.T) {
	ld := startLockd(t)
	c := newClient(t, ld.URL)
	ctx := context.Background()
	key := uniqueKey(t)
	shared := client.AcquireOptions{Mode: client.Shared, TTL: 5 * time.Second}

	r1, err := c.Acquire(ctx, key, withOwner(shared, "reader-1"))
	if err != nil {
		t.Fatal(err)
	}
	r2, err := c.Acquire(ctx, key, withOwner(shared, "reader-2"))
	if err != nil {
		t.Fatalf("a second shared holder: %v", err)
	}
	if r1.Mode() != client.Shared || r1.Token() == r2.Token() || r1.Fence() >= r2.Fence() {
		t.Errorf("shared leases: mode %q, fences %d, %d; want shared, own tokens, increasing fences", r1.Mode(), r1.Fence(), r2.Fence())
	}
	st, err := c.State(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode != api.GrantModeShared || len(st.Holders) != 2 || st.Holders[0].Owner != "reader-1" || st.Holders[1].Owner != "reader-2" {
		t.Fatalf("state: mode %q, holders %+v; want reader-1 and reader-2, shared", st.Mode, st.Holders)
	}

	// An exclusive request fails at once, or waits for both.
	if _, err := c.Acquire(ctx, key, client.AcquireOptions{Owner: "writer"}); !errors.Is(err, client.ErrHeld) {
		t.Fatalf("exclusive acquire while shared holders hold: %v, want ErrHeld", err)
	}
	writer := make(chan *client.Lease, 1)
	go func() {
		l, err := c.Acquire(ctx, key, client.AcquireOptions{Owner: "writer", TTL: 5 * time.Second, Wait: 10 * time.Second})
		if err != nil {
			t.Errorf("waiting writer: %v", err)
		}
		writer <- l
	}()
	waitQueue(t, c, key, 1)
	st, _ = c.State(ctx, key)
	if len(st.Queue) != 1 || st.Queue[0].Owner != "writer" || st.Queue[0].Mode != api.GrantModeExclusive || st.Waiters != 1 {
		t.Errorf("queue = %+v (waiters %d), want the writer", st.Queue, st.Waiters)
	}
	// No writer starvation: a new reader queues behind the writer. The
	// readers would let it in; the writer comes first: queued, naming the
	// writer as next, not as holder.
	_, err = c.Acquire(ctx, key, withOwner(shared, "reader-3"))
	var queued *client.QueuedError
	if !errors.As(err, &queued) || queued.Waiters != 1 || queued.Next != "writer" || queued.RetryAfter < time.Second {
		t.Errorf("shared acquire behind a waiting writer: %v, want ErrQueued naming the writer next", err)
	}

	if err := r1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-writer:
		t.Fatal("the writer got the key while reader-2 held it")
	case <-time.After(200 * time.Millisecond):
	}
	if err := r2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case w := <-writer:
		if w == nil {
			return
		}
		if w.Mode() != client.Exclusive {
			t.Errorf("writer's mode = %q", w.Mode())
		}
		_ = w.Release(ctx)
	case <-time.After(5 * time.Second):
		t.Fatal("the writer did not get the key after both readers released")
	}
}

// Force-release with a fence breaks one shared holder; WithLock takes the
// mode from its options.
func TestSharedForceReleaseFenceAndWithLock(t *testing.T) {
	ld := startLockd(t)
	c := newClient(t, ld.URL)
	ctx := context.Background()
	key := uniqueKey(t)
	shared := client.AcquireOptions{Mode: client.Shared, TTL: 600 * time.Millisecond}
	a, err := c.Acquire(ctx, key, shared)
	if err != nil {
		t.Fatal(err)
	}
	err = client.WithLock(ctx, c, key, shared, func(ctx context.Context) error {
		if _, err := c.ForceReleaseFence(ctx, key, a.Fence(), "test"); err != nil {
			return err
		}
		select {
		case <-a.Lost():
		case <-time.After(2 * time.Second):
			return errors.New("the broken holder's Lost() was not closed")
		}
		st, err := c.State(ctx, key)
		if err != nil {
			return err
		}
		if len(st.Holders) != 1 || st.Holders[0].Fence == a.Fence() {
			return errors.New("the wrong holder is left")
		}
		return ctx.Err() // WithLock's own lease is still live
	})
	if err != nil {
		t.Fatalf("WithLock (shared): %v", err)
	}
	if _, err := c.State(ctx, key); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("state after both: %v, want ErrNotFound", err)
	}
	if _, err := c.Acquire(ctx, key, client.AcquireOptions{Mode: "upgradable"}); !errors.Is(err, client.ErrInvalid) {
		t.Errorf("unknown mode: %v, want ErrInvalid", err)
	}
}

func withOwner(o client.AcquireOptions, owner string) client.AcquireOptions {
	o.Owner = owner
	return o
}

// waitQueue waits until n requests wait for key.
func waitQueue(t *testing.T, c *client.Client, key string, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, err := c.State(context.Background(), key)
		if err == nil && len(st.Queue) >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d waiting for %s within 5 s: %+v, %v", n, key, st.Queue, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A lease with a lock-delay that expires holds its key off: ErrLockDelay
// with a RetryAfter, until the delay has passed.
func TestLockDelay(t *testing.T) {
	ld := startLockd(t)
	c := newClient(t, ld.URL)
	ctx := context.Background()
	key := uniqueKey(t)
	if _, err := c.Acquire(ctx, key, client.AcquireOptions{TTL: 200 * time.Millisecond, LockDelay: time.Second, NoAutoRenew: true}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	_, err := c.Acquire(ctx, key, client.AcquireOptions{})
	var ae *client.APIError
	if !errors.Is(err, client.ErrLockDelay) || !errors.As(err, &ae) || ae.RetryAfter <= 0 {
		t.Fatalf("acquire during the lock-delay: %v", err)
	}
	l, err := c.Acquire(ctx, key, client.AcquireOptions{Wait: 3 * time.Second})
	if err != nil {
		t.Fatalf("waiting the lock-delay out: %v", err)
	}
	_ = l.Release(ctx)
}

// A value given on acquire shows in the state.
func TestValueInState(t *testing.T) {
	ld := startLockd(t)
	c := newClient(t, ld.URL)
	ctx := context.Background()
	key := uniqueKey(t)
	l, err := c.Acquire(ctx, key, client.AcquireOptions{Value: json.RawMessage(`{"addr":"10.0.0.7:8080"}`)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Release(ctx) }()
	st, err := c.State(ctx, key)
	if err != nil || st.Value == nil || string(*st.Value) != `{"addr":"10.0.0.7:8080"}` {
		t.Fatalf("state: %+v %v", st, err)
	}
}
