package webhook_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/redistest"
	"github.com/lockd/lockd/internal/webhook"
)

// BenchmarkSlowReceiver measures how many events per second one endpoint
// that takes 20 ms per request receives, one delivery at a time and 8 at
// once (the default): 200 events of 50 keys, produced at once (N10 of the
// second audit: one at a time, about 48 events/s). Run it with
// -benchtime 1x; it reports events/s.
func BenchmarkSlowReceiver(b *testing.B) {
	for _, conc := range []int{1, 8} {
		b.Run("concurrency="+strconv.Itoa(conc), func(b *testing.B) {
			srv := redistest.Start(b)
			e := lock.New(srv.Client(b), lock.Options{})
			b.Cleanup(func() { _ = e.Close() })
			var mu sync.Mutex
			got := map[string]bool{}
			hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				time.Sleep(20 * time.Millisecond)
				mu.Lock()
				got[r.Header.Get("Lockd-Event-Id")] = true
				mu.Unlock()
			}))
			b.Cleanup(hs.Close)
			d := webhook.New(e.EventClient(), e.EventStream(),
				[]webhook.Hook{{Name: "slow", URL: hs.URL, Secret: "s3cret-0123456789", AllowPrivate: true, Concurrency: conc}},
				webhook.Options{Poll: 50 * time.Millisecond}, nil)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { defer close(done); d.Run(ctx) }()
			b.Cleanup(func() { cancel(); <-done })
			for {
				gs, err := e.EventClient().XInfoGroups(ctx, e.EventStream()).Result()
				if err == nil && len(gs) == 1 {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			const events = 200
			b.ResetTimer()
			start := time.Now()
			for i := range events / 2 {
				key := "bench:" + strconv.Itoa(i%50)
				l, err := e.Acquire(ctx, lock.Lock(key), lock.AcquireRequest{Owner: "w", TTL: time.Minute})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := e.Release(ctx, lock.Lock(key), l.Token, "bench"); err != nil {
					b.Fatal(err)
				}
			}
			for {
				mu.Lock()
				n := len(got)
				mu.Unlock()
				if n == events {
					break
				}
				if time.Since(start) > time.Minute {
					b.Fatalf("%d of %d events delivered in a minute", n, events)
				}
				time.Sleep(5 * time.Millisecond)
			}
			b.ReportMetric(events/time.Since(start).Seconds(), "events/s")
		})
	}
}
