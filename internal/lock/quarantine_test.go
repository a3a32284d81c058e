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

// After Redis restarts without persistence, forgetting every lease, the
// lockds put back the leases they know: no key is granted to another
// before the lease it held would have expired, the holders renew through
// any lockd as if nothing happened, and a lockd that started before any
// grant and served none (it never met a marker through a request) grants
// no held key either.
func TestRestartQuarantine(t *testing.T) {
	srv := redistest.Start(t)
	opts := lock.Options{EpochRefresh: 50 * time.Millisecond}
	idle := lock.New(srv.Client(t), opts) // before any grant, idle since
	a := lock.New(srv.Client(t), opts)
	b := lock.New(srv.Client(t), opts)
	t.Cleanup(func() { _, _, _ = idle.Close(), a.Close(), b.Close() })
	ctx := context.Background()
	const ttl = 1500 * time.Millisecond

	var leases []lock.Lease
	for i := range 5 {
		leases = append(leases, mustAcquire(t, a, lock.Lock(fmt.Sprint("q:", i)), lock.AcquireRequest{Owner: "old", TTL: ttl}))
	}
	time.Sleep(150 * time.Millisecond) // every lockd reads the marker
	srv.Restart()

	// No lockd grants a key held at the loss before its lease would have
	// ended; the idle one tries too.
	for i, old := range leases {
		key := fmt.Sprint("q:", i)
		for _, e := range []*lock.Engine{idle, b} {
			for time.Now().Before(old.ExpiresAt.Add(-100 * time.Millisecond)) {
				l, err := e.Acquire(ctx, lock.Lock(key), lock.AcquireRequest{Owner: "new", TTL: time.Second})
				if err == nil {
					t.Fatalf("%s granted at %v, before the lease it held at the loss ends (%v)", key, l.AcquiredAt, old.ExpiresAt)
				}
				var rec *lock.RecoveringError
				if !errors.As(err, &rec) && !errors.Is(err, lock.ErrHeld) && !errors.Is(err, lock.ErrUnavailable) {
					t.Fatalf("%s: %v", key, err)
				}
				if errors.Is(err, lock.ErrHeld) {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
	}
	// The holders renew, through the other lockd.
	for i, old := range leases {
		l, err := b.Renew(ctx, lock.Lock(fmt.Sprint("q:", i)), lock.RenewRequest{Token: old.Token})
		if err != nil {
			t.Fatalf("renew of q:%d after the loss: %v", i, err)
		}
		if l.Fence != old.Fence || l.Owner != "old" {
			t.Fatalf("renewed q:%d: fence %d owner %q, want %d old", i, l.Fence, l.Owner, old.Fence)
		}
	}
	if b.Recovering() > 0 && b.Ready(ctx) == nil {
		t.Fatal("Ready during the quarantine")
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
		live := mustAcquire(t, a, lock.Lock("ql:live"), lock.AcquireRequest{Owner: "live", TTL: 60 * time.Second})
		time.Sleep(refresh + 200*time.Millisecond) // b reads the marker
		srv.Restart()
		lost := time.Now()
		// The lease is put back: its key stays held, any other is granted
		// within 5 s of the loss.
		_, l := afterLoss(t, b, "ql:other", lost, 5*time.Second)
		if since := l.AcquiredAt.Sub(lost); since > 5*time.Second {
			t.Fatalf("a free key granted %v after the loss", since)
		}
		_, err := b.Acquire(ctx, lock.Lock("ql:live"), lock.AcquireRequest{TTL: time.Second})
		var held *lock.HeldError
		if !errors.As(err, &held) || held.Owner != "live" {
			t.Fatalf("the key of the lease live at the loss: %v", err)
		}
		if _, err := b.Renew(ctx, lock.Lock("ql:live"), lock.RenewRequest{Token: live.Token}); err != nil {
			t.Fatalf("renew after the loss: %v", err)
		}
		t.Logf("60 s lease live at the loss: put back; another key granted %v after the loss", l.AcquiredAt.Sub(lost).Round(time.Millisecond))
	})
}

// A lease granted just before the loss, through a lockd whose grant no
// other one has read yet, is put back all the same: the lockd that finds
// the loss waits two refreshes, and the granting one puts its lease back
// with its next refresh, without a request of its own.
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
	_, l := afterLoss(t, b, "qh:k", lost, 6*time.Second)
	for {
		_, err := b.Acquire(context.Background(), lock.Lock("qh:live"), lock.AcquireRequest{TTL: time.Second})
		if err == nil {
			t.Fatalf("qh:live granted before the forgotten lease's expiry %v", live.ExpiresAt)
		}
		if errors.Is(err, lock.ErrHeld) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("another key granted again %v after the loss; the lease granted just before it put back", l.AcquiredAt.Sub(lost).Round(time.Millisecond))
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
	// The live lease is put back (its key stays held until it ends, and
	// its holder renews through b); a key nobody held is granted soon.
	_, l := afterLoss(t, b, keys[3], lost, 5*time.Second)
	if _, err := b.Renew(ctx, lock.Lock(keys[2]), lock.RenewRequest{Token: live.Token}); err != nil {
		t.Fatalf("renew of the lease live at the loss: %v", err)
	}
	if _, err := b.Acquire(ctx, lock.Lock(keys[2]), lock.AcquireRequest{TTL: time.Second}); !errors.Is(err, lock.ErrHeld) {
		t.Fatalf("the key of the lease live at the loss: %v", err)
	}
	t.Logf("a 3 s lease live at the loss put back; a free key granted again %v after the loss", l.AcquiredAt.Sub(lost).Round(time.Millisecond))
}

// sentinelQuarantine flushes the master under Sentinel (the replica
// follows): the data of the one bucket is lost.
func sentinelQuarantine(t *testing.T, s *redistest.Sentinel) {
	// The default refresh, as the other lockds on this Sentinel have: the
	// shortest quarantine is two of the refreshes of the lockd that
	// notices the loss first, and every lockd must put its leases back
	// within it.
	opts := lock.Options{}
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

// A session Redis forgot is put back with its grants: its renewal after
// the loss answers as before and keeps them, and nobody else is granted
// the key it holds.
func TestRestartQuarantineCoversSessions(t *testing.T) {
	srv := redistest.Start(t)
	e := newEngine(t, srv.Client(t))
	ctx := context.Background()
	s, err := e.CreateSession(ctx, "", "old", 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	old := mustAcquire(t, e, lock.Lock("qs:a"), lock.AcquireRequest{Owner: "old", Session: s.ID})
	srv.Restart()

	var renewed lock.Session
	for {
		renewed, err = e.RenewSession(ctx, "", s.ID, "old")
		if !errors.Is(err, lock.ErrUnavailable) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("the session's renewal after the loss: %v", err)
	}
	if len(renewed.Holds) != 1 || renewed.Holds[0] != lock.Lock("qs:a") {
		t.Fatalf("the session after the loss holds %v", renewed.Holds)
	}
	other, err := e.CreateSession(ctx, "", "new", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.Acquire(ctx, lock.Lock("qs:a"), lock.AcquireRequest{Owner: "new", Session: other.ID})
	var held *lock.HeldError
	if !errors.As(err, &held) || held.Owner != "old" {
		t.Fatalf("the key the session held, asked by another: %v (granted before %v?)", err, old.ExpiresAt)
	}
}

// recoveringAfterLoss holds a long lease through dead, a lockd that then
// dies, loses Redis's data (lose) and waits until b is refused with the
// quarantine: nobody can put the lease back, so keys nobody knows wait
// about as long as the lease, an hour.
func recoveringAfterLoss(t *testing.T, a, b, dead *lock.Engine, keys [3]string, lose func()) {
	t.Helper()
	ctx := context.Background()
	mustAcquire(t, b, lock.Lock(keys[0]), lock.AcquireRequest{TTL: 100 * time.Millisecond}) // b knows the marker
	mustAcquire(t, dead, lock.Lock(keys[1]), lock.AcquireRequest{TTL: time.Hour})
	time.Sleep(300 * time.Millisecond) // every lockd reads the marker, and learns dead's leases
	_ = dead.Close()
	lose()
	// Until the lockds that live have put their leases back (two
	// refreshes), the quarantine says so; then it says the dead one's.
	start := time.Now()
	for {
		_, err := b.Acquire(ctx, lock.Lock(keys[2]), lock.AcquireRequest{TTL: time.Second})
		var rec *lock.RecoveringError
		switch {
		case err == nil:
			t.Fatalf("granted during the quarantine")
		case errors.As(err, &rec) && rec.Remaining > 50*time.Minute:
			return
		case errors.As(err, &rec) && rec.Remaining > time.Second:
			t.Fatalf("a quarantine of %v: neither the lockds that live nor the dead one's lease", rec.Remaining)
		case time.Since(start) > 5*time.Second:
			t.Fatalf("no quarantine of the dead lockd's lease 5 s after the loss: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// N23: an operator ends a quarantine early (EndQuarantine): every lockd on
// the Redis grants again and is ready, the one that ended it at once, the
// others within a refresh, and a lockd that notices the loss only now
// starts no new quarantine.
func TestEndQuarantine(t *testing.T) {
	srv := redistest.Start(t)
	opts := lock.Options{EpochRefresh: 100 * time.Millisecond}
	a, b := lock.New(srv.Client(t), opts), lock.New(srv.Client(t), opts)
	t.Cleanup(func() { _, _ = a.Close(), b.Close() })
	ctx := context.Background()
	recoveringAfterLoss(t, a, b, lock.New(srv.Client(t), opts), [3]string{"qe:warm", "qe:long", "qe:k"}, srv.Restart)
	waitFor(t, func() bool {
		return errors.Is(a.Ready(ctx), lock.ErrRecovering) && errors.Is(b.Ready(ctx), lock.ErrRecovering)
	})

	left, err := a.EndQuarantine(ctx)
	if err != nil || left < 50*time.Minute {
		t.Fatalf("EndQuarantine: %v left, %v; want about an hour", left, err)
	}
	if err := a.Ready(ctx); err != nil {
		t.Fatalf("Ready just after EndQuarantine: %v", err)
	}
	mustAcquire(t, a, lock.Lock("qe:a"), lock.AcquireRequest{})
	mustAcquire(t, b, lock.Lock("qe:b"), lock.AcquireRequest{})
	waitFor(t, func() bool { return b.Ready(ctx) == nil && b.Recovering() == 0 })

	// A new lockd finds no quarantine; ending none says so.
	c := newEngine(t, srv.Client(t))
	if err := c.Ready(ctx); err != nil {
		t.Fatalf("Ready of a new lockd after the end: %v", err)
	}
	if left, err := c.EndQuarantine(ctx); err != nil || left != 0 {
		t.Fatalf("EndQuarantine with none on: %v, %v", left, err)
	}
}

// N23: a lockd with the quarantine off grants during a quarantine that
// another started, and says it is ready: readiness follows what it does.
func TestRestartQuarantineOffIsReady(t *testing.T) {
	srv := redistest.Start(t)
	opts := lock.Options{EpochRefresh: 100 * time.Millisecond}
	a, b := lock.New(srv.Client(t), opts), lock.New(srv.Client(t), opts)
	t.Cleanup(func() { _, _ = a.Close(), b.Close() })
	ctx := context.Background()
	recoveringAfterLoss(t, a, b, lock.New(srv.Client(t), opts), [3]string{"qr:warm", "qr:long", "qr:k"}, srv.Restart)

	off := lock.New(srv.Client(t), lock.Options{NoQuarantine: true, EpochRefresh: 100 * time.Millisecond})
	t.Cleanup(func() { _ = off.Close() })
	mustAcquire(t, off, lock.Lock("qr:off"), lock.AcquireRequest{})
	time.Sleep(300 * time.Millisecond) // it has read the marker's quarantine
	if err := off.Ready(ctx); err != nil {
		t.Fatalf("Ready with the quarantine off, during another's quarantine: %v", err)
	}
	if err := b.Ready(ctx); !errors.Is(err, lock.ErrRecovering) {
		t.Fatalf("Ready of a lockd with the quarantine on: %v", err)
	}
}

// clusterEndQuarantine: on a Cluster, EndQuarantine ends the quarantine of
// every slot, also those the lockd that ends it never used.
func clusterEndQuarantine(t *testing.T, c *redistest.Cluster) {
	ctx := context.Background()
	opts := lock.Options{EpochRefresh: 100 * time.Millisecond}
	a, b := clusterEngine(t, c, opts), clusterEngine(t, c, opts)
	// Keys of one slot (lock keys have no hash tag of their own).
	var keys [3]string
	bySlot := map[int][]string{}
	for i := 0; keys[2] == ""; i++ {
		k := fmt.Sprint("ceq:", i)
		slot := redistest.KeySlot("{" + k + "}")
		if bySlot[slot] = append(bySlot[slot], k); len(bySlot[slot]) == 3 {
			copy(keys[:], bySlot[slot])
		}
	}
	master, err := c.MasterForSlot(ctx, redistest.KeySlot("{"+keys[0]+"}"))
	if err != nil {
		t.Fatal(err)
	}
	recoveringAfterLoss(t, a, b, clusterEngine(t, c, opts), keys, func() {
		if err := c.NodeClient(master).FlushAll(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	})
	fresh := clusterEngine(t, c, opts) // knows no slot's marker
	if left, err := fresh.EndQuarantine(ctx); err != nil || left < 50*time.Minute {
		t.Fatalf("EndQuarantine: %v left, %v; want about an hour", left, err)
	}
	retry(t, "an acquire after the end", func() (lock.Lease, error) {
		return b.Acquire(ctx, lock.Lock(keys[2]), lock.AcquireRequest{TTL: time.Second})
	})
	waitFor(t, func() bool { return b.Ready(ctx) == nil })
}
