package lock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/redistest"
)

// An election is its own kind: one leader, candidates in line, terms
// that increase across resign and lapse; a lock of the same name is
// another resource; a successor waiting in line leads right after a
// lapsed leader's TTL; Redlock has no elections.
func TestElectionsAreAKind(t *testing.T) {
	srv := redistest.Start(t)
	e := newEngine(t, srv.Client(t))
	ctx := context.Background()
	el := lock.Election("svc:leader")

	a := mustAcquire(t, e, el, lock.AcquireRequest{Owner: "a", Value: `"10.0.0.7"`})
	mustAcquire(t, e, lock.Lock("svc:leader"), lock.AcquireRequest{Owner: "a lock"})
	if _, err := e.Acquire(ctx, el, lock.AcquireRequest{Owner: "b"}); !errors.Is(err, lock.ErrHeld) {
		t.Fatalf("a second leader: %v", err)
	}
	if _, err := e.Acquire(ctx, el, lock.AcquireRequest{Owner: "b", Mode: lock.Shared}); err == nil {
		t.Fatal("a shared leadership")
	}
	if _, err := e.Release(ctx, el, a.Token, "a"); err != nil {
		t.Fatal(err)
	}
	b := mustAcquire(t, e, el, lock.AcquireRequest{Owner: "b", TTL: 300 * time.Millisecond})
	if b.Fence <= a.Fence {
		t.Fatalf("term %d after %d", b.Fence, a.Fence)
	}

	// b lapses; c, waiting in line, leads right after.
	start := time.Now()
	c, err := e.Acquire(ctx, el, lock.AcquireRequest{Owner: "c", TTL: time.Minute, Wait: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	after := time.Since(start) - 300*time.Millisecond
	t.Logf("a candidate in line led %v after the leader's TTL ended", after)
	if c.Fence <= b.Fence || after > 2*time.Second {
		t.Fatalf("successor term %d after %d, %v after the lapse", c.Fence, b.Fence, after)
	}
	page, err := e.List(ctx, lock.KindElection, "svc:", 10, "")
	if err != nil || len(page.Locks) != 1 || page.Locks[0].Resource != el || page.Locks[0].Owner != "c" {
		t.Fatalf("list of elections: %+v %v", page, err)
	}

	r := redlockOn(t, threeMasters(t), lock.Options{})
	if _, err := r.Acquire(ctx, el, lock.AcquireRequest{TTL: time.Minute}); !errors.Is(err, lock.ErrNoElections) {
		t.Fatalf("Redlock campaign: %v", err)
	}
	if _, err := r.State(ctx, el); !errors.Is(err, lock.ErrNoElections) {
		t.Fatalf("Redlock election state: %v", err)
	}
}

// runElections checks elections, values and lock-delay through two
// engines on one topology (a Sentinel's master, a Cluster's masters): the
// successor waiting on b leads with a higher term when a's leader
// resigns, values come with the state, a proclaim reaches the event
// stream, and a lapsed lease's lock-delay holds its key off.
func runElections(t *testing.T, a, b *lock.Engine) {
	t.Helper()
	ctx := context.Background()
	el := lock.Election("topo:leader")
	first := mustAcquire(t, a, el, lock.AcquireRequest{Owner: "a", Value: `{"addr":"a:1"}`})
	next := make(chan lock.Lease, 1)
	go func() {
		l, err := b.Acquire(ctx, el, lock.AcquireRequest{Owner: "b", TTL: 10 * time.Second, Wait: 10 * time.Second, Value: `{"addr":"b:1"}`})
		if err != nil {
			t.Errorf("waiting candidate: %v", err)
		}
		next <- l
	}()
	waitFor(t, func() bool {
		st, err := a.State(ctx, el)
		return err == nil && len(st.Queue) == 1
	})
	sub, err := b.Subscribe(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if _, err := a.Renew(ctx, el, lock.RenewRequest{Token: first.Token, Value: `"draining"`}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Release(ctx, el, first.Token, "a"); err != nil {
		t.Fatal(err)
	}
	second := <-next
	if second.Fence <= first.Fence || second.Owner != "b" {
		t.Fatalf("successor %+v after term %d", second, first.Fence)
	}
	if st, err := b.State(ctx, el); err != nil || st.Value != `{"addr":"b:1"}` {
		t.Fatalf("the successor's value: %+v %v", st, err)
	}
	wait, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		c, err := sub.Next(wait)
		if err != nil {
			t.Fatalf("no proclaimed event: %v", err)
		}
		if c.Resource == el && c.Type == "proclaimed" && c.Fence == first.Fence {
			break
		}
	}

	mustAcquire(t, a, lock.Lock("topo:delay"), lock.AcquireRequest{TTL: 200 * time.Millisecond, LockDelay: 2 * time.Second})
	time.Sleep(300 * time.Millisecond)
	if _, err := b.Acquire(ctx, lock.Lock("topo:delay"), lock.AcquireRequest{TTL: time.Second}); !errors.Is(err, lock.ErrLockDelay) {
		t.Fatalf("acquire during the lock-delay: %v", err)
	}
}
