package lock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/lock/store"
	"github.com/lockd/lockd/internal/redistest"
)

// redlockOn starts n independent redis-servers and returns them with a
// Redlock over them (lockd's client settings).
func redlockOn(t *testing.T, servers []*redistest.Server, opts lock.Options) *lock.Redlock {
	t.Helper()
	clients := make([]*redis.Client, len(servers))
	for i, s := range servers {
		clients[i] = tunedClient(t, s)
	}
	r, err := lock.NewRedlock(clients, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r
}

func threeMasters(t *testing.T) []*redistest.Server {
	return []*redistest.Server{redistest.Start(t), redistest.Start(t), redistest.Start(t)}
}

func TestRedlockNeedsAnOddMajority(t *testing.T) {
	for _, n := range []int{0, 1, 2, 4} {
		if _, err := lock.NewRedlock(make([]*redis.Client, n), lock.Options{}); err == nil {
			t.Errorf("%d masters accepted", n)
		}
	}
}

// Replica acks do not apply to independent masters: NewRedlock refuses
// them, as lockd serve refuses --replica-acks with --redlock, rather than
// wait on each master's own replicas and count a miss as that master's no.
func TestRedlockRefusesReplicaAcks(t *testing.T) {
	servers := threeMasters(t)
	clients := make([]*redis.Client, len(servers))
	for i, s := range servers {
		clients[i] = tunedClient(t, s)
	}
	r, err := lock.NewRedlock(clients, lock.Options{ReplicaAcks: 1})
	if err == nil {
		_ = r.Close()
		t.Fatal("NewRedlock accepted ReplicaAcks")
	}
	if !strings.Contains(err.Error(), "replica acks") {
		t.Fatalf("error %q does not name replica acks", err)
	}
}

func TestRedlockContract(t *testing.T) {
	runContract(t, redlockOn(t, threeMasters(t), lock.Options{}))
}

// Many goroutines through two lockd replicas while one master is paused:
// never two holders, fences rise with every grant.
func TestRedlockMutualExclusionWithAPausedMaster(t *testing.T) {
	servers := threeMasters(t)
	replicas := []*lock.Redlock{redlockOn(t, servers, lock.Options{}), redlockOn(t, servers, lock.Options{})}
	servers[0].Pause()
	defer servers[0].Resume()
	keys := []string{"rl:a", "rl:b"}
	inside := make([]sync.Mutex, len(keys))
	var mu sync.Mutex
	fences := map[string][]int64{}
	var violations, grants, unconfirmed int
	var wg sync.WaitGroup
	for g := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := replicas[g%2]
			for i := range 8 {
				k := (g + i) % len(keys)
				// Each master has 1 % of the TTL (50 ms) to answer: under
				// load a grant that came too late and was not yet given back
				// may hold the key for its whole TTL while master 0 is
				// paused (in CI, four of them ran 10 waiters out of 20 s).
				l, err := r.Acquire(context.Background(), lock.Lock(keys[k]), lock.AcquireRequest{
					Owner: fmt.Sprint("g", g), TTL: 5 * time.Second, Wait: time.Minute,
				})

				if err != nil {
					t.Errorf("acquire: %v", err)
					return
				}
				if !inside[k].TryLock() {
					mu.Lock()
					violations++
					mu.Unlock()
					inside[k].Lock()
				}
				mu.Lock()
				grants++
				fences[keys[k]] = append(fences[keys[k]], l.Fence)
				mu.Unlock()
				time.Sleep(time.Millisecond)
				inside[k].Unlock()
				// A release that no majority confirmed in time is answered
				// unavailable, truthfully, and the lease then ends at its TTL:
				// under load the two live masters may both miss the call
				// timeout. That is allowed; only a wrong answer is not.
				if _, err := r.Release(context.Background(), lock.Lock(keys[k]), l.Token, "t"); errors.Is(err, lock.ErrUnavailable) {
					mu.Lock()
					unconfirmed++
					mu.Unlock()
				} else if err != nil {
					t.Errorf("release: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if violations != 0 {
		t.Fatalf("%d times two holders were inside at once", violations)
	}
	for k, fs := range fences {
		for i := 1; i < len(fs); i++ {
			if fs[i] <= fs[i-1] {
				t.Fatalf("%s: fence %d after %d", k, fs[i], fs[i-1])
			}
		}
	}
	t.Logf("%d grants with one of three masters paused; %d releases unconfirmed in time (those leases ended at their TTL)", grants, unconfirmed)
}

// With a majority of masters down nothing is granted, and the answer comes
// within 2 s.
func TestRedlockMajorityDown(t *testing.T) {
	servers := threeMasters(t)
	r := redlockOn(t, servers, lock.Options{})
	servers[1].Stop()
	servers[2].Stop()
	start := time.Now()
	_, err := r.Acquire(context.Background(), lock.Lock("rl:down"), lock.AcquireRequest{Owner: "o", TTL: time.Second})
	if !errors.Is(err, lock.ErrUnavailable) {
		t.Fatalf("acquire with 2 of 3 masters down: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("took %v", d)
	}
	// Under load the live master may answer after its bound: its grant is
	// then given back in the background, not before the answer.
	waitFor(t, func() bool {
		n, _ := servers[0].Client(t).Exists(context.Background(), "lockd:{rl:down}:lease").Result()
		return n == 0
	})
	if err := r.Ready(context.Background()); err == nil {
		t.Fatal("ready without a majority")
	}
}

// A master restarted empty: fences keep rising and no two holders exist.
func TestRedlockMasterRestartedEmpty(t *testing.T) {
	servers := threeMasters(t)
	r := redlockOn(t, servers, lock.Options{})
	ctx := context.Background()
	// 5 s gives each master 50 ms (1 %) to answer: enough on a loaded
	// machine, where 10 ms (a 1 s lease) left masters out of grants.
	const ttl = 5 * time.Second
	first := onEveryMaster(t, r, servers, "rl:restart", lock.AcquireRequest{Owner: "first", TTL: ttl})
	servers[0].Restart()
	// The key is still held on the two others: nobody else gets it.
	if _, err := r.Acquire(ctx, lock.Lock("rl:restart"), lock.AcquireRequest{Owner: "second", TTL: ttl}); !errors.Is(err, lock.ErrHeld) {
		t.Fatalf("second holder while the first holds on a majority: %v", err)
	}
	if _, err := r.Release(ctx, lock.Lock("rl:restart"), first.Token, "first"); err != nil {
		t.Fatal(err)
	}
	next := retry(t, "acquire after the restart", func() (lock.Lease, error) {
		return r.Acquire(ctx, lock.Lock("rl:restart"), lock.AcquireRequest{Owner: "second", TTL: ttl})
	})
	if next.Fence <= first.Fence {
		t.Fatalf("fence %d after %d", next.Fence, first.Fence)
	}
}

// onEveryMaster acquires key until the lease landed on every master, not
// only a majority: a master that misses its share of the TTL (10 ms for a
// 1 s lease) on a loaded machine is left out of a grant, and a test that
// then takes another master away needs all three.
func onEveryMaster(t *testing.T, r *lock.Redlock, servers []*redistest.Server, key string, req lock.AcquireRequest) lock.Lease {
	t.Helper()
	ctx := context.Background()
	for attempt := 1; ; attempt++ {
		l := mustAcquire(t, r, lock.Lock(key), req)
		everywhere := true
		for _, s := range servers {
			if lock.LeaseToken(ctx, s.Client(t), key) != l.Token {
				everywhere = false
			}
		}
		if everywhere {
			return l
		}
		if attempt == 5 {
			t.Fatalf("%s: no grant reached all %d masters in %d attempts", key, len(servers), attempt)
		}
		if _, err := r.Release(ctx, lock.Lock(key), l.Token, req.Owner); err != nil {
			t.Fatal(err)
		}
	}
}

// The counterexample of "fence = max over the quorum": master 1's counter is
// far ahead; a grant on {1,2} hands out its fence; a later grant on {2,3}
// must still hand out a higher one. The write-back round makes it so.
func TestRedlockFenceCounterexample(t *testing.T) {
	servers := threeMasters(t)
	r := redlockOn(t, servers, lock.Options{})
	ctx := context.Background()
	const key = "rl:fence"
	ahead := strconv.FormatInt(time.Now().Add(24*time.Hour).UnixMicro(), 10)
	if err := servers[0].Client(t).Set(ctx, "lockd:{"+key+"}:fence", ahead, time.Hour).Err(); err != nil {
		t.Fatal(err)
	}

	servers[2].Pause()
	// A TTL of 3 s gives each master 30 ms (1 %) to answer, which a busy
	// machine needs; 10 ms made the fence write-back time out in full runs.
	g1 := mustAcquire(t, r, lock.Lock(key), lock.AcquireRequest{Owner: "g1", TTL: 3 * time.Second})
	servers[2].Resume()
	if _, err := r.Release(ctx, lock.Lock(key), g1.Token, "g1"); err != nil {
		t.Fatal(err)
	}
	servers[0].Pause()
	defer servers[0].Resume()
	// Master 3 ran g1's acquire when it resumed, after g1's release: that
	// orphan lapses after its TTL, so g2 waits for it.
	g2 := mustAcquire(t, r, lock.Lock(key), lock.AcquireRequest{Owner: "g2", TTL: 3 * time.Second, Wait: 10 * time.Second})
	if g2.Fence <= g1.Fence {
		t.Fatalf("grant on {2,3} got fence %d after %d from {1,2}", g2.Fence, g1.Fence)
	}
}

// Each lease that lapses is counted once (OnLapse), whichever of two lockd
// replicas sweeps, within about a second; also when a master is paused
// while the leases lapse and reports their lapses late, when it resumes.
// Every master records each lapse in its own history.
func TestRedlockLapsesCountedOnce(t *testing.T) {
	servers := threeMasters(t)
	replicas := []*lock.Redlock{redlockOn(t, servers, lock.Options{}), redlockOn(t, servers, lock.Options{})}
	var mu sync.Mutex
	counted := map[string]int{}
	late := time.Duration(0)
	for _, r := range replicas {
		r.OnLapse(func(res lock.Resource, lapsed, noticed time.Time, held time.Duration) {
			key := res.Name
			mu.Lock()
			defer mu.Unlock()
			counted[key]++
			late = max(late, noticed.Sub(lapsed))
			if held <= 0 {
				t.Errorf("%s: held %v", key, held)
			}
		})
	}
	lapse := func(batch string) []string {
		var keys []string
		for i := range 10 {
			key := fmt.Sprintf("rl:lapse:%s:%d", batch, i)
			keys = append(keys, key)
			// Each master has 1 % of the TTL to answer (10 ms): a busy
			// machine may miss that, and the grant is then refused.
			retry(t, "acquire "+key, func() (lock.Lease, error) {
				return replicas[i%2].Acquire(context.Background(), lock.Lock(key), lock.AcquireRequest{Owner: "w", TTL: time.Duration(300+20*i) * time.Millisecond})
			})
		}
		return keys
	}
	all := func(keys []string) bool {
		mu.Lock()
		defer mu.Unlock()
		for _, k := range keys {
			if counted[k] == 0 {
				return false
			}
		}
		return true
	}

	first := lapse("all-up")
	waitFor(t, func() bool { return all(first) })
	paused := lapse("paused")
	// A key master 0 granted (on a busy machine it may have answered too
	// late and granted none, or given its grant back).
	onFirst := ""
	for _, k := range paused {
		if n, err := servers[0].Client(t).LLen(context.Background(), lock.HistoryKey(k)).Result(); err == nil && n == 1 {
			onFirst = k
		}
	}
	servers[0].Pause()
	waitFor(t, func() bool { return all(paused) })
	servers[0].Resume()
	// Master 0 now records the lapses it missed; none is counted again.
	if onFirst == "" {
		t.Log("master 0 granted none of the paused keys in time")
	} else {
		waitFor(t, func() bool {
			n, err := servers[0].Client(t).LLen(context.Background(), lock.HistoryKey(onFirst)).Result()
			return err == nil && n == 2
		})
	}
	time.Sleep(time.Second)
	mu.Lock()
	defer mu.Unlock()
	for _, k := range append(first, paused...) {
		if counted[k] != 1 {
			t.Errorf("%s counted %d times, want once", k, counted[k])
		}
	}
	t.Logf("lapses noticed at most %v after they happened", late)
	if late > 1500*time.Millisecond {
		t.Errorf("a lapse was counted %v after it happened", late)
	}
	for i, s := range servers {
		// An acquire undone on a loaded machine (no majority in time) may
		// come first: the lease ends in one expiry, recorded once.
		types, err := lock.RawHistory(context.Background(), s.Client(t), first[0])
		expired := 0
		for _, e := range types {
			if e.Type == "expired" {
				expired++
			}
		}
		if err != nil || len(types) < 2 || types[len(types)-1].Type != "expired" || expired != 1 {
			t.Errorf("master %d: history of %s %v, %v; want it to end in one expired", i, first[0], types, err)
		}
	}
}

// Three lockd replicas whose masters' own sweeper leases went one to each
// (as a restart or a failover can leave them, and as they stay while each
// finds work there): each replica alone hears of one master's lapses, never
// of a majority. The Redlock sweeper lease puts one of them in charge of
// every master, so every lapse is still counted, once.
func TestRedlockLapsesCountedAfterASplitSweep(t *testing.T) {
	servers := threeMasters(t)
	replicas := []*lock.Redlock{
		redlockOn(t, servers, lock.Options{}), redlockOn(t, servers, lock.Options{}), redlockOn(t, servers, lock.Options{}),
	}
	ctx := context.Background()
	for i, s := range servers {
		if err := s.Client(t).Set(ctx, "lockd:sweeper", replicas[i].SweeperID(i), time.Second).Err(); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	counted := map[string]int{}
	for _, r := range replicas {
		r.OnLapse(func(res lock.Resource, _, _ time.Time, _ time.Duration) {
			key := res.Name
			mu.Lock()
			defer mu.Unlock()
			counted[key]++
		})
	}
	var keys []string
	for i := range 30 {
		key := fmt.Sprintf("rl:split:%d", i)
		keys = append(keys, key)
		retry(t, "acquire "+key, func() (lock.Lease, error) {
			// Wait: on a loaded machine an attempt can miss its majority in
			// time and leave a copy that a give-back did not reach; the
			// next attempt waits for it.
			return replicas[i%3].Acquire(ctx, lock.Lock(key), lock.AcquireRequest{Owner: "w", TTL: time.Duration(200+100*i) * time.Millisecond, Wait: 2 * time.Second})
		})
	}
	waitFor(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(counted) == len(keys)
	})
	time.Sleep(time.Second)
	mu.Lock()
	defer mu.Unlock()
	for _, k := range keys {
		if counted[k] != 1 {
			t.Errorf("%s counted %d times, want once", k, counted[k])
		}
	}
}

// Waiting works as on one Redis: a release on one replica wakes a waiter on
// another, FIFO within a replica.
func TestRedlockWaiting(t *testing.T) {
	servers := threeMasters(t)
	a := redlockOn(t, servers, lock.Options{})
	b := redlockOn(t, servers, lock.Options{})
	ctx := context.Background()
	h := mustAcquire(t, a, lock.Lock("rl:wait"), lock.AcquireRequest{Owner: "h", TTL: 30 * time.Second})
	order := make(chan string, 3)
	for i := range 3 {
		go func() {
			l, err := b.Acquire(ctx, lock.Lock("rl:wait"), lock.AcquireRequest{Owner: fmt.Sprint("w", i), TTL: 5 * time.Second, Wait: 10 * time.Second})
			if err != nil {
				t.Error(err)
				order <- ""
				return
			}
			order <- l.Owner
			_, _ = b.Release(ctx, lock.Lock("rl:wait"), l.Token, "w")
		}()
		waitFor(t, func() bool { return b.Waiters() == i+1 })
	}
	released := time.Now()
	if _, err := a.Release(ctx, lock.Lock("rl:wait"), h.Token, "h"); err != nil {
		t.Fatal(err)
	}
	var got []string
	for range 3 {
		got = append(got, <-order)
	}
	t.Logf("3 waiters served in %v after the release", time.Since(released))
	if !slices.Equal(got, []string{"w0", "w1", "w2"}) {
		t.Fatalf("served in order %v", got)
	}
	st, err := a.List(ctx, lock.KindLock, "rl:", 10, "")
	if err != nil {
		t.Fatal(err)
	}
	_ = st
}

// BenchmarkRedlockAcquireRelease measures one acquire+release cycle over
// three masters on loopback (p50 and p99 of the acquire), beside the same
// cycle on one of them alone.
func BenchmarkRedlockAcquireRelease(b *testing.B) {
	servers := []*redistest.Server{redistest.Start(b), redistest.Start(b), redistest.Start(b)}
	clients := make([]*redis.Client, len(servers))
	for i, s := range servers {
		opts := &redis.Options{Addr: s.Addr}
		store.TuneClient(opts)
		clients[i] = redis.NewClient(opts)
		b.Cleanup(func() { _ = clients[i].Close() })
	}
	r, err := lock.NewRedlock(clients, lock.Options{})
	if err != nil {
		b.Fatal(err)
	}
	single := lock.New(clients[0], lock.Options{})
	b.Cleanup(func() { _ = r.Close(); _ = single.Close() })
	for _, tc := range []struct {
		name string
		e    lock.Service
	}{{"one-redis", single}, {"redlock-3", r}} {
		b.Run(tc.name, func(b *testing.B) {
			ctx := context.Background()
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				start := time.Now()
				l, err := tc.e.Acquire(ctx, lock.Lock("bench:rl"), lock.AcquireRequest{Owner: "b", TTL: 10 * time.Second})
				lat = append(lat, time.Since(start))
				if err != nil {
					b.Fatal(err)
				}
				if _, err := tc.e.Release(ctx, lock.Lock("bench:rl"), l.Token, "b"); err != nil {
					b.Fatal(err)
				}
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "acquire-p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "acquire-p99-µs")
		})
	}
}

// lateAnswer makes a master's first script call run on Redis but answer
// only after its caller stopped waiting, as a slow master does.
type lateAnswer struct{ used atomic.Bool }

func (h *lateAnswer) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *lateAnswer) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if name := cmd.Name(); (name == "fcall" || name == "evalsha") && h.used.CompareAndSwap(false, true) {
			<-ctx.Done()
			cmd.SetErr(ctx.Err())
			return ctx.Err()
		}
		return err
	}
}

func (h *lateAnswer) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A master that granted but answered too late counts as a no, and what
// it granted is given back: with no majority it would otherwise keep the
// key for the whole TTL.
func TestRedlockLateGrantGivenBack(t *testing.T) {
	servers := threeMasters(t)
	clients := make([]*redis.Client, len(servers))
	for i, s := range servers {
		clients[i] = tunedClient(t, s)
	}
	clients[0].AddHook(&lateAnswer{})
	r, err := lock.NewRedlock(clients, lock.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	servers[1].Stop()
	servers[2].Stop()
	if _, err := r.Acquire(context.Background(), lock.Lock("rl:late"), lock.AcquireRequest{Owner: "o", TTL: 10 * time.Second}); !errors.Is(err, lock.ErrUnavailable) {
		t.Fatalf("acquire with 2 of 3 masters down and the third late: %v", err)
	}
	admin := servers[0].Client(t)
	start := time.Now()
	waitFor(t, func() bool {
		n, _ := admin.Exists(context.Background(), "lockd:{rl:late}:lease").Result()
		return n == 0
	})
	took := time.Since(start)
	hist, err := admin.LRange(context.Background(), "lockd:{rl:late}:history", 0, -1).Result()
	if err != nil || len(hist) != 2 || !strings.HasPrefix(hist[0], "acquired") || !strings.HasPrefix(hist[1], "released") {
		t.Fatalf("the late master's history: %q, %v (the grant must have happened, and been given back)", hist, err)
	}
	t.Logf("the late grant was given back %v after the answer (TTL 10 s)", took.Round(time.Millisecond))
}

// N23: EndQuarantine ends the quarantine of a master restarted empty while
// a long lease lived on it, granted through a lockd that died (none that
// lives can put it back).
func TestRedlockEndQuarantine(t *testing.T) {
	servers := threeMasters(t)
	opts := lock.Options{EpochRefresh: 100 * time.Millisecond}
	r := redlockOn(t, servers, opts)
	dead := redlockOn(t, servers, opts)
	ctx := context.Background()
	onEveryMaster(t, dead, servers, "rl:q", lock.AcquireRequest{Owner: "long", TTL: time.Hour})
	time.Sleep(300 * time.Millisecond) // r reads the markers, and learns dead's leases
	_ = dead.Close()
	servers[0].Restart()
	waitFor(t, func() bool { return r.Recovering() > 50*time.Minute })
	left, err := r.EndQuarantine(ctx)
	if err != nil || left < 50*time.Minute {
		t.Fatalf("EndQuarantine: %v left, %v; want about an hour", left, err)
	}
	if d := r.Recovering(); d != 0 {
		t.Fatalf("Recovering %v after EndQuarantine", d)
	}
}

// A Redlock master restarted empty gets its leases back from the lockd
// that granted them at once, with no TTL-long wait: the lease is on it
// again and renews on every master.
func TestRedlockMasterGetsItsLeasesBack(t *testing.T) {
	servers := threeMasters(t)
	r := redlockOn(t, servers, lock.Options{EpochRefresh: 100 * time.Millisecond})
	ctx := context.Background()
	l := onEveryMaster(t, r, servers, "rl:back", lock.AcquireRequest{Owner: "o", TTL: time.Hour})
	servers[0].Restart()
	waitFor(t, func() bool { return lock.LeaseToken(ctx, servers[0].Client(t), "rl:back") == l.Token })
	if _, err := r.Renew(ctx, lock.Lock("rl:back"), lock.RenewRequest{Token: l.Token}); err != nil {
		t.Fatalf("renew after a master restarted empty: %v", err)
	}
	waitFor(t, func() bool { return r.Recovering() == 0 })
	mustAcquire(t, r, lock.Lock("rl:free"), lock.AcquireRequest{TTL: time.Second})
}
