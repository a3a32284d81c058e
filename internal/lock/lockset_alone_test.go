package lock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/lock"
)

// A key of a lock set is never renewed, released or re-entered alone with
// the set's token: the set stays whole, held as it was, and its own renew
// and release still act on every key. An admin's force-release and a
// request that the holder step aside reach a set's key as any other.
func TestLockSetKeyNotAlone(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			e := newEngine(t, b.open(t))
			for _, mode := range []lock.Mode{lock.Exclusive, lock.Shared} {
				t.Run(string(mode), func(t *testing.T) { setKeyNotAlone(t, e, mode) })
			}
		})
	}
}

func setKeyNotAlone(t *testing.T, e lock.Service, mode lock.Mode) {
	ctx := context.Background()
	keys := []string{"ls:alone:" + string(mode) + ":a", "ls:alone:" + string(mode) + ":b", "ls:alone:" + string(mode) + ":c"}
	req := setReq("whole", keys...)
	req.Mode = mode
	s, err := e.AcquireSet(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	res := lock.Lock(keys[1])
	before, err := e.State(ctx, res)
	if err != nil {
		t.Fatal(err)
	}
	inSet := func(what string, err error) {
		t.Helper()
		var ie *lock.InSetError
		if !errors.As(err, &ie) || ie.Keys != 3 || !errors.Is(err, lock.ErrInLockSet) {
			t.Fatalf("%s of one key of the set: %v; want in a lock set of 3 keys", what, err)
		}
	}
	_, err = e.Renew(ctx, res, lock.RenewRequest{Token: s.Token, TTL: time.Minute, Actor: "t"})
	inSet("renew", err)
	_, err = e.Release(ctx, res, s.Token, "t")
	inSet("release", err)
	_, err = e.Acquire(ctx, res, lock.AcquireRequest{Token: s.Token, TTL: time.Minute})
	inSet("re-entry", err)
	after, err := e.State(ctx, res)
	if err != nil {
		t.Fatalf("the key after its lone release was refused: %v", err)
	}
	if after.Owner != "whole" || after.Fence != before.Fence || after.Count != before.Count || !after.ExpiresAt.Equal(before.ExpiresAt) ||
		after.Set != 3 {
		t.Fatalf("the key after the refusals = %+v; was %+v", after, before)
	}
	// Another token is lost, as on any key.
	if _, err := e.Release(ctx, res, "another-token-of-nobody-at-all-", "t"); !errors.Is(err, lock.ErrLeaseLost) {
		t.Fatalf("release with another token: %v", err)
	}
	r, err := e.RenewSet(ctx, s.Token, 30*time.Second, "t")
	if err != nil || len(r.Leases) != 3 {
		t.Fatalf("the set's renewal: %+v, %v", r, err)
	}
	if mode == lock.Exclusive {
		if _, err := e.RequestRelease(ctx, res, 0, "admin", "maintenance", "t"); err != nil {
			t.Fatalf("a request that a set's key step aside: %v", err)
		}
	}
	if _, err := e.ForceReleaseFence(ctx, lock.Lock(keys[2]), 0, "admin", "stuck"); err != nil {
		t.Fatalf("force-release of a set's key: %v", err)
	}
	if _, err := e.State(ctx, lock.Lock(keys[2])); !errors.Is(err, lock.ErrNotFound) {
		t.Fatalf("a set's key after its force-release: %v", err)
	}
	n, err := e.ReleaseSet(ctx, s.Token, "t")
	if err != nil || n != 2 {
		t.Fatalf("the set's release = %d, %v; want the 2 keys it still held", n, err)
	}
	for _, k := range keys {
		if _, err := e.State(ctx, lock.Lock(k)); !errors.Is(err, lock.ErrNotFound) {
			t.Fatalf("%s after the set's release: %v", k, err)
		}
	}
}
