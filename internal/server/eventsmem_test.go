package server_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/lockdtest"
	"github.com/lockd/lockd/internal/redistest"
	"github.com/lockd/lockd/internal/server"
	"github.com/lockd/lockd/internal/web"
)

// podMemoryLimit is the memory limit of lockd's container in the shipped
// Kubernetes manifest, in bytes.
func podMemoryLimit(t *testing.T) uint64 {
	t.Helper()
	b, err := os.ReadFile("../../deploy/kubernetes/lockd-deployment.yaml")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?s)limits:.*?memory:\s*(\d+)Mi`).FindSubmatch(b)
	if m == nil {
		t.Fatal("no memory limit in Mi in lockd-deployment.yaml")
	}
	mi, _ := strconv.ParseUint(string(m[1]), 10, 64)
	return mi << 20
}

// N30: with every event stream lockd allows open (--max-event-streams'
// default of 1000 GET /v1/events streams, and the dashboard's 200
// /ui/events) while events are produced, what the heap keeps stays within
// a quarter of the Kubernetes manifest's memory limit, and its peak within
// half: the rest is for the waiters and hold streams, capped apart. Each
// stream's buffer of 1024 events used to hold them by value, 152 KiB per
// stream before the first event: 180 MiB at the caps. The heap measured is
// the whole test process's, the clients' connections included.
func TestEventStreamsAtTheirCapsFitThePod(t *testing.T) {
	const apiStreams, uiStreams, cycles = 1000, 200, 35 // two events per cycle
	rs := redistest.Start(t)
	engine := lock.New(rs.Client(t), lock.Options{})
	reg := prometheus.NewRegistry()
	cfg := server.DefaultConfig()
	cfg.MaxEventStreams = apiStreams
	srv := server.New(engine, zerolog.Nop(), cfg, reg)
	// Not lockdtest's server: its contract check would keep every stream.
	ts := httptest.NewServer(srv.Handler(reg, web.NewDashboard(engine, zerolog.Nop())))
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() {
		cancel()
		srv.Shutdown()
		ts.Close()
		_ = engine.Close()
	})

	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: -1}}
	var open, failed atomic.Int64
	seen := make([]atomic.Int64, apiStreams+uiStreams) // events each stream read
	var wg sync.WaitGroup
	for i := range apiStreams + uiStreams {
		path := "/v1/events"
		if i >= apiStreams {
			path = "/ui/events"
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, ts.URL+path, nil)
			res, err := client.Do(req)
			if err != nil || res.StatusCode != 200 {
				failed.Add(1)
				return
			}
			defer res.Body.Close()
			open.Add(1)
			sc := bufio.NewScanner(res.Body)
			for sc.Scan() {
				if strings.HasPrefix(sc.Text(), "data:") {
					seen[i].Add(1)
				}
			}
		}()
	}
	lockdtest.Eventually(t, func() bool { return open.Load()+failed.Load() == apiStreams+uiStreams }, 15*time.Second, "every stream open")
	if failed.Load() > 0 {
		t.Fatalf("%d streams refused below the caps", failed.Load())
	}

	var peak atomic.Uint64
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		var m runtime.MemStats
		for ctx.Err() == nil {
			runtime.ReadMemStats(&m)
			if m.HeapInuse > peak.Load() {
				peak.Store(m.HeapInuse)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	for i := range cycles {
		key := lock.Lock(fmt.Sprint("mem:", i))
		l, err := engine.Acquire(ctx, key, lock.AcquireRequest{Owner: "t", TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := engine.Release(ctx, key, l.Token, "t"); err != nil {
			t.Fatal(err)
		}
	}
	lockdtest.Eventually(t, func() bool {
		for i := range seen {
			if seen[i].Load() < 2*cycles {
				return false
			}
		}
		return true
	}, 15*time.Second, "every stream read every event")
	// What the open streams keep, without the garbage a collection frees.
	var m runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m)
	live := m.HeapInuse
	cancel()
	<-sampled
	wg.Wait()

	limit := podMemoryLimit(t)
	t.Logf("%d event streams and %d dashboard streams, %d events each: heap in use %.1f MiB after a collection, %.1f MiB at its peak (pod limit %d MiB)",
		apiStreams, uiStreams, 2*cycles, float64(live)/(1<<20), float64(peak.Load())/(1<<20), limit>>20)
	// The garbage collector lets the heap grow to about twice what is live
	// (GOGC=100) before it collects, so the peak is about twice the live
	// heap.
	if live > limit/4 {
		t.Fatalf("%d MiB of heap in use with every event stream open, over a quarter of the pod's %d MiB", live>>20, limit>>20)
	}
	if peak.Load() > limit/2 {
		t.Fatalf("heap in use peaked at %d MiB with every event stream open, over half the pod's %d MiB", peak.Load()>>20, limit>>20)
	}
}
