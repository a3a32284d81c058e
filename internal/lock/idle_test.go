package lock_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/redistest"
)

// 10,000 waiting requests cost Redis no call per waiter while no lock
// changes hands: the only calls are the process's liveness, one per bucket
// (here one) every 400 ms, whatever the number of waiters.
func TestIdleWaitersCostNoCallPerWaiter(t *testing.T) {
	srv := redistest.Start(t)
	// Without the expiry sweeper, whose cost is per master, not per waiter
	// (TestSweeperIdleCost), nor the quarantine's refresh (one call per
	// EpochRefresh, whatever the waiters).
	e := lock.New(srv.Client(t), lock.Options{NoSweep: true, EpochRefresh: time.Hour})
	t.Cleanup(func() { _ = e.Close() })
	admin := srv.Client(t)
	const keys, waiters = 100, 10_000
	for k := range keys {
		mustAcquire(t, e, lock.Lock(fmt.Sprint("idle:", k)), lock.AcquireRequest{TTL: time.Minute})
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	// Each waiter's first try queues it in Redis: they come in batches of
	// a few hundred, as a burst of 10,000 calls would outlast the call
	// timeout under the race detector.
	for w := range waiters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = e.Acquire(ctx, lock.Lock(fmt.Sprint("idle:", w%keys)), lock.AcquireRequest{Owner: "w", TTL: time.Second, Wait: 50 * time.Second})
		}()
		if (w+1)%250 == 0 {
			for deadline := time.Now().Add(time.Minute); e.Waiters() != w+1; time.Sleep(5 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("%d of %d waiters queued after a minute", e.Waiters(), w+1)
				}
			}
		}
	}
	waitFor(t, func() bool {
		st, err := e.State(context.Background(), lock.Lock("idle:0"))
		return err == nil && st.Waiters == waiters/keys
	})
	time.Sleep(200 * time.Millisecond)
	before := scriptCalls(t, admin)
	const watch = 2 * time.Second
	time.Sleep(watch)
	calls := scriptCalls(t, admin) - before
	t.Logf("%d Redis calls in %v with %d idle waiters", calls, watch, waiters)
	if perSec := float64(calls) / watch.Seconds(); perSec > 3 {
		t.Fatalf("Redis took %.1f calls/s while %d requests waited idle, want at most the liveness (2.5/s)", perSec, waiters)
	}
}

// scriptCalls is how many scripts Redis ran (its calls from lockd: every
// engine call is one script, an FCALL or, without functions, an EVALSHA).
func scriptCalls(t *testing.T, c *redis.Client) int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, line := range strings.Split(info, "\n") {
		for _, cmd := range []string{"cmdstat_evalsha:calls=", "cmdstat_eval:calls=", "cmdstat_fcall:calls="} {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), cmd); ok {
				v, _, _ = strings.Cut(v, ",")
				c, _ := strconv.ParseInt(v, 10, 64)
				n += c
			}
		}
	}
	return n
}

func processed(t *testing.T, c *redis.Client) int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "stats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "total_commands_processed:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	t.Fatal("no total_commands_processed in INFO stats")
	return 0
}
