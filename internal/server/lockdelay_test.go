package server_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/lockd/lockd/api"
	"github.com/lockd/lockd/internal/redistest"
	"github.com/lockd/lockd/internal/server"
)

// After a lease with a lock-delay lapses, an acquire answers 409
// lock_delay with remaining_ms and Retry-After; the server's default
// applies to exclusive acquires that name none; a shared hold or a delay
// out of range is a 400 that names lock_delay_ms.
func TestLockDelayOverHTTP(t *testing.T) {
	f := newFixtureWith(t, redistest.Start(t), func(c *server.Config) { c.LockDelay = 1500 * time.Millisecond })
	ctx := context.Background()

	f.acquire(t, "ld:a", api.AcquireRequest{TtlMs: ptr[int64](200)}) // the server's default delay
	time.Sleep(300 * time.Millisecond)
	res, err := f.client.AcquireLockWithResponse(ctx, "ld:a", nil, api.AcquireRequest{})
	if err != nil {
		t.Fatal(err)
	}
	p := problemOf(t, res.HTTPResponse, res.Body)
	if res.StatusCode() != http.StatusConflict || p.Code != api.ProblemCodeLockDelay || p.RemainingMs == nil ||
		*p.RemainingMs <= 0 || *p.RemainingMs > 1500 || res.HTTPResponse.Header.Get("Retry-After") != "2" {
		t.Fatalf("acquire during the delay: %d %s (Retry-After %q)", res.StatusCode(), res.Body, res.HTTPResponse.Header.Get("Retry-After"))
	}

	// lock_delay_ms 0 turns the default off for this lease.
	f.acquire(t, "ld:b", api.AcquireRequest{TtlMs: ptr[int64](200), LockDelayMs: ptr[int64](0)})
	time.Sleep(300 * time.Millisecond)
	f.acquire(t, "ld:b", api.AcquireRequest{})

	for _, body := range []api.AcquireRequest{
		{Mode: ptr(api.LockModeShared), LockDelayMs: ptr[int64](1000)},
		{LockDelayMs: ptr[int64](60001)},
		{LockDelayMs: ptr[int64](-1)},
	} {
		res, err := f.client.AcquireLockWithResponse(ctx, "ld:bad", nil, body)
		if err != nil {
			t.Fatal(err)
		}
		p := problemOf(t, res.HTTPResponse, res.Body)
		if res.StatusCode() != http.StatusBadRequest || p.Field == nil || *p.Field != "lock_delay_ms" {
			t.Errorf("%+v: %d %s", body, res.StatusCode(), res.Body)
		}
	}
	// A shared hold under the server's default has none.
	f.acquire(t, "ld:s", api.AcquireRequest{Mode: ptr(api.LockModeShared)})
}
