package lock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/redistest"
)

// After Redis restarts without persistence, forgetting every lease, no key
// is granted until the leases it forgot have expired: holders that keep
// working until their own expiry never overlap a new holder. A lockd that
// never saw the marker learns the quarantine from the one that made it.
func TestRestartQuarantine(t *testing.T) {
	srv := redistest.Start(t)
	a := newEngine(t, srv.Client(t))
	// b learns the longest TTL that a granted from the marker.
	b := lock.New(srv.Client(t), lock.Options{EpochRefresh: 50 * time.Millisecond})
	t.Cleanup(func() { _ = b.Close() })
	ctx := context.Background()
	const ttl = 800 * time.Millisecond

	// b has seen the marker; a holds keys.
	mustAcquire(t, b, "q:warm", lock.AcquireRequest{TTL: 100 * time.Millisecond})
	var leases []lock.Lease
	for i := range 5 {
		leases = append(leases, mustAcquire(t, a, fmt.Sprint("q:", i), lock.AcquireRequest{Owner: "old", TTL: ttl}))
	}
	time.Sleep(150 * time.Millisecond) // b reads the marker
	srv.Restart()
	restarted := time.Now()

	// b tries every key until it gets it; no grant may come before the
	// old holder's lease would have expired.
	for i, old := range leases {
		key := fmt.Sprint("q:", i)
		var recovering bool
		for {
			l, err := b.Acquire(ctx, key, lock.AcquireRequest{Owner: "new", TTL: time.Second})
			if err == nil {
				if l.AcquiredAt.Before(old.ExpiresAt) {
					t.Fatalf("%s granted at %v, before the forgotten lease's expiry %v", key, l.AcquiredAt, old.ExpiresAt)
				}
				break
			}
			var rec *lock.RecoveringError
			switch {
			case errors.As(err, &rec):
				recovering = true
				if rec.Remaining > ttl+50*time.Millisecond {
					t.Fatalf("quarantine of %v for leases of %v", rec.Remaining, ttl)
				}
			case errors.Is(err, lock.ErrUnavailable):
			default:
				t.Fatalf("%s: %v", key, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
		if i == 0 && !recovering {
			t.Fatal("the first acquire after the restart was not refused")
		}
	}
	t.Logf("keys granted again %v after the restart", time.Since(restarted).Round(time.Millisecond))
	if b.Recovering() > 0 && b.Ready(ctx) == nil {
		t.Fatal("Ready during the quarantine")
	}

	// A fresh lockd on the same Redis learns the quarantine from the marker.
	mustAcquire(t, a, "q:again", lock.AcquireRequest{TTL: ttl})
	srv.Restart()
	_, _ = b.Acquire(ctx, "q:trigger", lock.AcquireRequest{TTL: time.Second}) // may be ErrUnavailable while reconnecting
	waitFor(t, func() bool {
		_, err := b.Acquire(ctx, "q:trigger2", lock.AcquireRequest{TTL: time.Second})
		return errors.Is(err, lock.ErrRecovering)
	})
	c := newEngine(t, srv.Client(t))
	if _, err := c.Acquire(ctx, "q:fresh", lock.AcquireRequest{TTL: time.Second}); !errors.Is(err, lock.ErrRecovering) {
		t.Fatalf("a new lockd during the quarantine: %v", err)
	}
	if err := c.Ready(ctx); !errors.Is(err, lock.ErrRecovering) {
		t.Fatalf("Ready of a new lockd during the quarantine: %v", err)
	}
}

// With the quarantine off, keys are granted again at once.
func TestRestartQuarantineOff(t *testing.T) {
	srv := redistest.Start(t)
	e := lock.New(srv.Client(t), lock.Options{NoQuarantine: true})
	t.Cleanup(func() { _ = e.Close() })
	mustAcquire(t, e, "qo:k", lock.AcquireRequest{TTL: 10 * time.Second})
	srv.Restart()
	waitFor(t, func() bool {
		_, err := e.Acquire(context.Background(), "qo:k", lock.AcquireRequest{TTL: time.Second})
		return err == nil
	})
}

// Many holders through two replicas while Redis restarts empty under them:
// with the quarantine, no grant of a key comes before the end of the hold
// before it. A hold ends when its holder releases the key, or at its
// lease's expiry at the latest (a holder must stop by then); times are
// Redis's, from the leases, so a slow test machine does not count.
func TestRestartWithoutPersistenceNoOverlap(t *testing.T) {
	srv := redistest.Start(t)
	replicas := []*lock.Engine{newEngine(t, srv.Client(t)), newEngine(t, srv.Client(t))}
	ctx := context.Background()
	type hold struct{ start, end time.Time }
	var (
		mu     sync.Mutex
		holds  = map[string][]hold{}
		grants atomic.Int64
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e := replicas[w%2]
			key := fmt.Sprint("nov:", w%3)
			for {
				select {
				case <-stop:
					return
				default:
				}
				l, err := e.Acquire(ctx, key, lock.AcquireRequest{Owner: fmt.Sprint("w", w), TTL: 1500 * time.Millisecond, Wait: time.Second})
				if err != nil {
					time.Sleep(10 * time.Millisecond)
					continue
				}
				grants.Add(1)
				// The holder works until shortly before its lease ends,
				// whatever happens to Redis meanwhile, then releases.
				time.Sleep(time.Until(l.ExpiresAt) - 200*time.Millisecond)
				end := time.Now()
				_, _ = e.Release(ctx, key, l.Token, "w")
				if end.After(l.ExpiresAt) {
					end = l.ExpiresAt
				}
				mu.Lock()
				holds[key] = append(holds[key], hold{l.AcquiredAt, end})
				mu.Unlock()
			}
		}()
	}
	time.Sleep(time.Second)
	restarted := time.Now()
	srv.Restart()
	time.Sleep(2500 * time.Millisecond)
	close(stop)
	wg.Wait()
	overlaps := 0
	for _, hs := range holds {
		slices.SortFunc(hs, func(a, b hold) int { return a.start.Compare(b.start) })
		for i := 1; i < len(hs); i++ {
			if hs[i].start.Before(hs[i-1].end.Add(-2 * time.Millisecond)) {
				overlaps++
				t.Logf("overlap: hold %v–%v, next granted at %v (restart at %v)",
					hs[i-1].start.Sub(restarted), hs[i-1].end.Sub(restarted), hs[i].start.Sub(restarted), 0)
			}
		}
	}
	t.Logf("%d grants, %d overlapping holds across a restart without persistence", grants.Load(), overlaps)
	if overlaps != 0 {
		t.Fatalf("%d overlapping holds", overlaps)
	}
}
