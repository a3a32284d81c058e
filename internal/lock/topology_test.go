package lock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/lock/store"
	"github.com/lockd/lockd/internal/lockdtest"
	"github.com/lockd/lockd/internal/redistest"
)

// The topology tests form a Sentinel and a Cluster once each (side by side)
// and run their steps in order on them, as lockd replicas would see them.

func sentinelEngine(t *testing.T, s *redistest.Sentinel, opts lock.Options) *lock.Engine {
	t.Helper()
	fo := &redis.UniversalOptions{MasterName: s.MasterName(), Addrs: s.SentinelAddrs()}
	store.Tune(fo)
	rdb := redis.NewFailoverClient(fo.Failover())
	opts.Sentinel = &lock.Sentinel{Addrs: s.SentinelAddrs(), MasterName: s.MasterName()}
	e := lock.New(rdb, opts)
	t.Cleanup(func() { _ = e.Close(); _ = rdb.Close() })
	return e
}

func clusterEngine(t *testing.T, c *redistest.Cluster, opts lock.Options) *lock.Engine {
	t.Helper()
	co := &redis.UniversalOptions{Addrs: c.Addrs()}
	store.Tune(co)
	rdb := redis.NewClusterClient(co.Cluster())
	e := lock.New(rdb, opts)
	t.Cleanup(func() { _ = e.Close(); _ = rdb.Close() })
	return e
}

