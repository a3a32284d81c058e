package lock_test

import (
	"context"
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
