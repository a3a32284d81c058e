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

// 10,000 waiting requests cost Redis nothing while no lock changes hands:
// Redis's own command counter does not move but for the INFO that reads it.
func TestIdleWaitersCostRedisNothing(t *testing.T) {
	srv := redistest.Start(t)
	// Without the expiry sweeper, whose cost is per master, not per waiter
	// (TestSweeperIdleCost).
	e := lock.New(srv.Client(t), lock.Options{NoSweep: true})
	t.Cleanup(func() { _ = e.Close() })
	admin := srv.Client(t)
	const keys, waiters = 100, 10_000
	for k := range keys {
		mustAcquire(t, e, fmt.Sprint("idle:", k), lock.AcquireRequest{TTL: time.Minute})
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for w := range waiters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = e.Acquire(ctx, fmt.Sprint("idle:", w%keys), lock.AcquireRequest{Owner: "w", TTL: time.Second, Wait: 50 * time.Second})
		}()
	}
	defer func() { cancel(); wg.Wait() }()
	waitFor(t, func() bool { return e.Waiters() == waiters })
	// Let the waiter counts reach Redis, then watch an idle second.
	waitFor(t, func() bool {
		st, err := e.State(context.Background(), "idle:0")
		return err == nil && st.Waiters == waiters/keys
	})
	time.Sleep(200 * time.Millisecond)
	before := processed(t, admin)
	time.Sleep(time.Second)
	after := processed(t, admin)
	if d := after - before; d != 1 { // the INFO call itself
		t.Fatalf("Redis processed %d commands while %d requests waited idle, want 0", d-1, waiters)
	}
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
