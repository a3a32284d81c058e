package lock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/lock"
)

// A grant carries its value into the state, per holder; a renew or a
// re-entry with a value replaces it, one without keeps it; a waiter's
// value comes with the key when a release hands it over.
func TestValues(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			e := newEngine(t, b.open(t))
			ctx := context.Background()
			state := func(res lock.Resource) lock.State {
				t.Helper()
				st, err := e.State(ctx, res)
				if err != nil {
					t.Fatal(err)
				}
				return st
			}

			x := mustAcquire(t, e, lock.Lock("v:x"), lock.AcquireRequest{Value: `{"addr":"10.0.0.7:8080"}`})
			if st := state(lock.Lock("v:x")); st.Value != `{"addr":"10.0.0.7:8080"}` || st.Holders[0].Value != st.Value {
				t.Fatalf("exclusive: %q %+v", st.Value, st.Holders)
			}
			if _, err := e.Renew(ctx, lock.Lock("v:x"), lock.RenewRequest{Token: x.Token}); err != nil {
				t.Fatal(err)
			}
			if st := state(lock.Lock("v:x")); st.Value != `{"addr":"10.0.0.7:8080"}` {
				t.Fatalf("renew without a value: %q", st.Value)
			}
			if _, err := e.Renew(ctx, lock.Lock("v:x"), lock.RenewRequest{Token: x.Token, Value: `"draining"`}); err != nil {
				t.Fatal(err)
			}
			if st := state(lock.Lock("v:x")); st.Value != `"draining"` {
				t.Fatalf("renew with a value: %q", st.Value)
			}
			mustAcquire(t, e, lock.Lock("v:x"), lock.AcquireRequest{Token: x.Token, Value: `[1,2]`})
			if st := state(lock.Lock("v:x")); st.Value != `[1,2]` || st.Count != 2 {
				t.Fatalf("re-entry with a value: %q count %d", st.Value, st.Count)
			}

			mustAcquire(t, e, lock.Lock("v:s"), lock.AcquireRequest{Owner: "r1", Mode: lock.Shared, Value: `1`})
			r2 := mustAcquire(t, e, lock.Lock("v:s"), lock.AcquireRequest{Owner: "r2", Mode: lock.Shared})
			p := mustAcquire(t, e, lock.Semaphore("v:p"), lock.AcquireRequest{Limit: 2, Value: `{"job":9}`})
			if _, err := e.Renew(ctx, lock.Lock("v:s"), lock.RenewRequest{Token: r2.Token, Value: `2`}); err != nil {
				t.Fatal(err)
			}
			if st := state(lock.Lock("v:s")); len(st.Holders) != 2 || st.Holders[0].Value != `1` || st.Holders[1].Value != `2` || st.Value != `2` {
				t.Fatalf("shared: %q %+v", st.Value, st.Holders)
			}
			if st := state(lock.Semaphore("v:p")); st.Value != `{"job":9}` || st.Holders[0].Value != st.Value {
				t.Fatalf("permit: %q %+v", st.Value, st.Holders)
			}
			_, _ = e.Release(ctx, lock.Semaphore("v:p"), p.Token, "t")

			// Hand-off: the waiter's value comes with the key.
			h := mustAcquire(t, e, lock.Lock("v:h"), lock.AcquireRequest{Value: `"first"`})
			done := make(chan error, 1)
			go func() {
				_, err := e.Acquire(ctx, lock.Lock("v:h"), lock.AcquireRequest{Owner: "w", TTL: time.Minute, Wait: 10 * time.Second, Value: `"second"`})
				done <- err
			}()
			waitFor(t, func() bool { return len(state(lock.Lock("v:h")).Queue) == 1 })
			if _, err := e.Release(ctx, lock.Lock("v:h"), h.Token, "t"); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if st := state(lock.Lock("v:h")); st.Owner != "w" || st.Value != `"second"` {
				t.Fatalf("handed over: %s %q", st.Owner, st.Value)
			}
		})
	}
}

// N24: an idempotent replay carries the request it replays, value
// included: one with the same value answers the grant (whose value is
// that one), one with another value, or none where the grant has one, is
// refused as a mismatch and changes nothing. Never is a replay answered
// as though its own value were the grant's.
func TestReplayWithAnotherValue(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			e := newEngine(t, b.open(t))
			ctx := context.Background()
			for _, c := range []struct {
				res lock.Resource
				req lock.AcquireRequest
			}{
				{lock.Election("rv:e"), lock.AcquireRequest{Owner: "c1"}},
				{lock.Lock("rv:l"), lock.AcquireRequest{Owner: "o"}},
				{lock.Lock("rv:s"), lock.AcquireRequest{Owner: "o", Mode: lock.Shared}},
				{lock.Semaphore("rv:p"), lock.AcquireRequest{Owner: "o", Limit: 2}},
			} {
				req := c.req
				req.TTL, req.IdempotencyKey, req.Actor, req.Value = 30*time.Second, "rv-1", "a", `{"a":1}`
				first := mustAcquire(t, e, c.res, req)
				same := mustAcquire(t, e, c.res, req)
				if same.Outcome != lock.Replayed || same.Token != first.Token {
					t.Fatalf("%v: replay with the same value: %+v", c.res, same)
				}
				for _, value := range []string{`{"a":2}`, ""} {
					other := req
					other.Value = value
					if l, err := e.Acquire(ctx, c.res, other); !errors.Is(err, lock.ErrIdempotencyMismatch) {
						t.Errorf("%v: replay with value %q: %+v, %v; want ErrIdempotencyMismatch", c.res, value, l, err)
					}
				}
				st, err := e.State(ctx, c.res)
				if err != nil || st.Value != `{"a":1}` {
					t.Errorf("%v: value after the replays: %q, %v", c.res, st.Value, err)
				}
			}
		})
	}
}
