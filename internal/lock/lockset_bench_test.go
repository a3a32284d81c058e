package lock_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/lock"
)

// BenchmarkLockSet compares a lock set's acquire+release cycle with lone
// locks' over as many keys: cycles/s and Redis calls per cycle, one
// goroutine per key group (uncontended).
//
//	go test ./internal/lock -run '^$' -bench LockSet -benchtime 2000x
func BenchmarkLockSet(b *testing.B) {
	for _, n := range []int{1, 2, 8} {
		b.Run(fmt.Sprintf("singles-%d", n), func(b *testing.B) {
			e, calls := benchEngine(b)
			keys := setKeys("bench:single", n)
			cycle(b, calls, func(ctx context.Context) error {
				leases := make([]lock.Lease, 0, n)
				for _, k := range keys {
					l, err := e.Acquire(ctx, lock.Lock(k), lock.AcquireRequest{Owner: "b", TTL: 30 * time.Second})
					if err != nil {
						return err
					}
					leases = append(leases, l)
				}
				for _, l := range leases {
					if _, err := e.Release(ctx, l.Resource, l.Token, "b"); err != nil {
						return err
					}
				}
				return nil
			})
		})
		if n < lock.MinSetKeys {
			continue
		}
		b.Run(fmt.Sprintf("set-%d", n), func(b *testing.B) {
			e, calls := benchEngine(b)
			keys := setKeys("bench:set", n)
			cycle(b, calls, func(ctx context.Context) error {
				s, err := e.AcquireSet(ctx, lock.SetRequest{Keys: keys, Owner: "b", TTL: 30 * time.Second})
				if err != nil {
					return err
				}
				_, err = e.ReleaseSet(ctx, s.Token, "b")
				return err
			})
		})
	}
}

func setKeys(prefix string, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s:%d:%d", prefix, n, i)
	}
	return keys
}

// cycle runs one acquire+release cycle per op and reports cycles/s and
// Redis calls per cycle.
func cycle(b *testing.B, calls *atomic.Int64, op func(context.Context) error) {
	ctx := context.Background()
	start := calls.Load()
	b.ReportAllocs()
	b.ResetTimer()
	began := time.Now()
	for range b.N {
		if err := op(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/time.Since(began).Seconds(), "cycles/s")
	reportCalls(b, calls, start)
}

// BenchmarkLockSetContended: 32 clients take sets of 4 random keys out of
// 64, hold them a moment and release them, for 3 s whatever b.N (run it
// with -benchtime 1x): grants/s, the p99 wait, and the longest time no
// set was granted at all, which must stay under 10 s (a deadlock or a
// stall would show there).
func BenchmarkLockSetContended(b *testing.B) {
	e, _ := benchEngine(b)
	const clients, keys, size = 32, 64, 4
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var (
		mu      sync.Mutex
		waits   []time.Duration
		last    = time.Now()
		longest time.Duration
	)
	b.ResetTimer()
	began := time.Now()
	var wg sync.WaitGroup
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				pick := rand.Perm(keys)[:size]
				ks := make([]string, size)
				for i, k := range pick {
					ks[i] = fmt.Sprintf("bench:contended:%d", k)
				}
				asked := time.Now()
				s, err := e.AcquireSet(ctx, lock.SetRequest{Keys: ks, Owner: "b", TTL: 10 * time.Second, Wait: 10 * time.Second})
				if err != nil {
					continue // the run's end
				}
				now := time.Now()
				mu.Lock()
				waits = append(waits, now.Sub(asked))
				longest, last = max(longest, now.Sub(last)), now
				mu.Unlock()
				_, _ = e.ReleaseSet(context.Background(), s.Token, "b")
			}
		}()
	}
	wg.Wait()
	took := time.Since(began)
	if len(waits) == 0 {
		b.Fatal("no set was granted")
	}
	slices.Sort(waits)
	b.ReportMetric(float64(len(waits))/took.Seconds(), "grants/s")
	b.ReportMetric(float64(waits[len(waits)*99/100].Microseconds())/1000, "p99-wait-ms")
	b.ReportMetric(float64(longest.Microseconds())/1000, "longest-gap-ms")
	if longest > 10*time.Second {
		b.Fatalf("no set granted for %v", longest)
	}
}
