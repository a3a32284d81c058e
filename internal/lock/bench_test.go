package lock_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/redistest"
)

// benchEngine is an engine on a real Redis, with the client lockd serve
// uses and a counter of the commands it sends.
func benchEngine(b *testing.B) (*lock.Engine, *atomic.Int64) {
	srv := redistest.Start(b)
	opts := &redis.Options{Addr: srv.Addr, PoolSize: 64}
	lock.TuneClient(opts)
	rdb := redis.NewClient(opts)
	var n atomic.Int64
	rdb.AddHook(countHook{&n})
	e := lock.New(rdb, lock.Options{})
	b.Cleanup(func() { _ = e.Close(); _ = rdb.Close() })
	return e, &n
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
			l, err := e.Acquire(ctx, key, lock.AcquireRequest{Owner: "b", TTL: 30 * time.Second})
			if err != nil {
				b.Error(err)
				return
			}
			if _, err := e.Release(ctx, key, l.Token, "b"); err != nil {
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
	l, err := e.Acquire(ctx, "bench:renew", lock.AcquireRequest{Owner: "b", TTL: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	start := n.Load()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := e.Renew(ctx, "bench:renew", l.Token, 0, "b"); err != nil {
			b.Fatal(err)
		}
	}
	reportCalls(b, n, start)
}

func BenchmarkState(b *testing.B) {
	e, n := benchEngine(b)
	ctx := context.Background()
	if _, err := e.Acquire(ctx, "bench:state", lock.AcquireRequest{Owner: "b", TTL: time.Minute}); err != nil {
		b.Fatal(err)
	}
	start := n.Load()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := e.State(ctx, "bench:state"); err != nil {
			b.Fatal(err)
		}
	}
	reportCalls(b, n, start)
}
