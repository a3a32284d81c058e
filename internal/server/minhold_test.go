package server_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lockd/lockd/api"
)

// A release inside the hold window keeps the key: others get 409
// min_hold with remaining_ms and Retry-After, the old token is done with
// (404, as after any release), the state shows min_hold_until with nobody
// holding, a waiter is granted when the window ends, and a force-release
// ends a window at once.
func TestMinHoldOverHTTP(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	const window = 1500

	l := f.acquire(t, "mh:job", api.AcquireRequest{Owner: ptr("node-1"), TtlMs: ptr[int64](60000), MinHoldMs: ptr[int64](window)})
	until := l.AcquiredAt.Add(window * time.Millisecond)
	rel, err := f.client.ReleaseLockWithResponse(ctx, "mh:job", api.ReleaseRequest{Token: l.Token})
	if err != nil || rel.JSON200 == nil || !rel.JSON200.Released {
		t.Fatalf("early release: %v %s", err, rel.Body)
	}

	res, err := f.client.AcquireLockWithResponse(ctx, "mh:job", nil, api.AcquireRequest{Owner: ptr("node-2")})
	if err != nil {
		t.Fatal(err)
	}
	p := problemOf(t, res.HTTPResponse, res.Body)
	ra := res.HTTPResponse.Header.Get("Retry-After")
	if res.StatusCode() != http.StatusConflict || p.Code != api.ProblemCodeMinHold || p.RemainingMs == nil ||
		*p.RemainingMs <= 0 || *p.RemainingMs > window || (ra != "1" && ra != "2") || p.Holder != nil {
		t.Fatalf("acquire inside the window: %d %s (Retry-After %q)", res.StatusCode(), res.Body, ra)
	}

	get, err := f.client.GetLockWithResponse(ctx, "mh:job")
	if err != nil || get.JSON200 == nil {
		t.Fatalf("state: %v %s", err, get.Body)
	}
	st := get.JSON200
	if st.MinHoldUntil == nil || !st.MinHoldUntil.Equal(until) || st.Count != 0 || len(st.Holders) != 0 ||
		st.HoldersTotal == nil || *st.HoldersTotal != 0 || st.Owner != "node-1" || !st.ExpiresAt.Equal(until) {
		t.Fatalf("state inside the window: %s", get.Body)
	}

	rn, err := f.client.RenewLockWithResponse(ctx, "mh:job", api.RenewRequest{Token: l.Token})
	if err != nil || rn.StatusCode() != http.StatusNotFound {
		t.Fatalf("renew with the released token: %v %d %s", err, rn.StatusCode(), rn.Body)
	}
	rel, err = f.client.ReleaseLockWithResponse(ctx, "mh:job", api.ReleaseRequest{Token: l.Token})
	if err != nil || rel.StatusCode() != http.StatusNotFound {
		t.Fatalf("release with the released token: %v %d %s", err, rel.StatusCode(), rel.Body)
	}

	// A waiter is granted when the window ends.
	next := f.acquire(t, "mh:job", api.AcquireRequest{Owner: ptr("node-2"), WaitMs: ptr[int64](10000)})
	if next.AcquiredAt.Before(until) {
		t.Fatalf("granted at %v, inside the window that ends at %v", next.AcquiredAt, until)
	}

	// A force-release ends a window.
	l = f.acquire(t, "mh:stuck", api.AcquireRequest{TtlMs: ptr[int64](60000), MinHoldMs: ptr[int64](60000)})
	if rel, err := f.client.ReleaseLockWithResponse(ctx, "mh:stuck", api.ReleaseRequest{Token: l.Token}); err != nil || rel.JSON200 == nil {
		t.Fatalf("early release: %v", err)
	}
	fr, err := f.client.ForceReleaseLockWithResponse(ctx, "mh:stuck", api.ForceReleaseRequest{Fence: &l.Fence, Reason: ptr("rerun")})
	if err != nil || fr.StatusCode() != http.StatusOK {
		t.Fatalf("force-release of the window: %v %d %s", err, fr.StatusCode(), fr.Body)
	}
	f.acquire(t, "mh:stuck", api.AcquireRequest{})
}

// min_hold_ms is a window of 0 … ttl_ms for an exclusive hold not in a
// session; anything else is a 400 that names it.
func TestMinHoldBadRequests(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	sess, err := f.client.CreateSessionWithResponse(ctx, api.SessionRequest{Owner: ptr("w")})
	if err != nil || sess.JSON201 == nil {
		t.Fatalf("session: %v", err)
	}
	for _, tc := range []struct {
		name string
		body api.AcquireRequest
	}{
		{"above the TTL", api.AcquireRequest{TtlMs: ptr[int64](1000), MinHoldMs: ptr[int64](1001)}},
		{"above the default TTL", api.AcquireRequest{MinHoldMs: ptr[int64](30001)}},
		{"negative", api.AcquireRequest{MinHoldMs: ptr[int64](-1)}},
		{"shared", api.AcquireRequest{Mode: ptr(api.LockModeShared), MinHoldMs: ptr[int64](1000)}},
		{"in a session", api.AcquireRequest{Session: sess.JSON201.Session, MinHoldMs: ptr[int64](1000)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := f.client.AcquireLockWithResponse(ctx, "mh:bad", nil, tc.body)
			if err != nil {
				t.Fatal(err)
			}
			p := problemOf(t, res.HTTPResponse, res.Body)
			if res.StatusCode() != http.StatusBadRequest || p.Field == nil || *p.Field != "min_hold_ms" {
				t.Fatalf("%d %s", res.StatusCode(), res.Body)
			}
		})
	}
	// 0 is no window, and a window as long as the TTL is one.
	f.acquire(t, "mh:zero", api.AcquireRequest{MinHoldMs: ptr[int64](0)})
	f.acquire(t, "mh:whole", api.AcquireRequest{TtlMs: ptr[int64](1000), MinHoldMs: ptr[int64](1000)})
	// A semaphore's and an election's bodies have no such field.
	res, err := f.client.AcquireSemaphoreWithBodyWithResponse(ctx, "mh:sem", nil, "application/json",
		strings.NewReader(`{"limit":2,"min_hold_ms":1000}`))
	if err != nil {
		t.Fatal(err)
	}
	if p := problemOf(t, res.HTTPResponse, res.Body); res.StatusCode() != http.StatusBadRequest || p.Field == nil || *p.Field != "min_hold_ms" {
		t.Fatalf("a semaphore with min_hold_ms: %d %s", res.StatusCode(), res.Body)
	}
}
