package lock_test

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/lock/store"
	"github.com/lockd/lockd/internal/redistest"
)

// benchEngine is an engine on a real Redis, with the client lockd serve
// uses and a counter of the commands it sends.
func benchEngine(b *testing.B) (*lock.Engine, *atomic.Int64) {
	srv := redistest.Start(b)
	opts := &redis.Options{Addr: srv.Addr, PoolSize: 64}
	store.TuneClient(opts)
	rdb := redis.NewClient(opts)
	n := &redistest.Counter{}
	rdb.AddHook(n)
	e := lock.New(rdb, lock.Options{})
	b.Cleanup(func() { _ = e.Close(); _ = rdb.Close() })
	return e, &n.Commands
}

func reportCalls(b *testing.B, n *atomic.Int64, start int64) {
	b.ReportMetric(float64(n.Load()-start)/float64(b.N), "redis-calls/op")
}

// One acquire and one release per op, each goroutine on its own key.
func BenchmarkAcquireRelease(b *testing.B) {
	e, n := benchEngine(b)
	ctx := context.Background()
	var id atomic.Int64
	start := n.Load()
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		key := fmt.Sprint("bench:ar:", id.Add(1))
		for pb.Next() {
			l, err := e.Acquire(ctx, lock.Lock(key), lock.AcquireRequest{Owner: "b", TTL: 30 * time.Second})
			if err != nil {
				b.Error(err)
				return
			}
			if _, err := e.Release(ctx, lock.Lock(key), l.Token, "b"); err != nil {
				b.Error(err)
				return
			}
		}
	})
	reportCalls(b, n, start)
}

func BenchmarkRenew(b *testing.B) {
	e, n := benchEngine(b)
	ctx := context.Background()
	l, err := e.Acquire(ctx, lock.Lock("bench:renew"), lock.AcquireRequest{Owner: "b", TTL: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	start := n.Load()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := e.Renew(ctx, lock.Lock("bench:renew"), lock.RenewRequest{Token: l.Token, TTL: 0, Actor: "b"}); err != nil {
			b.Fatal(err)
		}
	}
	reportCalls(b, n, start)
}

func BenchmarkState(b *testing.B) {
	e, n := benchEngine(b)
	ctx := context.Background()
	if _, err := e.Acquire(ctx, lock.Lock("bench:state"), lock.AcquireRequest{Owner: "b", TTL: time.Minute}); err != nil {
		b.Fatal(err)
	}
	start := n.Load()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := e.State(ctx, lock.Lock("bench:state")); err != nil {
			b.Fatal(err)
		}
	}
	reportCalls(b, n, start)
}

// BenchmarkWakeUpReusedKey measures how soon a waiter on another replica is
// granted one reused key after the holder releases it, and after the
// holder's lease lapses: p50 and p99 over 100 trials each, whatever b.N
// (run it with -benchtime 1x).
func BenchmarkWakeUpReusedKey(b *testing.B) {
	srv := redistest.Start(b)
	client := func() *redis.Client {
		opts := &redis.Options{Addr: srv.Addr}
		store.TuneClient(opts)
		c := redis.NewClient(opts)
		b.Cleanup(func() { _ = c.Close() })
		return c
	}
	holder := lock.New(client(), lock.Options{})
	waiter := lock.New(client(), lock.Options{})
	b.Cleanup(func() { _ = holder.Close(); _ = waiter.Close() })
	ctx := context.Background()
	const key = "bench:wake"
	const trials = 100

	measure := func(lapse bool) (p50, p99 time.Duration) {
		delays := make([]time.Duration, 0, trials)
		for range trials {
			ttl := 10 * time.Second
			if lapse {
				ttl = 30 * time.Millisecond
			}
			h, err := holder.Acquire(ctx, lock.Lock(key), lock.AcquireRequest{Owner: "h", TTL: ttl, Wait: time.Second})
			if err != nil {
				b.Fatal(err)
			}
			got := make(chan time.Time, 1)
			go func() {
				l, err := waiter.Acquire(ctx, lock.Lock(key), lock.AcquireRequest{Owner: "w", TTL: 10 * time.Second, Wait: 5 * time.Second})
				if err != nil {
					b.Error(err)
				}
				got <- time.Now()
				_, _ = waiter.Release(ctx, lock.Lock(key), l.Token, "w")
			}()
			for waiter.Waiters() == 0 {
				time.Sleep(100 * time.Microsecond)
			}
			freed := h.ExpiresAt
			if !lapse {
				time.Sleep(2 * time.Millisecond)
				freed = time.Now()
				if _, err := holder.Release(ctx, lock.Lock(key), h.Token, "h"); err != nil {
					b.Fatal(err)
				}
			}
			delays = append(delays, (<-got).Sub(freed))
		}
		slices.Sort(delays)
		return delays[trials/2], delays[trials*99/100]
	}
	b.ResetTimer()
	rp50, rp99 := measure(false)
	lp50, lp99 := measure(true)
	b.ReportMetric(float64(rp50.Microseconds())/1000, "release-p50-ms")
	b.ReportMetric(float64(rp99.Microseconds())/1000, "release-p99-ms")
	b.ReportMetric(float64(lp50.Microseconds())/1000, "lapse-p50-ms")
	b.ReportMetric(float64(lp99.Microseconds())/1000, "lapse-p99-ms")
}
