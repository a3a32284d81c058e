package lock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/lockdtest"
	"github.com/lockd/lockd/internal/redistest"
)

// An acquire that Redis does not answer in time is answered unavailable,
// but its script runs when Redis resumes. Without an Idempotency-Key
// nobody could ever release that grant, so lockd gives it back; with one,
// the grant stays for the caller's retry, which replays it.
func TestUnansweredAcquireIsGivenBack(t *testing.T) {
	srv := redistest.Start(t)
	e := lock.New(tunedClient(t, srv), lock.Options{CallTimeout: 300 * time.Millisecond})
	t.Cleanup(func() { _ = e.Close() })
	ctx := context.Background()
	mustAcquire(t, e, lock.Lock("gb:warm"), lock.AcquireRequest{}) // scripts loaded, connections open

	unanswered := func(res lock.Resource, idem string) {
		t.Helper()
		srv.Pause()
		_, err := e.Acquire(ctx, res, lock.AcquireRequest{Owner: "late", TTL: time.Minute, IdempotencyKey: idem})
		srv.Resume()
		if !errors.Is(err, lock.ErrUnavailable) {
			t.Fatalf("acquire while Redis is paused: %v", err)
		}
	}

	unanswered(lock.Lock("gb:plain"), "")
	lockdtest.Eventually(t, func() bool {
		_, err := e.State(ctx, lock.Lock("gb:plain"))
		return errors.Is(err, lock.ErrNotFound)
	}, 10*time.Second, "the unanswered grant given back")
	evs, err := e.History(ctx, lock.Lock("gb:plain"), 10)
	if err != nil || len(evs) < 2 || evs[0].Type != "released" || evs[0].Actor != "lockd" || evs[1].Type != "acquired" {
		t.Fatalf("history of a grant given back: %+v %v", evs, err)
	}

	unanswered(lock.Lock("gb:idem"), "retry-me")
	l, err := e.Acquire(ctx, lock.Lock("gb:idem"), lock.AcquireRequest{Owner: "late", TTL: time.Minute, IdempotencyKey: "retry-me"})
	if err != nil || l.Outcome != lock.Replayed {
		t.Fatalf("retry with the Idempotency-Key: %+v %v", l, err)
	}
	time.Sleep(2 * time.Second) // longer than a give-back would take
	if st, err := e.State(ctx, lock.Lock("gb:idem")); err != nil || st.Fence != l.Fence {
		t.Fatalf("the replayed lease after the retry: %+v %v", st, err)
	}
}
