package lock_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/redistest"
)

// heapInUse is the heap in use after a collection.
func heapInUse() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// N30: a subscription costs little memory before any event: the default
// caps, 1000 event streams and 200 live dashboard pages, each hold one, and
// each subscription's buffer used to hold 1024 events by value (152 KiB,
// 180 MiB for the caps, in a pod limited to 512 MiB).
func TestSubscriptionsCostLittleMemory(t *testing.T) {
	srv := redistest.Start(t)
	e := newEngine(t, srv.Client(t))
	ctx := context.Background()
	const n = 1200
	before := heapInUse()
	subs := make([]*lock.Subscription, 0, n)
	for range n {
		s, err := e.Subscribe(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		subs = append(subs, s)
	}
	grew := int64(heapInUse()) - int64(before)
	for _, s := range subs {
		s.Close()
	}
	t.Logf("%d subscriptions: %.1f MiB of heap, %.1f KiB each", n, float64(grew)/(1<<20), float64(grew)/n/1024)
	if perSub := grew / n; perSub > 32<<10 {
		t.Fatalf("a subscription holds %d KiB of heap before any event, want at most 32", perSub>>10)
	}
}

// BenchmarkEventFanOut is the memory an event costs per subscriber: 100
// subscribers read every event of b.N acquire+release cycles (two events
// each). B/event/sub is every byte allocated meanwhile (the grants and
// releases too) per event and subscriber: the engine's fan-out, before the
// server encodes anything (make bench).
func BenchmarkEventFanOut(b *testing.B) {
	srv := redistest.Start(b)
	e := lock.New(srv.Client(b), lock.Options{})
	b.Cleanup(func() { _ = e.Close() })
	ctx := context.Background()
	const subs = 100
	var wg sync.WaitGroup
	var all []*lock.Subscription
	for range subs {
		s, err := e.Subscribe(ctx, "")
		if err != nil {
			b.Fatal(err)
		}
		all = append(all, s)
	}
	want := 2 * b.N
	var ms0, ms1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms0)
	b.ResetTimer()
	for _, s := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < want; i++ {
				c, err := s.Next(ctx)
				if err != nil {
					b.Error(err)
					return
				}
				_ = c
			}
		}()
	}
	for i := range b.N {
		key := lock.Lock(fmt.Sprint("fan:", i))
		l, err := e.Acquire(ctx, key, lock.AcquireRequest{Owner: "b", TTL: time.Minute})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := e.Release(ctx, key, l.Token, "b"); err != nil {
			b.Fatal(err)
		}
	}
	wg.Wait()
	b.StopTimer()
	runtime.ReadMemStats(&ms1)
	for _, s := range all {
		s.Close()
	}
	b.ReportMetric(float64(ms1.TotalAlloc-ms0.TotalAlloc)/float64(want*subs), "B/event/sub")
}