// retry repeats op while Redis is unavailable (a failover in progress), for
// up to 15 s.
func retry[T any](t *testing.T, what string, op func() (T, error)) T {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		v, err := op()
		if err == nil {
			return v
		}
		if !errors.Is(err, lock.ErrUnavailable) || time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// wakeAfter has holder take key, a waiter on waiterEng wait for it, runs
// change (a failover, a migration) while it waits, then releases the key
// and returns how long the waiter took to be granted after the release.
func wakeAfter(t *testing.T, holder, waiter *lock.Engine, key string, change func()) time.Duration {
	t.Helper()
	ctx := context.Background()
	l := retry(t, "hold", func() (lock.Lease, error) {
		return holder.Acquire(ctx, lock.Lock(key), lock.AcquireRequest{Owner: "holder", TTL: 30 * time.Second})
	})
	got := make(chan error, 1)
	var grantedAt time.Time
	go func() {
		_, err := waiter.Acquire(ctx, lock.Lock(key), lock.AcquireRequest{Owner: "waiter", TTL: 5 * time.Second, Wait: 25 * time.Second})
		grantedAt = time.Now()
		got <- err
	}()
	waitFor(t, func() bool { return waiter.Waiters() == 1 })
	change()
	released := retry(t, "release", func() (time.Time, error) {
		_, err := holder.Release(ctx, lock.Lock(key), l.Token, "holder")
		return time.Now(), err
	})
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("waiter: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("waiter not woken 5 s after the release (its holder's lease has 30 s)")
	}
	return grantedAt.Sub(released)
}

func TestOnSentinel(t *testing.T) {
	t.Parallel()
	s := redistest.StartSentinel(t)
	ctx := context.Background()
	a := sentinelEngine(t, s, lock.Options{})
	b := sentinelEngine(t, s, lock.Options{})
	// The holder in the failover steps waits for its replica, so that the
	// failover cannot lose its lease (replication is asynchronous).
	acked := sentinelEngine(t, s, lock.Options{ReplicaAcks: 1, ReplicaAckTimeout: 2 * time.Second})

	t.Run("contract", func(t *testing.T) { runContract(t, a) })
	t.Run("queue, shared holds and semaphores", func(t *testing.T) { runPrimitives(t, a, b) })
	t.Run("elections, values and lock-delay", func(t *testing.T) { runElections(t, a, b) })
	t.Run("sessions", func(t *testing.T) { runSessions(t, a, b) })
	t.Run("lease cycle and wake-up", func(t *testing.T) {
		l := mustAcquire(t, a, lock.Lock("s:k"), lock.AcquireRequest{})
		if _, err := a.Renew(ctx, lock.Lock("s:k"), lock.RenewRequest{Token: l.Token, TTL: 0, Actor: "t"}); err != nil {
			t.Fatal(err)
		}
		d := wakeAfter(t, a, b, "s:wake", func() {})
		t.Logf("woken %v after a release on another replica", d)
		if _, err := a.Release(ctx, lock.Lock("s:k"), l.Token, "t"); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("topology and readiness", func(t *testing.T) {
		topo := a.Topology(ctx)
		master, _ := s.MasterAddr(ctx)
		if topo.Kind != "sentinel" || len(topo.Nodes) != 2 || topo.Nodes[0].Addr != master ||
			topo.Nodes[0].Role != "master" || !topo.Nodes[0].Up || topo.Nodes[1].Role != "replica" || !topo.Nodes[1].Up {
			t.Fatalf("topology %+v, master %s", topo, master)
		}
		if err := a.Ready(ctx); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("graceful failover", func(t *testing.T) {
		d := wakeAfter(t, acked, b, "s:graceful", func() {
			took, err := s.Failover(ctx)
			if err != nil {
				t.Fatalf("%v\n%s", err, s.Logs())
			}
			t.Logf("SENTINEL FAILOVER took %v", took)
		})
		t.Logf("woken %v after a release on the new master", d)
	})
	t.Run("kill -9 of the master", func(t *testing.T) {
		d := wakeAfter(t, acked, b, "s:killed", func() {
			took, err := s.KillMaster(ctx)
			if err != nil {
				t.Fatalf("%v\n%s", err, s.Logs())
			}
			t.Logf("replica promoted %v after the kill", took)
		})
		t.Logf("woken %v after a release on the new master", d)
	})
	t.Run("replica acks with a stopped replica", func(t *testing.T) {
		retry(t, "acquire with a live replica", func() (lock.Lease, error) {
			return acked.Acquire(ctx, lock.Lock("s:acks"), lock.AcquireRequest{TTL: time.Second})
		})
		short := sentinelEngine(t, s, lock.Options{ReplicaAcks: 1, ReplicaAckTimeout: 100 * time.Millisecond})
		if err := s.PauseReplica(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = s.ResumeReplica() }()
		if _, err := short.Acquire(ctx, lock.Lock("s:acks2"), lock.AcquireRequest{TTL: 10 * time.Second}); !errors.Is(err, lock.ErrUnavailable) {
			t.Fatalf("acquire with the replica stopped: %v", err)
		}
		if _, err := short.State(ctx, lock.Lock("s:acks2")); !errors.Is(err, lock.ErrNotFound) {
			t.Fatalf("the unacknowledged grant stayed: %v", err)
		}
	})
	// Contended waiters through two replicas while Sentinel fails over
	// (with replica acks): no overlap, fences rise, and work goes on.
	t.Run("failovers under load", func(t *testing.T) {
		opts := lock.Options{ReplicaAcks: 1, ReplicaAckTimeout: time.Second}
		engines := []*lock.Engine{sentinelEngine(t, s, opts), sentinelEngine(t, s, opts)}
		ctx := context.Background()
		for _, failover := range []struct {
			name string
			run  func(context.Context) (time.Duration, error)
		}{{"graceful", s.Failover}, {"kill -9", s.KillMaster}} {
			res := contend(t, engines, []string{"sl:a", "sl:b", "sl:c"}, func() {
				took, err := failover.run(ctx)
				if err != nil {
					t.Fatalf("%s: %v\n%s", failover.name, err, s.Logs())
				}
				t.Logf("%s failover took %v", failover.name, took)
			})
			t.Logf("%s: %+v", failover.name, res)
			if res.overlaps != 0 || res.regressions != 0 {
				t.Fatalf("%s: %d overlapping holds, %d fence regressions", failover.name, res.overlaps, res.regressions)
			}
			if res.grants < 20 {
				t.Fatalf("%s: only %d grants", failover.name, res.grants)
			}
		}
	})
	t.Run("quarantine after a flush", func(t *testing.T) { sentinelQuarantine(t, s) })
}

func TestOnCluster(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t)
	ctx := context.Background()
	a := clusterEngine(t, c, lock.Options{})
	b := clusterEngine(t, c, lock.Options{})
	acked := clusterEngine(t, c, lock.Options{ReplicaAcks: 1, ReplicaAckTimeout: 2 * time.Second})

	t.Run("contract", func(t *testing.T) { runContract(t, a) })
	t.Run("queue, shared holds and semaphores", func(t *testing.T) { runPrimitives(t, a, b) })
	t.Run("elections, values and lock-delay", func(t *testing.T) { runElections(t, a, b) })
	t.Run("sessions", func(t *testing.T) { runSessions(t, a, b) })
	t.Run("lock sets across slots", func(t *testing.T) {
		// Keys of one set in other slots than each other.
		if redistest.KeySlot("{ls:c:1}") == redistest.KeySlot("{ls:c:2}") {
			t.Fatal("the set's keys share a slot: nothing crosses slots")
		}
		runLockSets(t, a, b)
	})
	t.Run("a set across slots shows no partial grant", func(t *testing.T) { setGathersUnseen(t, a, b) })
	t.Run("a lockd that dies while its set gathers", func(t *testing.T) {
		setDiesGathering(t, clusterEngine(t, c, lock.Options{CallTimeout: 400 * time.Millisecond}), b)
	})
	t.Run("lock sets in a session, and their keys never alone", func(t *testing.T) {
		setInSession(t, a)
		setKeyNotAlone(t, b, lock.Exclusive)
		setKeyNotAlone(t, b, lock.Shared)
	})
	t.Run("lease cycle, list across masters", func(t *testing.T) {
		masters := map[string]bool{}
		var leases []lock.Lease
		for i := range 30 {
			key := fmt.Sprintf("c:list:%02d", i)
			leases = append(leases, mustAcquire(t, a, lock.Lock(key), lock.AcquireRequest{}))
			m, err := c.MasterForSlot(ctx, redistest.KeySlot("{"+key+"}"))
			if err != nil {
				t.Fatal(err)
			}
			masters[m] = true
		}
		if len(masters) != 3 {
			t.Fatalf("30 keys on %d masters", len(masters))
		}
		seen := map[string]int{}
		cursor := ""
		for {
			page, err := b.List(ctx, lock.KindLock, "c:list:", 7, cursor)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range page.Locks {
				seen[s.Resource.Name]++
			}
			if cursor = page.NextCursor; cursor == "" {
				break
			}
		}
		if len(seen) != 30 {
			t.Fatalf("listed %d of 30 locks across 3 masters", len(seen))
		}
		for k, n := range seen {
			if n != 1 {
				t.Fatalf("%s listed %d times", k, n)
			}
		}
		for _, l := range leases {
			if _, err := a.Renew(ctx, l.Resource, lock.RenewRequest{Token: l.Token, TTL: 0, Actor: "t"}); err != nil {
				t.Fatal(err)
			}
			if _, err := b.Release(ctx, l.Resource, l.Token, "t"); err != nil {
				t.Fatal(err)
			}
		}
		d := wakeAfter(t, a, b, "c:wake", func() {})
		t.Logf("woken %v after a release on another replica (SPUBLISH)", d)
	})
	t.Run("topology and readiness", func(t *testing.T) {
		topo := a.Topology(ctx)
		masters := 0
		for _, n := range topo.Nodes {
			if !n.Up {
				t.Fatalf("%s is down: %+v", n.Addr, topo)
			}
			if n.Role == "master" {
				masters++
			}
		}
		if topo.Kind != "cluster" || len(topo.Nodes) != 6 || masters != 3 {
			t.Fatalf("topology %+v", topo)
		}
		if err := a.Ready(ctx); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("failover of the key's master", func(t *testing.T) {
		const key = "c:failover"
		d := wakeAfter(t, acked, b, key, func() {
			m, err := c.MasterForSlot(ctx, redistest.KeySlot("{"+key+"}"))
			if err != nil {
				t.Fatal(err)
			}
			took, err := c.Failover(ctx, m)
			if err != nil {
				t.Fatalf("%v\n%s", err, c.Logs())
			}
			t.Logf("CLUSTER FAILOVER took %v", took)
		})
		t.Logf("woken %v after a release on the new master", d)
	})
	t.Run("slot migration", func(t *testing.T) {
		const key = "c:migrate"
		d := wakeAfter(t, acked, b, key, func() {
			slot := redistest.KeySlot("{" + key + "}")
			from, err := c.MasterForSlot(ctx, slot)
			if err != nil {
				t.Fatal(err)
			}
			var to string
			for _, addr := range c.Addrs() {
				if m, _ := c.MasterForSlot(ctx, redistest.KeySlot("{"+addr+"}")); m != "" && m != from {
					to = m
					break
				}
			}
			if to == "" {
				t.Fatal("no other master")
			}
			if err := c.MigrateSlot(ctx, slot, to); err != nil {
				t.Fatalf("%v\n%s", err, c.Logs())
			}
			t.Logf("slot %d moved from %s to %s", slot, from, to)
		})
		t.Logf("woken %v after a release on the slot's new master", d)
	})
	t.Run("kill -9 of the key's master", func(t *testing.T) {
		const key = "c:killed"
		d := wakeAfter(t, acked, b, key, func() {
			m, err := c.MasterForSlot(ctx, redistest.KeySlot("{"+key+"}"))
			if err != nil {
				t.Fatal(err)
			}
			took, err := c.KillMaster(ctx, m)
			if err != nil {
				t.Fatalf("%v\n%s", err, c.Logs())
			}
			t.Logf("replica promoted %v after the kill", took)
		})
		t.Logf("woken %v after a release on the new master", d)
	})
	// Slots move while clients take and release keys in them: go-redis
	// follows MOVED and ASK, and nothing overlaps.
	t.Run("slot migrations under load", func(t *testing.T) {
		engines := []*lock.Engine{clusterEngine(t, c, lock.Options{}), clusterEngine(t, c, lock.Options{})}
		ctx := context.Background()
		keys := []string{"mig:a", "mig:b", "mig:c"}
		res := contend(t, engines, keys, func() {
			for _, key := range keys {
				slot := redistest.KeySlot("{" + key + "}")
				from, err := c.MasterForSlot(ctx, slot)
				if err != nil {
					t.Fatal(err)
				}
				for _, addr := range c.Addrs() {
					to, _ := c.MasterForSlot(ctx, redistest.KeySlot("{"+addr+"}"))
					if to != "" && to != from {
						if err := c.MigrateSlot(ctx, slot, to); err != nil {
							t.Fatalf("%v\n%s", err, c.Logs())
						}
						break
					}
				}
			}
		})
		t.Logf("%+v", res)
		if res.overlaps != 0 || res.regressions != 0 {
			t.Fatalf("%d overlapping holds, %d fence regressions", res.overlaps, res.regressions)
		}
		if res.grants < 20 {
			t.Fatalf("only %d grants", res.grants)
		}
	})
	t.Run("quarantine of a flushed master's slots", func(t *testing.T) { clusterQuarantine(t, c) })
	t.Run("the end of a quarantine", func(t *testing.T) { clusterEndQuarantine(t, c) })
}

// loadResult counts what contended clients saw.
type loadResult struct {
	grants, unavailable, timeouts, overlaps, regressions int64
}

// contend runs workers that take, briefly hold and release keys through the
// engines, waiting for them, while during runs; it judges overlap by the
// leases' own times (a hold ends at its release, or its expiry at the
// latest) and fences by grant order.
func contend(t *testing.T, engines []*lock.Engine, keys []string, during func()) loadResult {
	t.Helper()
	type hold struct {
		start, end time.Time
		fence      int64
	}
	var (
		mu    sync.Mutex
		holds = map[string][]hold{}
		res   loadResult
		stop  = make(chan struct{})
		wg    sync.WaitGroup
	)
	ctx := context.Background()
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e := engines[w%len(engines)]
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key := keys[(w+i)%len(keys)]
				l, err := e.Acquire(ctx, lock.Lock(key), lock.AcquireRequest{Owner: fmt.Sprint("w", w), TTL: 3 * time.Second, Wait: 2 * time.Second})
				mu.Lock()
				switch {
				case err == nil:
					res.grants++
				case errors.Is(err, lock.ErrHeld), errors.Is(err, lock.ErrQueued):
					res.timeouts++
				case errors.Is(err, lock.ErrUnavailable):
					res.unavailable++
				default:
					t.Errorf("acquire: %v", err)
				}
				mu.Unlock()
				if err != nil {
					time.Sleep(20 * time.Millisecond)
					continue
				}
				time.Sleep(2 * time.Millisecond)
				end := time.Now()
				_, _ = e.Release(ctx, lock.Lock(key), l.Token, "w")
				if end.After(l.ExpiresAt) {
					end = l.ExpiresAt
				}
				mu.Lock()
				holds[key] = append(holds[key], hold{l.AcquiredAt, end, l.Fence})
				mu.Unlock()
			}
		}()
	}
	time.Sleep(300 * time.Millisecond)
	during()
	time.Sleep(500 * time.Millisecond)
	close(stop)
	wg.Wait()
	for _, hs := range holds {
		slices.SortFunc(hs, func(a, b hold) int { return a.start.Compare(b.start) })
		for i := 1; i < len(hs); i++ {
			if hs[i].start.Before(hs[i-1].end.Add(-2 * time.Millisecond)) {
				res.overlaps++
			}
			if hs[i].fence <= hs[i-1].fence {
				res.regressions++
			}
		}
	}
	return res
}

// setGathersUnseen takes lock sets whose keys lie in several slots, which
// are granted slot by slot, and looks at their keys between the first
// slot's grant and the others': no key shows a holder (state, list), and
// a lone acquire is told the key is queued for, not held. Once the set's
// acquire answers, every key shows it.
func setGathersUnseen(t *testing.T, a, b *lock.Engine) {
	ctx := context.Background()
	keys := []string{"ls:g:1", "ls:g:2", "ls:g:3", "ls:g:4"}
	slots := map[int]bool{}
	for _, k := range keys {
		slots[redistest.KeySlot("{"+k+"}")] = true
	}
	if len(slots) < 2 {
		t.Fatal("the set's keys share a slot: nothing is granted slot by slot")
	}
	for _, mode := range []lock.Mode{lock.Exclusive, lock.Shared} {
		t.Run(string(mode), func(t *testing.T) {
			looked := 0
			owner := "gatherer-" + string(mode)
			// announced relays what the outboxes hold (a sweep: one of the
			// engines' own may be under way, so each sweeps) and counts the
			// set's grants in the event stream.
			announced := func() int {
				t.Helper()
				for _, r := range []*lock.Engine{a, b} {
					if err := r.Sweep(ctx); err != nil {
						t.Fatal(err)
					}
				}
				evs, err := a.ReadEvents(ctx, "", 100_000)
				if err != nil {
					t.Fatal(err)
				}
				n := 0
				for _, ev := range evs {
					if ev.Type == "acquired" && ev.Owner == owner {
						n++
					}
				}
				return n
			}
			a.OnSetGathering(func([]string) {
				looked++
				if n := announced(); n != 0 {
					t.Errorf("%d grants of the set in the event stream while it gathers; want none", n)
				}
				for _, r := range []lock.Service{a, b} {
					for _, k := range keys {
						if s, err := r.State(ctx, lock.Lock(k)); !errors.Is(err, lock.ErrNotFound) {
							t.Errorf("%s while the set gathers: holder %q set %d, %v; want no holder", k, s.Owner, s.Set, err)
						}
					}
					page, err := r.List(ctx, lock.KindLock, "ls:g:", 100, "")
					if err != nil || len(page.Locks) != 0 {
						t.Errorf("list while the set gathers: %d rows, %v; want none", len(page.Locks), err)
					}
				}
				for _, k := range keys {
					_, err := b.Acquire(ctx, lock.Lock(k), lock.AcquireRequest{Owner: "lone", TTL: time.Second})
					var he *lock.HeldError
					if errors.As(err, &he) || err == nil {
						t.Errorf("a lone acquire of %s while the set gathers: %v; want it queued behind the set", k, err)
					}
				}
			})
			defer a.OnSetGathering(nil)
			req := lock.SetRequest{Keys: keys, Owner: owner, TTL: 10 * time.Second, Mode: mode}
			set, err := a.AcquireSet(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if _, err := b.ReleaseSet(ctx, set.Token, "t"); err != nil {
					t.Error(err)
				}
			}()
			if looked != 1 {
				t.Fatalf("the set was granted without gathering (%d looks)", looked)
			}
			for _, l := range set.Leases {
				s, err := b.State(ctx, lock.Lock(l.Key))
				if err != nil || s.Owner != owner || s.Fence != l.Fence || s.Set != len(keys) {
					t.Fatalf("%s once the set is granted: %+v, %v", l.Key, s, err)
				}
			}
			if page, err := b.List(ctx, lock.KindLock, "ls:g:", 100, ""); err != nil || len(page.Locks) != len(keys) {
				t.Fatalf("list once the set is granted: %d rows, %v", len(page.Locks), err)
			}
			// The grants held back are relayed by the next sweeps.
			deadline := time.Now().Add(5 * time.Second)
			for n := announced(); n != len(keys); n = announced() {
				if time.Now().After(deadline) {
					t.Fatalf("%d grants of the set in the event stream once it holds its keys; want %d", n, len(keys))
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
}

// setDiesGathering stops a lock set's acquire dead between its first
// slot's grant and the others' (a panic out of the hook: nothing of the
// acquire runs after it, as when its lockd is killed there): nothing it
// took is held past the set's TTL, and its grants show no holder before
// its record's gathering mark lapses.
func setDiesGathering(t *testing.T, a, b *lock.Engine) {
	ctx := context.Background()
	keys := []string{"ls:d:1", "ls:d:2", "ls:d:3", "ls:d:4"}
	const ttl = 3 * time.Second
	var granted []string
	a.OnSetGathering(func([]string) {
		for _, k := range keys {
			if s, err := b.State(ctx, lock.Lock(k)); err == nil || !errors.Is(err, lock.ErrNotFound) {
				granted = append(granted, k)
				t.Errorf("%s while the set gathers: holder %q, %v", k, s.Owner, err)
			}
		}
		panic("killed")
	})
	defer a.OnSetGathering(nil)
	start := time.Now()
	func() {
		defer func() {
			if v := recover(); v != "killed" {
				t.Fatalf("the acquire did not die in the hook: %v", v)
			}
		}()
		_, _ = a.AcquireSet(ctx, lock.SetRequest{Keys: keys, Owner: "dies", TTL: ttl})
	}()
	// Within the TTL (and the sweep's moment after it) every key is free
	// again: a lone acquire of each is granted.
	lockdtest.Eventually(t, func() bool {
		for _, k := range keys {
			l, err := b.Acquire(ctx, lock.Lock(k), lock.AcquireRequest{Owner: "after", TTL: time.Second})
			if err != nil {
				return false
			}
			_, _ = b.Release(ctx, l.Resource, l.Token, "t")
		}
		return true
	}, ttl+3*time.Second, "every key of the dead set free again")
	if d := time.Since(start); d > ttl+3*time.Second {
		t.Fatalf("the keys came free after %v", d)
	}
}
