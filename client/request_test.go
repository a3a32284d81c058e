package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockd/lockd/api"
	"github.com/lockd/lockd/client"
)

// RequestRelease reaches the holder's lease on its next renewal: the
// ReleaseRequested channel closes, ReleaseRequest says who and why, the
// callback runs once per request; the lease stays held. A key held
// shared is ErrNotExclusive, a free key ErrNotFound.
func TestRequestRelease(t *testing.T) {
	ld := startLockd(t)
	c := newClient(t, ld.URL)
	ctx := context.Background()
	key := uniqueKey(t)

	l, err := c.Acquire(ctx, key, client.AcquireOptions{Owner: "holder", TTL: 600 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	calls := make(chan api.ReleaseRequested, 10)
	l.OnReleaseRequest(func(r api.ReleaseRequested) { calls <- r })
	if _, ok := l.ReleaseRequest(); ok {
		t.Fatal("a request before anybody asked")
	}
	res, err := c.RequestRelease(ctx, key, "deploy-42", "the deploy needs it")
	if err != nil || res.Owner != "holder" || res.Fence != l.Fence() {
		t.Fatalf("request-release: %+v, %v", res, err)
	}
	// The watchdog renews every ttl/3; the contract bounds the wait by the
	// renewal, well within 10 s even on a busy machine.
	select {
	case <-l.ReleaseRequested():
	case <-time.After(10 * time.Second):
		t.Fatal("the lease did not learn of the request")
	}
	rq, ok := l.ReleaseRequest()
	if !ok || rq.By != "deploy-42" || rq.Reason != "the deploy needs it" || !rq.At.Equal(res.RequestedAt) {
		t.Fatalf("request %+v, %v", rq, ok)
	}
	if got := <-calls; got.By != "deploy-42" {
		t.Fatalf("callback %+v", got)
	}
	// Two more renewals answer the same request: no second call.
	for n := l.Renewals() + 2; l.Renewals() < n; {
		select {
		case <-l.Lost():
			t.Fatalf("lost: %v", l.Err())
		case r := <-calls:
			t.Fatalf("a second call for the same request: %+v", r)
		case <-time.After(50 * time.Millisecond):
		}
	}

	shared := uniqueKey(t) + ":shared"
	sl, err := c.Acquire(ctx, shared, client.AcquireOptions{Mode: client.Shared})
	if err != nil {
		t.Fatal(err)
	}
	defer sl.Release(ctx)
	if _, err := c.RequestRelease(ctx, shared, "", ""); !errors.Is(err, client.ErrNotExclusive) {
		t.Fatalf("shared: %v", err)
	}
	if _, err := c.RequestRelease(ctx, uniqueKey(t)+":free", "", ""); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("free: %v", err)
	}
}

// A lease bound to a session hears of a request that its holder step
// aside from the session's renewals (it has no watchdog of its own).
func TestRequestReleaseInASession(t *testing.T) {
	ld := startLockd(t)
	c := newClient(t, ld.URL)
	ctx := context.Background()
	key := uniqueKey(t)

	s, err := c.NewSession(ctx, client.SessionOptions{TTL: 600 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.End(ctx)
	l, err := c.Acquire(ctx, key, client.AcquireOptions{Owner: "holder", Session: s})
	if err != nil {
		t.Fatal(err)
	}
	calls := make(chan api.ReleaseRequested, 10)
	l.OnReleaseRequest(func(r api.ReleaseRequested) { calls <- r })
	res, err := c.RequestRelease(ctx, key, "ops", "rerun")
	if err != nil || res.Fence != l.Fence() {
		t.Fatalf("request-release: %+v, %v", res, err)
	}
	// The session renews every ttl/3.
	select {
	case <-l.ReleaseRequested():
	case <-time.After(10 * time.Second):
		t.Fatal("the lease did not learn of the request from its session")
	}
	if rq, ok := l.ReleaseRequest(); !ok || rq.By != "ops" || rq.Reason != "rerun" || !rq.At.Equal(res.RequestedAt) {
		t.Fatalf("request %+v, %v", rq, ok)
	}
	if got := <-calls; got.By != "ops" {
		t.Fatalf("callback %+v", got)
	}
}

// Lease.Handover gives the leadership to the named candidate ahead of an
// earlier one; a name that is not campaigning is ErrNotCandidate, and the
// leader still leads.
func TestHandover(t *testing.T) {
	ld := startLockd(t)
	c := newClient(t, ld.URL)
	ctx := context.Background()
	name := uniqueKey(t)
	a, err := c.Campaign(ctx, name, client.AcquireOptions{Owner: "a", TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	led := make(chan string, 2)
	for _, who := range []string{"b", "c"} {
		go func() {
			l, err := c.Campaign(ctx, name, client.AcquireOptions{Owner: who, TTL: 5 * time.Second, Wait: 20 * time.Second})
			if err != nil {
				led <- "error: " + err.Error()
				return
			}
			led <- who
			_ = l.Release(ctx)
		}()
		for deadline := time.Now().Add(10 * time.Second); ; {
			st, err := c.Leader(ctx, name)
			if err == nil && len(st.Candidates) > 0 && st.Candidates[len(st.Candidates)-1].Candidate == who {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s not in line", who)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if err := a.Handover(ctx, "nobody"); !errors.Is(err, client.ErrNotCandidate) {
		t.Fatalf("handover to a non-candidate: %v", err)
	}
	if err := a.Handover(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"c", "b"} {
		select {
		case got := <-led:
			if got != want {
				t.Fatalf("led %s, want %s", got, want)
			}
		case <-time.After(15 * time.Second):
			t.Fatalf("%s did not lead", want)
		}
	}
}
