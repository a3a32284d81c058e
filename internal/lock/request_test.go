package lock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/lock"
)

// A request that the holder step aside reaches it on its next renewal,
// and every renewal after, until the lease ends; the state shows it, the
// history and the event stream record it; the lease is untouched (same
// token, fence, expiry). A key held shared is refused (ErrNotExclusive),
// a free key is ErrNotFound, another fence ErrLeaseLost.
func TestRequestRelease(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			e := newEngine(t, b.open(t))
			ctx := context.Background()
			res := lock.Lock("rq:1")
			sub, err := e.Subscribe(ctx, "")
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Close()
			l := mustAcquire(t, e, res, lock.AcquireRequest{Owner: "w1", TTL: 10 * time.Second})
			rn, err := e.Renew(ctx, res, lock.RenewRequest{Token: l.Token})
			if err != nil || rn.ReleaseRequested != nil {
				t.Fatalf("renew before any request: %+v, %v", rn.ReleaseRequested, err)
			}

			if _, err := e.RequestRelease(ctx, res, l.Fence+1, "ops", "deploy", "a"); !errors.Is(err, lock.ErrLeaseLost) {
				t.Fatalf("request to another fence: %v", err)
			}
			rr, err := e.RequestRelease(ctx, res, l.Fence, "ops", "deploy waits", "key-a")
			if err != nil || rr.Owner != "w1" || rr.Fence != l.Fence || rr.At.IsZero() {
				t.Fatalf("request: %+v, %v", rr, err)
			}
			for range 2 {
				rn, err = e.Renew(ctx, res, lock.RenewRequest{Token: l.Token})
				if err != nil || rn.ReleaseRequested == nil || rn.ReleaseRequested.By != "ops" ||
					rn.ReleaseRequested.Reason != "deploy waits" || !rn.ReleaseRequested.At.Equal(rr.At) || rn.Fence != l.Fence {
					t.Fatalf("renew after the request: %+v (%+v), %v", rn, rn.ReleaseRequested, err)
				}
			}
			st, err := e.State(ctx, res)
			if err != nil || st.ReleaseRequested == nil || st.ReleaseRequested.By != "ops" {
				t.Fatalf("state: %+v, %v", st.ReleaseRequested, err)
			}
			var types []string
			for len(types) < 2 {
				ev, err := sub.Next(ctx)
				if err != nil {
					t.Fatal(err)
				}
				types = append(types, string(ev.Type))
				if ev.Type == "release_requested" && (ev.Actor != "key-a" || ev.Reason != "deploy waits" || ev.Owner != "w1") {
					t.Fatalf("event %+v", ev)
				}
			}
			if types[1] != "release_requested" {
				t.Fatalf("events %v", types)
			}

			// The next lease starts without it.
			if _, err := e.Release(ctx, res, l.Token, "a"); err != nil {
				t.Fatal(err)
			}
			if _, err := e.RequestRelease(ctx, res, 0, "ops", "", "a"); !errors.Is(err, lock.ErrNotFound) {
				t.Fatalf("request on a free key: %v", err)
			}
			l2 := mustAcquire(t, e, res, lock.AcquireRequest{Owner: "w2"})
			if rn, err := e.Renew(ctx, res, lock.RenewRequest{Token: l2.Token}); err != nil || rn.ReleaseRequested != nil {
				t.Fatalf("the next lease: %+v, %v", rn.ReleaseRequested, err)
			}

			sh := lock.Lock("rq:shared")
			mustAcquire(t, e, sh, lock.AcquireRequest{Mode: lock.Shared})
			if _, err := e.RequestRelease(ctx, sh, 0, "ops", "", "a"); !errors.Is(err, lock.ErrNotExclusive) {
				t.Fatalf("request to shared holders: %v", err)
			}
		})
	}
}
