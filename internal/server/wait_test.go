package server_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/lockd/lockd/api"
	"github.com/lockd/lockd/internal/lockdtest"
	"github.com/lockd/lockd/internal/redistest"

	"github.com/lockd/lockd/internal/lock"
)

// A replay of an idempotent acquire is marked, answers at once while others
// wait, and a replay that asks for something else changes nothing.
func TestIdempotentReplayOverHTTP(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	params := &api.AcquireLockParams{IdempotencyKey: ptr("delivery-9")}
	body := api.AcquireRequest{Owner: ptr("webhook"), TtlMs: ptr(int64(10_000))}

	first, err := f.client.AcquireLockWithResponse(ctx, "replay:k", params, body)
	if err != nil || first.JSON200 == nil {
		t.Fatalf("first: %v %s", err, first.Body)
	}
	if first.HTTPResponse.Header.Get("Idempotent-Replayed") != "" || first.JSON200.Replayed != nil {
		t.Fatalf("the first grant is marked as a replay: %s", first.Body)
	}

	// Another client waits for the key.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		_, _ = f.client.AcquireLockWithResponse(wctx, "replay:k", nil, api.AcquireRequest{Owner: ptr("other"), WaitMs: ptr(int64(10_000))})
	}()
	lockdtest.Eventually(t, func() bool { return f.engine.Waiters() == 1 }, 5*time.Second, "the waiter registers")

	start := time.Now()
	again, err := f.client.AcquireLockWithResponse(ctx, "replay:k", params, api.AcquireRequest{Owner: ptr("webhook"), TtlMs: ptr(int64(10_000)), WaitMs: ptr(int64(5_000))})
	if err != nil || again.JSON200 == nil {
		t.Fatalf("replay: %v %s", err, again.Body)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("replay answered after %v: it queued behind the waiter", d)
	}
	if got := again.HTTPResponse.Header.Get("Idempotent-Replayed"); got != "true" {
		t.Fatalf("Idempotent-Replayed = %q", got)
	}
	if again.JSON200.Replayed == nil || !*again.JSON200.Replayed || again.JSON200.Token != first.JSON200.Token {
		t.Fatalf("replay body = %s", again.Body)
	}

	for _, tc := range []struct {
		name string
		body api.AcquireRequest
	}{
		{"another owner", api.AcquireRequest{Owner: ptr("someone"), TtlMs: ptr(int64(10_000))}},
		{"another ttl", api.AcquireRequest{Owner: ptr("webhook"), TtlMs: ptr(int64(20_000))}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := f.client.AcquireLockWithResponse(ctx, "replay:k", params, tc.body)
			if err != nil {
				t.Fatal(err)
			}
			p := problemOf(t, res.HTTPResponse, res.Body)
			if res.StatusCode() != http.StatusConflict || p.Code != "idempotency_mismatch" {
				t.Fatalf("%d %s", res.StatusCode(), res.Body)
			}
			st, err := f.engine.State(ctx, lock.Lock("replay:k"))
			if err != nil || st.Owner != "webhook" || st.Fence != first.JSON200.Fence || st.TTL != 10*time.Second {
				t.Fatalf("state changed: %+v %v", st, err)
			}
		})
	}
}

// One key, reused, through two replicas over HTTP: every waiter is woken by
// the lapse of the lease before it, whichever replica it waits on.
func TestWakeUpOnReusedKeyAcrossReplicas(t *testing.T) {
	rs := redistest.Start(t)
	replicas := []*fixture{newFixtureOn(t, rs), newFixtureOn(t, rs)}
	ctx := context.Background()
	const key = "reuse:http"
	holder := replicas[0].acquire(t, key, api.AcquireRequest{Owner: ptr("h"), TtlMs: ptr(int64(300))})
	for round := range 6 {
		f := replicas[round%2]
		start := time.Now()
		res, err := f.client.AcquireLockWithResponse(ctx, key, nil, api.AcquireRequest{
			Owner: ptr(fmt.Sprint("w", round)), TtlMs: ptr(int64(300)), WaitMs: ptr(int64(3000)),
		})
		if err != nil || res.JSON200 == nil {
			t.Fatalf("round %d: %v %d %s", round, err, res.StatusCode(), res.Body)
		}
		late := time.Since(holder.ExpiresAt)
		if late < -2*time.Millisecond || late > 750*time.Millisecond {
			t.Fatalf("round %d: granted %v after the lapse (asked %v before it)", round, late, holder.ExpiresAt.Sub(start))
		}
		holder = *res.JSON200
	}
}
