package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockd/lockd/client"
)

// A lease with a hold window released early keeps its key: ErrMinHold
// with a RetryAfter, the state's MinHoldUntil, and a waiting acquire is
// granted when the window ends.
func TestMinHold(t *testing.T) {
	ld := startLockd(t)
	c := newClient(t, ld.URL)
	ctx := context.Background()
	key := uniqueKey(t)
	const window = 1200 * time.Millisecond
	l, err := c.Acquire(ctx, key, client.AcquireOptions{TTL: time.Minute, MinHold: window})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	_, err = c.Acquire(ctx, key, client.AcquireOptions{})
	var ae *client.APIError
	if !errors.Is(err, client.ErrMinHold) || !errors.As(err, &ae) || ae.RetryAfter <= 0 {
		t.Fatalf("acquire inside the window: %v", err)
	}
	st, err := c.State(ctx, key)
	if err != nil || st.MinHoldUntil == nil || st.Count != 0 || len(st.Holders) != 0 {
		t.Fatalf("state inside the window: %+v, %v", st, err)
	}
	next, err := c.Acquire(ctx, key, client.AcquireOptions{Wait: 5 * time.Second})
	if err != nil {
		t.Fatalf("waiting the window out: %v", err)
	}
	defer func() { _ = next.Release(ctx) }()
	if got, _ := c.State(ctx, key); got.AcquiredAt.Before(*st.MinHoldUntil) {
		t.Fatalf("granted at %v, inside the window that ends at %v", got.AcquiredAt, *st.MinHoldUntil)
	}
}
