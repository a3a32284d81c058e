package server_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/lock/store"
	"github.com/lockd/lockd/internal/redistest"
	"github.com/lockd/lockd/internal/server"
)

// BenchmarkHTTPStack prices lockd's HTTP stack alone: acquire+release
// cycles handed straight to a handler's ServeHTTP (no sockets, no load
// generator), through lockd's full handler as in production and through
// the engine server's bare handlers around the same engine on the same
// Redis, in interleaved rounds. Redis runs in its own process, so this
// process's CPU per cycle, lockd's less the engine server's, is what
// lockd's HTTP path costs: routing, auth, validation, JSON, the access
// log, metrics, the span. One caller: most of either side's CPU is the
// round trips to Redis and the scheduler's waits for them, which move
// with the machine's load; the difference of the two, taken round by
// round, much less.
//
//	go test -run '^$' -bench HTTPStack -benchtime 1x ./internal/server/
func BenchmarkHTTPStack(b *testing.B) {
	engine, srv, reg := stackServer(b)
	const rounds, cycles = 5, 4000
	sides := []struct {
		name   string
		h      http.Handler
		prefix string
	}{
		{"engine", engineServer(engine), "/engine/"},
		{"lockd", srv.Handler(reg, nil), "/v1/locks/"},
	}
	cycle := func(h http.Handler, prefix, key string) {
		w := serve(b, h, prefix+key+"/acquire", []byte(`{"ttl_ms":30000}`))
		var l struct {
			Token string `json:"token"`
		}
		if err := json.Unmarshal(w.Body.Bytes(), &l); err != nil || w.Code != 200 {
			b.Fatalf("acquire: %d %s", w.Code, w.Body)
		}
		if w := serve(b, h, prefix+key+"/release", []byte(`{"token":"`+l.Token+`"}`)); w.Code != 200 {
			b.Fatalf("release: %d %s", w.Code, w.Body)
		}
	}
	for _, s := range sides {
		for range 200 {
			cycle(s.h, s.prefix, "stack") // warm: scripts loaded, pools filled
		}
	}
	b.ResetTimer()
	var extra, ratio []float64
	var allocs [2]float64
	for range b.N {
		for range rounds {
			var cpu [2]float64
			for i, s := range sides {
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				allocs0, cpu0 := ms.Mallocs, cpuTime()
				for range cycles {
					cycle(s.h, s.prefix, "stack")
				}
				cpu[i] = float64((cpuTime() - cpu0).Microseconds()) / cycles
				runtime.ReadMemStats(&ms)
				allocs[i] = float64(ms.Mallocs-allocs0) / cycles
			}
			b.Logf("engine %.1f µs, lockd %.1f µs of this process's CPU per cycle", cpu[0], cpu[1])
			extra, ratio = append(extra, cpu[1]-cpu[0]), append(ratio, cpu[1]/cpu[0])
		}
	}
	b.StopTimer()
	median := func(v []float64) float64 { slices.Sort(v); return v[len(v)/2] }
	b.Logf("lockd's HTTP stack: %.1f µs of CPU per cycle more than the engine server's (median of %d rounds), lockd/engine %.2f; allocations per cycle: engine %.1f, lockd %.1f",
		median(extra), len(extra), median(ratio), allocs[0], allocs[1])
	b.ReportMetric(median(extra), "stack-cpu-µs/cycle")
	b.ReportMetric(allocs[1]-allocs[0], "stack-allocs/cycle")
}

// serve hands one POST to h, as a client with the bench's API key sends it.
func serve(b *testing.B, h http.Handler, path string, body []byte) *httptest.ResponseRecorder {
	b.Helper()
	r := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Authorization", "Bearer "+benchKey)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// BenchmarkMiddleware prices the middleware every request goes through
// (request id, span, caller and API key, access log, metrics) on
// /healthz, whose handler does nothing: no Redis, no sockets. Like the
// others here it runs a fixed count (50,000 requests) whatever b.N.
func BenchmarkMiddleware(b *testing.B) {
	_, srv, reg := stackServer(b)
	h := srv.Handler(reg, nil)
	const requests = 50_000
	r := httptest.NewRequest(http.MethodGet, "/healthz", nil)
	r.Header.Set("Authorization", "Bearer "+benchKey)
	b.ResetTimer()
	for range b.N {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		allocs0, start := ms.Mallocs, time.Now()
		for range requests {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != 200 {
				b.Fatal(w.Code, w.Body)
			}
		}
		d := time.Since(start)
		runtime.ReadMemStats(&ms)
		b.Logf("%.0f ns and %.1f allocations a request (the recorder's 3 included)",
			float64(d.Nanoseconds())/requests, float64(ms.Mallocs-allocs0)/requests)
		b.ReportMetric(float64(d.Nanoseconds())/requests, "ns/request")
		b.ReportMetric(float64(ms.Mallocs-allocs0)/requests, "allocs/request")
	}
}

// stackServer is lockd as BenchmarkHTTPVersusBare's runs it (an API key
// checked on every request, the access log written to nowhere, metrics),
// on a Redis of its own.
func stackServer(b *testing.B) (*lock.Engine, *server.Server, *prometheus.Registry) {
	rs := redistest.Start(b)
	o := &redis.Options{Addr: rs.Addr, PoolSize: 8}
	store.TuneClient(o)
	rdb := redis.NewClient(o)
	engine := lock.New(rdb, lock.Options{})
	reg := prometheus.NewRegistry()
	srv := server.New(engine, zerolog.New(io.Discard), benchConfig(b), reg)
	b.Cleanup(func() {
		srv.Shutdown()
		_ = engine.Close()
		_ = rdb.Close()
	})
	return engine, srv, reg
}
