package server_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/lockd/lockd/internal/auth"
	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/lock/store"
	"github.com/lockd/lockd/internal/redistest"
	"github.com/lockd/lockd/internal/server"
)

// BenchmarkHTTPStack prices lockd's HTTP stack alone: an acquire+release
// cycle handed straight to a handler's ServeHTTP (no sockets, no load
// generator), through lockd's full handler as in production and through
// the engine server's bare handlers around the same engine on the same
// Redis. Redis runs in its own process, so this process's CPU per cycle,
// lockd's less the engine server's, is what lockd's HTTP path costs:
// routing, auth, validation, JSON, the access log, metrics, the span.
//
//	go test -run '^$' -bench HTTPStack -benchtime 20000x ./internal/server/
func BenchmarkHTTPStack(b *testing.B) {
	engine, srv, reg := stackServer(b)
	for _, t := range []struct {
		name   string
		h      http.Handler
		prefix string
	}{
		{"engine", engineServer(engine), "/engine/"},
		{"lockd", srv.Handler(reg, nil), "/v1/locks/"},
	} {
		b.Run(t.name, func(b *testing.B) {
			key := "stack-" + t.name
			cycle := func() {
				w := serve(b, t.h, t.prefix+key+"/acquire", []byte(`{"ttl_ms":30000}`))
				var l struct {
					Token string `json:"token"`
				}
				if err := json.Unmarshal(w.Body.Bytes(), &l); err != nil || w.Code != 200 {
					b.Fatalf("acquire: %d %s", w.Code, w.Body)
				}
				if w := serve(b, t.h, t.prefix+key+"/release", []byte(`{"token":"`+l.Token+`"}`)); w.Code != 200 {
					b.Fatalf("release: %d %s", w.Code, w.Body)
				}
			}
			for range 200 {
				cycle() // warm: scripts loaded, pools filled
			}
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			allocs0 := ms.Mallocs
			cpu0 := cpuTime()
			b.ResetTimer()
			for range b.N {
				cycle()
			}
			b.StopTimer()
			cpu := cpuTime() - cpu0
			runtime.ReadMemStats(&ms)
			b.ReportMetric(float64(cpu.Nanoseconds())/1e3/float64(b.N), "cpu-µs/cycle")
			b.ReportMetric(float64(ms.Mallocs-allocs0)/float64(b.N), "allocs/cycle")
		})
	}
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
// (request id, span, logger, caller, access log, metrics) on /healthz,
// whose handler does nothing: no Redis, no sockets.
func BenchmarkMiddleware(b *testing.B) {
	_, srv, reg := stackServer(b)
	h := srv.Handler(reg, nil)
	r := httptest.NewRequest(http.MethodGet, "/healthz", nil)
	b.ReportAllocs()
	for b.Loop() {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != 200 {
			b.Fatal(w.Code, w.Body)
		}
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
	keys, err := auth.Parse([]byte("keys:\n  - {name: bench, key: " + benchKey + ", scopes: [read, write]}\n"))
	if err != nil {
		b.Fatal(err)
	}
	cfg := server.DefaultConfig()
	cfg.Keys = keys
	reg := prometheus.NewRegistry()
	srv := server.New(engine, zerolog.New(io.Discard), cfg, reg)
	b.Cleanup(func() {
		srv.Shutdown()
		_ = engine.Close()
		_ = rdb.Close()
	})
	return engine, srv, reg
}
