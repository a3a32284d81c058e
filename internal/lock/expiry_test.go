package lock_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/redistest"
)

// lapses follows the event stream and notes, per key, each expired event
// and when it arrived.
type lapses struct {
	mu   sync.Mutex
	seen map[string][]time.Duration // key → delay of each expired event
	all  []lock.Change
}

func follow(t *testing.T, e *lock.Engine) *lapses {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	sub, err := e.Subscribe(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	l := &lapses{seen: map[string][]time.Duration{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := sub.Next(ctx)
			if err != nil {
				return
			}
			l.mu.Lock()
			l.all = append(l.all, c)
			if c.Type == "expired" {
				l.seen[c.Resource.Name] = append(l.seen[c.Resource.Name], time.Since(c.At))
			}
			l.mu.Unlock()
		}
	}()
	t.Cleanup(func() { cancel(); sub.Close(); <-done })
	return l
}

// expiredAll waits until every key has an expired event, at most 5 s, and
// returns each key's delays.
func (l *lapses) expiredAll(t *testing.T, keys []string) map[string][]time.Duration {
	t.Helper()
	waitFor(t, func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		for _, k := range keys {
			if len(l.seen[k]) == 0 {
				return false
			}
		}
		return true
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string][]time.Duration{}
	for _, k := range keys {
		out[k] = slices.Clone(l.seen[k])
	}
	return out
}

// checkPrompt: each key lapsed once, noticed within 1 s.
func checkPrompt(t *testing.T, got map[string][]time.Duration) {
	t.Helper()
	var delays []time.Duration
	for k, ds := range got {
		if len(ds) != 1 {
			t.Errorf("%s: %d expired events, want exactly 1", k, len(ds))
		}
		delays = append(delays, ds...)
	}
	slices.Sort(delays)
	p50, p99 := delays[len(delays)/2], delays[len(delays)*99/100]
	t.Logf("expiry noticed after p50 %v, p99 %v, max %v (%d lapses)", p50, p99, delays[len(delays)-1], len(delays))
	if delays[len(delays)-1] > time.Second {
		t.Errorf("a lapse was noticed %v after it happened, want within 1 s", delays[len(delays)-1])
	}
}

// Leases that lapse with nobody waiting or looking are recorded as expired
// within 1 s, once each, however many lockd replicas sweep; a renewed
// lease is not; a released one is taken off the schedule.
func TestExpiryNoticedWithNobodyLooking(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	replicas := []*lock.Engine{newEngine(t, srv.Client(t)), newEngine(t, srv.Client(t)), newEngine(t, srv.Client(t))}
	watch := follow(t, replicas[0])
	ctx := context.Background()

	var keys []string
	for i := range 60 {
		key := fmt.Sprintf("exp:%02d", i)
		keys = append(keys, key)
		mustAcquire(t, replicas[i%3], lock.Lock(key), lock.AcquireRequest{TTL: time.Duration(200+10*i) * time.Millisecond})
	}
	renewed := mustAcquire(t, replicas[0], lock.Lock("exp:renewed"), lock.AcquireRequest{TTL: 300 * time.Millisecond})
	released := mustAcquire(t, replicas[1], lock.Lock("exp:released"), lock.AcquireRequest{TTL: 300 * time.Millisecond})
	if _, err := replicas[1].Release(ctx, lock.Lock("exp:released"), released.Token, "t"); err != nil {
		t.Fatal(err)
	}
	stop := time.Now().Add(1500 * time.Millisecond)
	for time.Now().Before(stop) {
		if _, err := replicas[2].Renew(ctx, lock.Lock("exp:renewed"), lock.RenewRequest{Token: renewed.Token, TTL: 0, Actor: "t"}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	checkPrompt(t, watch.expiredAll(t, keys))

	// Straight from Redis, so that no read records the lapse: one
	// expired event per key, the renewed one still live and scheduled,
	// nothing left scheduled for the released one.
	for _, k := range append(keys[:3:3], "exp:renewed", "exp:released") {
		evs, err := lock.RawHistory(ctx, rdb, k)
		if err != nil {
			t.Fatal(err)
		}
		var types []string
		for _, ev := range evs {
			types = append(types, ev.Type)
		}
		want := map[string]string{"exp:renewed": "acquired", "exp:released": "acquired released"}[k]
		if want == "" {
			want = "acquired expired"
		}
		if got := fmt.Sprint(types); got != "["+want+"]" {
			t.Errorf("%s: history %v, want [%s]", k, got, want)
		}
	}
	if n, _ := rdb.ZCard(ctx, "lockd:expiries").Result(); n != 1 {
		t.Errorf("schedule holds %d leases, want 1 (the renewed one)", n)
	}
	// The history read records nothing more.
	evs, err := replicas[0].History(ctx, lock.Lock(keys[0]), 10)
	if err != nil || eventTypes(evs) != "acquired expired" {
		t.Errorf("history of %s: %s, %v", keys[0], eventTypes(evs), err)
	}
}

// The sweeper's cost at idle does not grow with the live leases: a few
// commands per sweep whatever their number.
func TestSweeperIdleCost(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	admin := srv.Client(t)
	e := lock.New(rdb, lock.Options{NoSweep: true})
	t.Cleanup(func() { _ = e.Close() })
	ctx := context.Background()
	perSecond := func() int64 {
		before := processed(t, admin)
		for range 4 { // a second's sweeps at the default interval
			if err := e.Sweep(ctx); err != nil {
				t.Fatal(err)
			}
		}
		return processed(t, admin) - before - 1
	}
	empty := perSecond()
	// 20,000 live leases, written as the scripts would (faster than 20,000 acquires).
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range 20_000 {
			key := fmt.Sprint("idle:", i)
			p.Set(ctx, "lockd:{"+key+"}:lease", "token\x1fo", time.Hour)
			p.ZAdd(ctx, "lockd:expiries", redis.Z{Score: float64(time.Now().Add(time.Hour).UnixMilli()), Member: key})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	full := perSecond()
	t.Logf("Redis commands per second of idle sweeping: %d with no lease, %d with 20,000", empty, full)
	// (±1: a background read of the engine may fall in either second.)
	if full > empty+1 || full > 16 {
		t.Errorf("idle sweeps cost %d commands/s with 20,000 leases, %d with none; want the same, a few", full, empty)
	}
}

// On a Cluster every master's slots are swept and their outboxes handed
// to the shared event stream: each lapse once, within 1 s, on any master.
func TestExpiryAndEventsOnCluster(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t)
	a := clusterEngine(t, c, lock.Options{})
	b := clusterEngine(t, c, lock.Options{})
	watch := follow(t, b)
	ctx := context.Background()
	var keys []string
	masters := map[string]bool{}
	for i := range 30 {
		key := fmt.Sprintf("cx:%02d", i)
		keys = append(keys, key)
		mustAcquire(t, a, lock.Lock(key), lock.AcquireRequest{TTL: time.Duration(300+10*i) * time.Millisecond})
		m, err := c.MasterForSlot(ctx, redistest.KeySlot("{"+key+"}"))
		if err != nil {
			t.Fatal(err)
		}
		masters[m] = true
	}
	if len(masters) != 3 {
		t.Fatalf("30 keys on %d masters", len(masters))
	}
	l := mustAcquire(t, b, lock.Lock("cx:released"), lock.AcquireRequest{})
	if _, err := a.ForceReleaseFence(ctx, lock.Lock("cx:released"), 0, "ops", "stuck"); err != nil {
		t.Fatal(err)
	}
	checkPrompt(t, watch.expiredAll(t, keys))
	waitFor(t, func() bool {
		watch.mu.Lock()
		defer watch.mu.Unlock()
		for _, ch := range watch.all {
			if ch.Resource.Name == "cx:released" && ch.Type == "force_released" && ch.Actor == "ops" && ch.Reason == "stuck" && ch.Fence == l.Fence {
				return true
			}
		}
		return false
	})
}
