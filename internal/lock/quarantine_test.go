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
	mustAcquire(t, b, lock.Lock("q:warm"), lock.AcquireRequest{TTL: 100 * time.Millisecond})
	var leases []lock.Lease
	for i := range 5 {
		leases = append(leases, mustAcquire(t, a, lock.Lock(fmt.Sprint("q:", i)), lock.AcquireRequest{Owner: "old", TTL: ttl}))
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
			l, err := b.Acquire(ctx, lock.Lock(key), lock.AcquireRequest{Owner: "new", TTL: time.Second})
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
				// The marker's live is rounded up to the next second.
				if rec.Remaining > ttl+time.Second+50*time.Millisecond {
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
	mustAcquire(t, a, lock.Lock("q:again"), lock.AcquireRequest{TTL: ttl})
	srv.Restart()
	_, _ = b.Acquire(ctx, lock.Lock("q:trigger"), lock.AcquireRequest{TTL: time.Second}) // may be ErrUnavailable while reconnecting
	waitFor(t, func() bool {
		_, err := b.Acquire(ctx, lock.Lock("q:trigger2"), lock.AcquireRequest{TTL: time.Second})
		return errors.Is(err, lock.ErrRecovering)
	})
	c := newEngine(t, srv.Client(t))
	if _, err := c.Acquire(ctx, lock.Lock("q:fresh"), lock.AcquireRequest{TTL: time.Second}); !errors.Is(err, lock.ErrRecovering) {
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
	mustAcquire(t, e, lock.Lock("qo:k"), lock.AcquireRequest{TTL: 10 * time.Second})
	srv.Restart()
	waitFor(t, func() bool {
		_, err := e.Acquire(context.Background(), lock.Lock("qo:k"), lock.AcquireRequest{TTL: time.Second})
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
				l, err := e.Acquire(ctx, lock.Lock(key), lock.AcquireRequest{Owner: fmt.Sprint("w", w), TTL: 1500 * time.Millisecond, Wait: time.Second})
				if err != nil {
					time.Sleep(10 * time.Millisecond)
					continue
				}
				grants.Add(1)
				// The holder works until shortly before its lease ends,
				// whatever happens to Redis meanwhile, then releases.
				time.Sleep(time.Until(l.ExpiresAt) - 200*time.Millisecond)
				end := time.Now()
				_, _ = e.Release(ctx, lock.Lock(key), l.Token, "w")
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

// afterLoss tries key through e until it is granted, from just after a
// loss of data, and returns the first quarantine it met (nil: none) and
// the grant. A grant must come within limit of the loss.
func afterLoss(t *testing.T, e *lock.Engine, key string, lost time.Time, limit time.Duration) (*lock.RecoveringError, lock.Lease) {
	t.Helper()
	var first *lock.RecoveringError
	for {
		l, err := e.Acquire(context.Background(), lock.Lock(key), lock.AcquireRequest{Owner: "after", TTL: time.Second})
		var rec *lock.RecoveringError
		switch {
		case err == nil:
			return first, l
		case errors.As(err, &rec):
			if first == nil {
				first = rec
			}
			if rec.Remaining > limit {
				t.Fatalf("quarantine of %v after the loss, want at most %v", rec.Remaining, limit)
			}
		case errors.Is(err, lock.ErrUnavailable):
		default:
			t.Fatalf("%s: %v", key, err)
		}
		if time.Since(lost) > limit+2*time.Second {
			t.Fatalf("%s not granted %v after the loss", key, time.Since(lost))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The quarantine after a loss lasts as long as a lease that could have
// been live then, not as long as the longest TTL ever granted: a 120 s
// lease released before the loss does not count, a 60 s lease live at
// the loss does, and a lease granted just before the loss through a lockd
// that no other one heard from since counts too. With the default refresh.
func TestRestartQuarantineFollowsLiveLeases(t *testing.T) {
	srv := redistest.Start(t)
	a := newEngine(t, srv.Client(t))
	b := newEngine(t, srv.Client(t))
	ctx := context.Background()
	const refresh = time.Second // Options.EpochRefresh's default

	t.Run("a long lease released before the loss", func(t *testing.T) {
		mustAcquire(t, b, lock.Lock("ql:warm"), lock.AcquireRequest{TTL: 100 * time.Millisecond})
		long := mustAcquire(t, a, lock.Lock("ql:long"), lock.AcquireRequest{TTL: 120 * time.Second})
		if _, err := a.Release(ctx, lock.Lock("ql:long"), long.Token, "t"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(refresh + 200*time.Millisecond) // b reads the marker
		srv.Restart()
		lost := time.Now()
		rec, _ := afterLoss(t, b, "ql:k", lost, 5*time.Second)
		if rec == nil {
			t.Fatal("no quarantine after the loss")
		}
		t.Logf("nothing held at the loss: quarantine of %v, granted again %v after the restart",
			rec.Remaining.Round(time.Millisecond), time.Since(lost).Round(time.Millisecond))
		if since := time.Since(lost); since > 5*time.Second {
			t.Fatalf("granted again only %v after the restart", since)
		}
	})

	t.Run("a 60 s lease live at the loss", func(t *testing.T) {
		live := mustAcquire(t, a, lock.Lock("ql:live"), lock.AcquireRequest{TTL: 60 * time.Second})
		time.Sleep(refresh + 200*time.Millisecond) // b reads the marker
		srv.Restart()
		var rec *lock.RecoveringError
		retry(t, "an acquire after the restart", func() (lock.Lease, error) {
			l, err := b.Acquire(ctx, lock.Lock("ql:other"), lock.AcquireRequest{TTL: time.Second})
			if errors.As(err, &rec) {
				return l, nil
			}
			if err == nil {
				t.Fatalf("granted at %v during the quarantine (the live lease ends at %v)", l.AcquiredAt, live.ExpiresAt)
			}
			return l, err
		})
		left := time.Until(live.ExpiresAt)
		t.Logf("60 s lease live at the loss: quarantine of %v, the lease had %v left", rec.Remaining.Round(time.Millisecond), left.Round(time.Millisecond))
		if rec.Remaining < left-time.Second || rec.Remaining > left+2*time.Second {
			t.Fatalf("quarantine of %v, the lease live at the loss had %v left", rec.Remaining, left)
		}
		if err := b.Ready(ctx); !errors.As(err, &rec) {
			t.Fatalf("Ready during the quarantine: %v", err)
		}
	})
}

// A lease granted just before the loss, through a lockd whose grant no
// other one has read yet, still holds the quarantine up: the lockd that
// finds the loss waits two refreshes, and the granting one adds its lease
// to the quarantine with its next refresh, without a request of its own.
func TestRestartQuarantineHearsEveryLockd(t *testing.T) {
	srv := redistest.Start(t)
	opts := lock.Options{EpochRefresh: 300 * time.Millisecond}
	a := lock.New(srv.Client(t), opts)
	b := lock.New(srv.Client(t), opts)
	t.Cleanup(func() { _, _ = a.Close(), b.Close() })
	mustAcquire(t, b, lock.Lock("qh:warm"), lock.AcquireRequest{TTL: 100 * time.Millisecond})
	time.Sleep(400 * time.Millisecond)
	live := mustAcquire(t, a, lock.Lock("qh:live"), lock.AcquireRequest{TTL: 3 * time.Second})
	srv.Restart() // before b's next refresh, most likely
	lost := time.Now()
	rec, l := afterLoss(t, b, "qh:k", lost, 6*time.Second)
	if rec == nil {
		t.Fatal("no quarantine after the loss")
	}
	if l.AcquiredAt.Before(live.ExpiresAt) {
		t.Fatalf("granted at %v, before the forgotten lease's expiry %v", l.AcquiredAt, live.ExpiresAt)
	}
	t.Logf("granted again %v after the loss, %v after the forgotten lease ended", time.Since(lost).Round(time.Millisecond), l.AcquiredAt.Sub(live.ExpiresAt))
}

// quarantineOnTopology checks the quarantine of one topology: loses the
// data of keys' bucket (one slot on a Cluster: keys share a hash tag), after
// a released 120 s lease and a live 3 s one, and then grants again when the
// live lease ends, not 120 s later. away is a key outside the lost data,
// "" when none: it is granted at once.
func quarantineOnTopology(t *testing.T, a, b *lock.Engine, keys [4]string, away string, lose func()) {
	ctx := context.Background()
	mustAcquire(t, b, lock.Lock(keys[0]), lock.AcquireRequest{TTL: 100 * time.Millisecond}) // b knows the marker
	long := mustAcquire(t, a, lock.Lock(keys[1]), lock.AcquireRequest{TTL: 120 * time.Second})
	if _, err := a.Release(ctx, lock.Lock(keys[1]), long.Token, "t"); err != nil {
		t.Fatal(err)
	}
	live := mustAcquire(t, a, lock.Lock(keys[2]), lock.AcquireRequest{TTL: 3 * time.Second})
	time.Sleep(300 * time.Millisecond) // b reads the marker
	lose()
	lost := time.Now()
	if away != "" {
		l := retry(t, "a key outside the lost data", func() (lock.Lease, error) {
			return b.Acquire(ctx, lock.Lock(away), lock.AcquireRequest{TTL: time.Second})
		})
		if l.AcquiredAt.After(live.ExpiresAt) {
			t.Fatalf("%s, outside the lost data, waited for the quarantine", away)
		}
	}
	rec, l := afterLoss(t, b, keys[3], lost, 6*time.Second)
	if rec == nil {
		t.Fatal("no quarantine after the loss")
	}
	if l.AcquiredAt.Before(live.ExpiresAt) {
		t.Fatalf("granted at %v, before the forgotten lease's expiry %v", l.AcquiredAt, live.ExpiresAt)
	}
	t.Logf("quarantine of %v with a 3 s lease live (a 120 s one released before); granted again %v after the loss",
		rec.Remaining.Round(time.Millisecond), time.Since(lost).Round(time.Millisecond))
}

// sentinelQuarantine flushes the master under Sentinel (the replica
// follows): the data of the one bucket is lost.
func sentinelQuarantine(t *testing.T, s *redistest.Sentinel) {
	opts := lock.Options{EpochRefresh: 100 * time.Millisecond}
	a, b := sentinelEngine(t, s, opts), sentinelEngine(t, s, opts)
	keys := [4]string{"sq:warm", "sq:long", "sq:live", "sq:after"}
	quarantineOnTopology(t, a, b, keys, "", func() {
		if err := s.Client().FlushAll(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
	})
}

// clusterQuarantine flushes the master of one slot: its slots are
// quarantined, a key on another master is granted at once.
func clusterQuarantine(t *testing.T, c *redistest.Cluster) {
	ctx := context.Background()
	opts := lock.Options{EpochRefresh: 100 * time.Millisecond}
	a, b := clusterEngine(t, c, opts), clusterEngine(t, c, opts)
	// Four keys of one slot (lock keys have no hash tag of their own).
	var keys [4]string
	bySlot := map[int][]string{}
	for i := 0; keys[3] == ""; i++ {
		k := fmt.Sprint("cq:", i)
		slot := redistest.KeySlot("{" + k + "}")
		if bySlot[slot] = append(bySlot[slot], k); len(bySlot[slot]) == 4 {
			copy(keys[:], bySlot[slot])
		}
	}
	master, err := c.MasterForSlot(ctx, redistest.KeySlot("{"+keys[0]+"}"))
	if err != nil {
		t.Fatal(err)
	}
	away := ""
	for i := 0; away == ""; i++ {
		k := fmt.Sprint("cq:away:", i)
		if m, err := c.MasterForSlot(ctx, redistest.KeySlot("{"+k+"}")); err == nil && m != master {
			away = k
		}
	}
	mustAcquire(t, b, lock.Lock(away), lock.AcquireRequest{TTL: 100 * time.Millisecond}) // b knows that marker too
	quarantineOnTopology(t, a, b, keys, away, func() {
		if err := c.NodeClient(master).FlushAll(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	})
}

// The restart quarantine covers sessions: a session Redis forgot answers
// ErrSessionNotFound (its holder stops), and a grant in a new session
// waits out the quarantine like any other.
func TestRestartQuarantineCoversSessions(t *testing.T) {
	srv := redistest.Start(t)
	e := newEngine(t, srv.Client(t))
	ctx := context.Background()
	s, err := e.CreateSession(ctx, "", "old", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	old := mustAcquire(t, e, lock.Lock("qs:a"), lock.AcquireRequest{Owner: "old", Session: s.ID})
	srv.Restart()

	waitFor(t, func() bool {
		_, err := e.RenewSession(ctx, "", s.ID, "old")
		return errors.Is(err, lock.ErrSessionNotFound)
	})
	fresh, err := e.CreateSession(ctx, "", "new", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var recovering bool
	for {
		l, err := e.Acquire(ctx, lock.Lock("qs:a"), lock.AcquireRequest{Owner: "new", Session: fresh.ID})
		if err == nil {
			if l.AcquiredAt.Before(old.ExpiresAt) {
				t.Fatalf("granted at %v, before the forgotten grant's expiry %v", l.AcquiredAt, old.ExpiresAt)
			}
			break
		}
		var rec *lock.RecoveringError
		switch {
		case errors.As(err, &rec):
			recovering = true
		case errors.Is(err, lock.ErrUnavailable):
		default:
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !recovering {
		t.Fatal("a grant in a session was not held off by the quarantine")
	}
}
