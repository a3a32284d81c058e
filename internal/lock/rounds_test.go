package lock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/redistest"
)

// TestNextRoundKeepsItsPlace: a wait longer than the server's longest
// goes in rounds of one request (one Idempotency-Key). The next round
// takes up the place and waiting-since that the round before it left, so
// it stays ahead of a waiter that came after it, though that waiter
// stayed queued while the first round had left (issue 35, item 2).
func TestNextRoundKeepsItsPlace(t *testing.T) {
	srv := redistest.Start(t)
	e := newEngine(t, srv.Client(t))
	ctx := context.Background()
	key := lock.Lock("rounds:k")
	h := mustAcquire(t, e, key, lock.AcquireRequest{Owner: "holder", TTL: time.Minute})

	round := lock.AcquireRequest{Owner: "patient", TTL: 10 * time.Second, Wait: 300 * time.Millisecond, IdempotencyKey: "deploy-1"}
	first := make(chan error, 1)
	go func() {
		_, err := e.Acquire(ctx, key, round)
		first <- err
	}()
	var since time.Time
	waitFor(t, func() bool {
		st, err := e.State(ctx, key)
		if err != nil || len(st.Queue) != 1 {
			return false
		}
		since = st.Queue[0].WaitingSince
		return true
	})
	later := make(chan error, 1)
	go func() {
		l, err := e.Acquire(ctx, key, lock.AcquireRequest{Owner: "later", TTL: 10 * time.Second, Wait: 20 * time.Second})
		if err == nil {
			_, err = e.Release(ctx, key, l.Token, "later")
		}
		later <- err
	}()
	waitFor(t, func() bool {
		st, err := e.State(ctx, key)
		return err == nil && len(st.Queue) == 2
	})
	if err := <-first; !errors.Is(err, lock.ErrHeld) {
		t.Fatalf("the first round: %v, want held", err)
	}
	// The next round, as a client sends it at once.
	round.Wait = 20 * time.Second
	second := make(chan error, 1)
	var granted lock.Lease
	go func() {
		var err error
		granted, err = e.Acquire(ctx, key, round)
		second <- err
	}()
	waitFor(t, func() bool {
		st, err := e.State(ctx, key)
		return err == nil && len(st.Queue) == 2 && st.Queue[0].Owner == "patient"
	})
	st, err := e.State(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Queue[0].WaitingSince; !got.Equal(since) {
		t.Errorf("the next round waits since %v, want the first round's %v", got, since)
	}
	if st.Queue[1].Owner != "later" {
		t.Errorf("queue %+v, want patient then later", st.Queue)
	}
	if _, err := e.Release(ctx, key, h.Token, "holder"); err != nil {
		t.Fatal(err)
	}
	if err := <-second; err != nil {
		t.Fatalf("the next round: %v, want granted first", err)
	}
	if _, err := e.Release(ctx, key, granted.Token, "patient"); err != nil {
		t.Fatal(err)
	}
	if err := <-later; err != nil {
		t.Fatalf("the later waiter: %v", err)
	}
}

// A wait that ran the server's longest wait with an Idempotency-Key is one
// round of a longer one: its place stays queued between two rounds, so a
// release in that gap goes to nobody behind it, and the next round is
// granted at once, ahead of a waiter that came after it (issue 35, item 2).
// A wait shorter than the longest keeps no queued place: its key goes on.
func TestRoundsKeepTheirPlaceQueued(t *testing.T) {
	srv := redistest.Start(t)
	e := lock.New(srv.Client(t), lock.Options{MaxWait: time.Second})
	t.Cleanup(func() { _ = e.Close() })
	ctx := context.Background()
	key := lock.Lock("kr:k")
	h := mustAcquire(t, e, key, lock.AcquireRequest{Owner: "holder", TTL: time.Minute})
	round := func(wait time.Duration) (lock.Lease, error) {
		return e.Acquire(ctx, key, lock.AcquireRequest{Owner: "rounds", TTL: 10 * time.Second, Wait: wait, IdempotencyKey: "r-1"})
	}
	if _, err := round(time.Second); !errors.Is(err, lock.ErrHeld) {
		t.Fatalf("the first round: %v", err)
	}
	later := make(chan error, 1)
	go func() {
		l, err := e.Acquire(ctx, key, lock.AcquireRequest{Owner: "later", TTL: 10 * time.Second, Wait: time.Second})
		if err == nil && l.Owner != "later" {
			err = fmt.Errorf("granted as %q", l.Owner)
		}
		later <- err
	}()
	waitFor(t, func() bool { st, _ := e.State(ctx, key); return len(st.Queue) == 2 })
	// The release falls between two rounds.
	if _, err := e.Release(ctx, key, h.Token, "t"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-later:
		t.Fatalf("the waiter that came later was answered %v while the first waited between two rounds", err)
	default:
	}
	l, err := round(time.Second)
	if err != nil || l.Owner != "rounds" {
		t.Fatalf("the next round: %+v, %v", l, err)
	}
	if st, _ := e.State(ctx, key); len(st.Queue) != 1 || st.Queue[0].Owner != "later" {
		t.Fatalf("the queue after the next round's grant: %+v", st.Queue)
	}
	if _, err := e.Release(ctx, key, l.Token, "t"); err != nil {
		t.Fatal(err)
	}
	if err := <-later; err != nil {
		t.Fatalf("the waiter that came later: %v", err)
	}
}
