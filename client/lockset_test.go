package client_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/lockd/lockd/client"
)

// LockMany holds every key with one token, its watchdog renews the set as
// a lease's does, and losing one key loses the set.
func TestLockMany(t *testing.T) {
	ld := startLockd(t)
	rc := &renewClock{}
	c, err := client.New(ld.URL, client.WithHTTPClient(&http.Client{Transport: rc}))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	keys := []string{"many:b", "many:a", "many:c"}
	start := time.Now()
	set, err := c.LockMany(ctx, keys, client.AcquireOptions{Owner: "many", TTL: 600 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if len(set.Leases()) != 3 || set.Fence("many:a") <= 0 || set.Token() == "" {
		t.Fatalf("set = %+v", set.Leases())
	}
	// Three renewals: the set outlives its TTL twice over.
	for len(rc.intervals(start)) < 3 {
		select {
		case <-set.Lost():
			t.Fatalf("lost: %v", set.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
	st, err := c.State(ctx, "many:c")
	if err != nil || st.Set == nil || *st.Set != 3 || st.Owner != "many" {
		t.Fatalf("state of a key of the set: %+v, %v", st, err)
	}
	_, err = c.LockMany(ctx, []string{"many:z", "many:c"}, client.AcquireOptions{})
	var he *client.HeldError
	if !errors.As(err, &he) || he.Key != "many:c" || he.Holder != "many" {
		t.Fatalf("a set over a held key: %v", err)
	}
	if err := set.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.State(ctx, "many:a"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("after the release: %v", err)
	}

	// Breaking one key ends the set at its next renewal.
	set, err = c.LockMany(ctx, keys, client.AcquireOptions{Owner: "many", TTL: 600 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ForceRelease(ctx, "many:b", "test"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-set.Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("the set was not lost within 5 s of losing a key")
	}
	if !errors.Is(set.Err(), client.ErrLeaseLost) || !errors.Is(context.Cause(set.Context()), client.ErrLeaseLost) {
		t.Fatalf("loss: %v", set.Err())
	}
	if _, err := c.State(ctx, "many:a"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("the set's other keys after its loss: %v", err)
	}

	// Shared sets hold their keys together.
	s1, err := c.LockMany(ctx, []string{"many:s1", "many:s2"}, client.AcquireOptions{Mode: client.Shared})
	if err != nil {
		t.Fatal(err)
	}
	s2, err := c.LockMany(ctx, []string{"many:s2", "many:s3"}, client.AcquireOptions{Mode: client.Shared})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := c.State(ctx, "many:s2"); err != nil || len(st.Holders) != 2 || st.Set == nil || *st.Set != 2 {
		t.Fatalf("a key of two shared sets: %+v, %v", st, err)
	}
	_ = s1.Release(ctx)
	_ = s2.Release(ctx)
}
