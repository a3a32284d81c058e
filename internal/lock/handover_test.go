package lock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/lock"
)

// A handover gives the leadership to the named candidate, ahead of
// earlier ones; a candidate that is not campaigning is ErrNotCandidate and
// the leader still leads; a wrong token is ErrLeaseLost.
func TestHandover(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			e := newEngine(t, b.open(t))
			ctx := context.Background()
			el := lock.Election("ho:leader")
			a := mustAcquire(t, e, el, lock.AcquireRequest{Owner: "a"})

			type led struct {
				l   lock.Lease
				err error
			}
			campaign := func(name string) <-chan led {
				out := make(chan led, 1)
				go func() {
					l, err := e.Acquire(ctx, el, lock.AcquireRequest{Owner: name, TTL: 10 * time.Second, Wait: 20 * time.Second})
					out <- led{l, err}
				}()
				return out
			}
			waitQueued := func(n int) {
				for deadline := time.Now().Add(10 * time.Second); ; {
					st, err := e.State(ctx, el)
					if err == nil && len(st.Queue) == n {
						return
					}
					if time.Now().After(deadline) {
						t.Fatalf("%d candidates not queued: %+v %v", n, st.Queue, err)
					}
					time.Sleep(10 * time.Millisecond)
				}
			}
			bc := campaign("b")
			waitQueued(1)
			cc := campaign("c")
			waitQueued(2)

			if _, err := e.Handover(ctx, el, a.Token, "nobody", "a"); !errors.Is(err, lock.ErrNotCandidate) {
				t.Fatalf("handover to a non-candidate: %v", err)
			}
			if _, err := e.Handover(ctx, el, "not-the-token", "c", "a"); !errors.Is(err, lock.ErrLeaseLost) {
				t.Fatalf("handover with a wrong token: %v", err)
			}
			if st, err := e.State(ctx, el); err != nil || st.Owner != "a" {
				t.Fatalf("after refused handovers: %+v %v", st, err)
			}
			if _, err := e.Handover(ctx, el, a.Token, "c", "a"); err != nil {
				t.Fatal(err)
			}
			var c led
			select {
			case c = <-cc:
			case <-time.After(10 * time.Second):
				t.Fatal("c did not lead after the handover")
			}
			if c.err != nil || c.l.Owner != "c" || c.l.Fence <= a.Fence {
				t.Fatalf("c: %+v %v", c.l, c.err)
			}
			if _, err := e.Release(ctx, el, c.l.Token, "c"); err != nil {
				t.Fatal(err)
			}
			if b := <-bc; b.err != nil || b.l.Owner != "b" {
				t.Fatalf("b after c: %+v %v", b.l, b.err)
			}
		})
	}
}
