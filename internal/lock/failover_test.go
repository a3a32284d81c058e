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

// busy keeps n goroutines spinning until the test ends: with more of them
// than cores, lockd's goroutines wait for a CPU as on a loaded machine,
// and so do the redis-servers and the Sentinels.
func busy(t *testing.T, n int) {
	var stop atomic.Bool
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
			}
		}()
	}
	t.Cleanup(func() {
		stop.Store(true)
		wg.Wait()
	})
}

// TestWakeAfterFailoverUnderLoad repeats failover, release, wake-up while
// the CPU is busy: a waiter must be granted soon after the release that
// follows a graceful SENTINEL FAILOVER (the old master left a writable
// master, as Sentinel leaves it for about 10 s) and a kill -9 of the
// master. The holder and the waiter use two engines, as two lockd
// replicas, in turn each way.
//
// It takes about a minute, most of it Sentinel's: each graceful failover
// waits about 1.2 s for the promotion and 1 s until the sentinels see the
// demoted node again. It does not run in parallel, so that its busy
// goroutines slow down no other test.
func TestWakeAfterFailoverUnderLoad(t *testing.T) {
	s := redistest.StartSentinel(t)
	ctx := context.Background()
	engines := [2]*lock.Engine{sentinelEngine(t, s, lock.Options{}), sentinelEngine(t, s, lock.Options{})}
	busy(t, 3)

	// wake has engine i%2 hold a key and the other wait for it, runs
	// failover, releases the key and returns how long the waiter took to be
	// granted after the release.
	wake := func(i int, failover func()) time.Duration {
		t.Helper()
		holder, waiter := engines[i%2], engines[1-i%2]
		key := fmt.Sprintf("failover:%d", i)
		l := retry(t, "hold", func() (lock.Lease, error) {
			return holder.Acquire(ctx, lock.Lock(key), lock.AcquireRequest{Owner: "holder", TTL: 30 * time.Second})
		})
		// The replica has the lease before the failover, so that the new
		// master still has it to release.
		replica, err := s.ReplicaAddr(ctx)
		if err != nil {
			t.Fatal(err)
		}
		rc := s.NodeClient(replica)
		waitFor(t, func() bool { return rc.Exists(ctx, "lockd:{"+key+"}:lease").Val() == 1 })
		_ = rc.Close()

		got := make(chan time.Time, 1)
		go func() {
			_, err := waiter.Acquire(ctx, lock.Lock(key), lock.AcquireRequest{Owner: "waiter", TTL: 5 * time.Second, Wait: 25 * time.Second})
			if err != nil {
				t.Errorf("waiter: %v", err)
			}
			got <- time.Now()
		}()
		waitFor(t, func() bool { return waiter.Waiters() == 1 })
		failover()
		// The measure needs the release to run on the new master. Until the
		// holder's go-redis has switched (most often before every sentinel
		// names the new master, but not always on a loaded machine) a
		// release reaches the old one, which Sentinel leaves a master for
		// about 10 s: release again until the new master has let go.
		master, err := s.MasterAddr(ctx)
		if err != nil {
			t.Fatal(err)
		}
		mc := s.NodeClient(master)
		defer func() { _ = mc.Close() }()
		var released time.Time
		for deadline := time.Now().Add(15 * time.Second); ; {
			_, err := holder.Release(ctx, lock.Lock(key), l.Token, "holder")
			at := time.Now()
			if err != nil && !errors.Is(err, lock.ErrUnavailable) && !errors.Is(err, lock.ErrNotFound) {
				t.Fatalf("run %d: release: %v", i, err)
			}
			if err == nil && lock.LeaseToken(ctx, mc, key) != l.Token {
				released = at
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("run %d: the release did not reach the new master %s in 15 s", i, master)
			}
			time.Sleep(20 * time.Millisecond)
		}
		select {
		case granted := <-got:
			return granted.Sub(released)
		case <-time.After(20 * time.Second):
			t.Fatalf("run %d: waiter not woken 20 s after the release (its holder's lease has 30 s)", i)
			return 0
		}
	}

	const graceful, killed = 20, 1
	var delays []time.Duration
	for i := range graceful + killed {
		var d time.Duration
		if i < graceful {
			var old string
			d = wake(i, func() {
				var err error
				if old, _, err = s.SwitchMaster(ctx); err != nil {
					t.Fatalf("%v\n%s", err, s.Logs())
				}
			})
			t.Logf("run %d, SENTINEL FAILOVER: woken %v after the release", i, d)
			// What Sentinel does to the old master some 10 s later; the
			// next run starts again from one master and one replica.
			if err := s.Demote(ctx, old); err != nil {
				t.Fatal(err)
			}
		} else {
			d = wake(i, func() {
				if _, err := s.KillMaster(ctx); err != nil {
					t.Fatalf("%v\n%s", err, s.Logs())
				}
			})
			t.Logf("run %d, kill -9: woken %v after the release", i, d)
		}
		delays = append(delays, d)
	}
	for _, kind := range []struct {
		name string
		runs []time.Duration
	}{{"SENTINEL FAILOVER", delays[:graceful]}, {"kill -9", delays[graceful:]}} {
		sorted := slices.Sorted(slices.Values(kind.runs))
		t.Logf("%s, %d runs: woken after the release p50 %v, max %v", kind.name, len(sorted), sorted[len(sorted)/2], sorted[len(sorted)-1])
	}
	for i, d := range delays {
		if d > failoverWakeBound {
			t.Errorf("run %d: woken %v after the release, want at most %v", i, d, failoverWakeBound)
		}
	}
}

// failoverWakeBound is how late a wake-up after a failover may be here.
// The contract says 200 ms; with three goroutines spinning on two cores
// and -race, wake-ups measured p50 about 40 ms and up to 200 ms (most of it
// the waiter's first try on the new master, 80 to 150 ms against a few
// before the failover), so the bound leaves room for a slower CI machine
// yet catches a subscription left on the old master, which woke its
// waiters about 10 s late.
const failoverWakeBound = time.Second
