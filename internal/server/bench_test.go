package server_test

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/lockd/lockd/internal/auth"
	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/lock/store"
	"github.com/lockd/lockd/internal/redistest"
	"github.com/lockd/lockd/internal/server"
)

// The benchmarks here print the figures of ../shared/spec/performance.md:
//
//	go test -run '^$' -bench . -benchtime 1x ./internal/server/
//
// Each runs time-boxed rounds itself (b.N is ignored beyond 1) so that lockd
// and its yardstick are measured in one run, interleaved.

// bareServer is the yardstick: net/http and encoding/json around one
// EVALSHA per request, with nothing else.
func bareServer(rdb *redis.Client) http.Handler {
	acquire := redis.NewScript(`return redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) and 1 or 0`)
	release := redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /bare/{key}/acquire", func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			TTL int64 `json:"ttl_ms"`
		}
		_ = json.NewDecoder(r.Body).Decode(&body)
		var b [24]byte
		_, _ = rand.Read(b[:])
		token := base64.RawURLEncoding.EncodeToString(b[:])
		ok, err := acquire.Run(r.Context(), rdb, []string{"bare:" + r.PathValue("key")}, token, body.TTL).Int()
		if err != nil || ok == 0 {
			w.WriteHeader(409)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"token": token})
	})
	mux.HandleFunc("POST /bare/{key}/release", func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Token string `json:"token"`
		}
		_ = json.NewDecoder(r.Body).Decode(&body)
		_, _ = release.Run(r.Context(), rdb, []string{"bare:" + r.PathValue("key")}, body.Token).Result()
		_ = json.NewEncoder(w).Encode(map[string]any{"released": true})
	})
	return mux
}

// engineServer is the bare server's HTTP around lockd's engine: the same
// handlers, with Engine.Acquire and Engine.Release (every feature of the
// scripts, the batching of calls) instead of one EVALSHA. Beside the bare
// server it prices the engine; beside lockd, lockd's HTTP stack (router,
// generated code, validation, auth, access log, metrics, the full lease in
// the answer).
func engineServer(e *lock.Engine) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /engine/{key}/acquire", func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			TTL  int64 `json:"ttl_ms"`
			Wait int64 `json:"wait_ms"`
		}
		_ = json.NewDecoder(r.Body).Decode(&body)
		l, err := e.Acquire(r.Context(), lock.Lock(r.PathValue("key")), lock.AcquireRequest{Owner: "bench", Actor: "bench",
			TTL: time.Duration(body.TTL) * time.Millisecond, Wait: time.Duration(body.Wait) * time.Millisecond})
		if err != nil {
			w.WriteHeader(409)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"token": l.Token})
	})
	mux.HandleFunc("POST /engine/{key}/release", func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Token string `json:"token"`
		}
		_ = json.NewDecoder(r.Body).Decode(&body)
		_, _ = e.Release(r.Context(), lock.Lock(r.PathValue("key")), body.Token, "bench")
		_ = json.NewEncoder(w).Encode(map[string]any{"released": true})
	})
	return mux
}

type target struct {
	name  string
	base  string // URL prefix of /{key}/acquire and /{key}/release
	calls *redistest.Counter
	// cycle, when set, is the target's own acquire+release (etcd's
	// mutex); else the cycle over HTTP at base.
	cycle func(key string) error
}

func benchTargets(b *testing.B) (lockd, bare, eng target, rs *redistest.Server) {
	rs = redistest.Start(b)
	lockdCalls, bareCalls, engineCalls := &redistest.Counter{}, &redistest.Counter{}, &redistest.Counter{}
	// Both clients as lockd serve configures its own.
	opts := func() *redis.Options {
		o := &redis.Options{Addr: rs.Addr, PoolSize: 64}
		store.TuneClient(o)
		return o
	}
	rdb := redis.NewClient(opts())
	rdb.AddHook(lockdCalls)
	brdb := redis.NewClient(opts())
	brdb.AddHook(bareCalls)
	erdb := redis.NewClient(opts())
	erdb.AddHook(engineCalls)
	engine := lock.New(rdb, lock.Options{})
	bareEngine := lock.New(erdb, lock.Options{})
	reg := prometheus.NewRegistry()
	// Every feature on, as in production: an API key checked on every
	// request, the access log (written in full, to nowhere), metrics,
	// history, fences and the event stream.
	cfg := benchConfig(b)
	// BENCH_OTLP=1: with tracing to an OTLP endpoint (tracing_test.go).
	if cfg.Tracer = benchTracer(b); cfg.Tracer.Enabled() {
		rdb.AddHook(cfg.Tracer.RedisHook())
	}
	srv := server.New(engine, zerolog.New(io.Discard), cfg, reg)
	ts := httptest.NewServer(srv.Handler(reg, nil))
	bs := httptest.NewServer(bareServer(brdb))
	es := httptest.NewServer(engineServer(bareEngine))
	b.Cleanup(func() {
		srv.Shutdown()
		_ = engine.Close()
		_ = bareEngine.Close()
		ts.Close()
		bs.Close()
		es.Close()
		_ = rdb.Close()
		_ = brdb.Close()
		_ = erdb.Close()
	})
	return target{name: "lockd", base: ts.URL + "/v1/locks", calls: lockdCalls}, target{name: "bare", base: bs.URL + "/bare", calls: bareCalls},
		target{name: "engine", base: es.URL + "/engine", calls: engineCalls}, rs
}

// benchConfig is lockd's configuration in the benchmarks: the defaults
// and one API key (benchKey), checked on every request.
func benchConfig(b *testing.B) server.Config {
	keys, err := auth.Parse([]byte("keys:\n  - {name: bench, key: " + benchKey + ", scopes: [read, write]}\n"))
	if err != nil {
		b.Fatal(err)
	}
	cfg := server.DefaultConfig()
	cfg.Keys = keys
	return cfg
}

var httpClient = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256, MaxConnsPerHost: 256}}

// benchKey is the API key lockd checks in the benchmarks; the bare server
// ignores it.
const benchKey = "bench-key-0123456789abcdef"

func postJSON(url string, body []byte) (int, []byte, error) {
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+benchKey)
	res, err := httpClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return res.StatusCode, b, err
}

// cycle is one acquire and one release of key over HTTP.
func cycle(base, key string) error {
	status, body, err := postJSON(base+"/"+key+"/acquire", []byte(`{"ttl_ms":30000}`))
	if err != nil || status != 200 {
		return fmt.Errorf("acquire: %d %v %s", status, err, body)
	}
	var l struct {
		Token string `json:"token"`
	}
	if err := json.Unmarshal(body, &l); err != nil {
		return err
	}
	status, body, err = postJSON(base+"/"+key+"/release", []byte(`{"token":"`+l.Token+`"}`))
	if err != nil || status != 200 {
		return fmt.Errorf("release: %d %v %s", status, err, body)
	}
	return nil
}

type loadResult struct {
	cycles   int
	elapsed  time.Duration
	lat      []time.Duration
	calls    int64
	trips    int64
	cpu      time.Duration // this process (server and load) plus redis-server
	allocs   uint64        // heap allocations in this process (server and load)
	redisCPU time.Duration
	redisRun time.Duration // of redisCPU, executing commands and scripts (commandstats)
	failures int
}

func (r loadResult) rate() float64 { return float64(r.cycles) / r.elapsed.Seconds() }

func percentile(lat []time.Duration, p float64) time.Duration {
	if len(lat) == 0 {
		return 0
	}
	slices.Sort(lat)
	return lat[min(len(lat)-1, int(float64(len(lat))*p))]
}

// runLoad runs clients goroutines, each cycling on its own key, for d.
func runLoad(t target, rs *redistest.Server, admin *redis.Client, clients int, d time.Duration) loadResult {
	var mu sync.Mutex
	var res loadResult
	if t.calls == nil {
		t.calls = &redistest.Counter{}
	}
	calls0, trips0 := t.calls.Commands.Load(), t.calls.RoundTrips.Load()
	rcpu0 := redistest.CPU(admin)
	run0 := redistest.CommandTime(admin)
	cpu0 := cpuTime() + rcpu0
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	allocs0 := ms.Mallocs
	start := time.Now()
	deadline := start.Add(d)
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("bench:%s:%d", t.name, c)
			var lat []time.Duration
			fails := 0
			for time.Now().Before(deadline) {
				s := time.Now()
				var err error
				if t.cycle != nil {
					err = t.cycle(key)
				} else {
					err = cycle(t.base, key)
				}
				if err != nil {
					fails++
					continue
				}
				lat = append(lat, time.Since(s))
			}
			mu.Lock()
			res.lat = append(res.lat, lat...)
			res.failures += fails
			mu.Unlock()
		}()
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	res.cycles = len(res.lat)
	res.calls = t.calls.Commands.Load() - calls0
	res.trips = t.calls.RoundTrips.Load() - trips0
	rcpu := redistest.CPU(admin)
	res.cpu = cpuTime() + rcpu - cpu0
	res.redisCPU = rcpu - rcpu0
	res.redisRun = redistest.CommandTime(admin) - run0
	runtime.ReadMemStats(&ms)
	res.allocs = ms.Mallocs - allocs0
	return res
}

// perCycle is d per cycle of r, in µs.
func perCycle(d time.Duration, r loadResult) float64 {
	return float64(d.Microseconds()) / float64(max(r.cycles, 1))
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkHTTPVersusBare measures an uncontended acquire+release cycle over
// HTTP through lockd's full router beside the bare server, 32 clients,
// interleaved rounds, and reports lockd's ratio to the bare server. A third
// server, the bare one around lockd's engine, splits that ratio in two:
// what the engine costs (engine/bare) and what lockd's HTTP stack costs
// (lockd/engine).
func BenchmarkHTTPVersusBare(b *testing.B) {
	lockdT, bareT, engineT, rs := benchTargets(b)
	admin := rs.Client(b)
	const round, rounds = 2 * time.Second, 3
	only := os.Getenv("BENCH_ONLY") // bare|engine|lockd|etcd runs one side alone, for a profile
	clients := 32
	if n, err := strconv.Atoi(os.Getenv("BENCH_CLIENTS")); err == nil && n > 0 {
		clients = n // for a profile of fewer callers
	}
	targets := []target{bareT, engineT, lockdT}
	if only == "" || only == "etcd" {
		if e := startEtcd(b); e != nil {
			targets = append(targets, target{name: "etcd", cycle: e.cycle})
		}
	}
	targets = slices.DeleteFunc(targets, func(t target) bool { return only != "" && only != t.name })
	// Warm up: scripts loaded, connections open.
	for _, t := range targets {
		runLoad(t, rs, admin, clients, 300*time.Millisecond)
	}
	b.ResetTimer()
	var ratios, engineRatios, stackRatios, etcdRatios []float64
	var last, one map[string]loadResult
	for range b.N {
		for range rounds {
			last = map[string]loadResult{}
			for _, t := range targets {
				last[t.name] = runLoad(t, rs, admin, clients, round)
			}
			ratios = append(ratios, last["lockd"].rate()/last["bare"].rate())
			engineRatios = append(engineRatios, last["engine"].rate()/last["bare"].rate())
			stackRatios = append(stackRatios, last["lockd"].rate()/last["engine"].rate())
			etcdRatios = append(etcdRatios, last["etcd"].rate()/last["bare"].rate())
		}
		// One client: the latency of a lone caller, nothing queued.
		one = map[string]loadResult{}
		for _, t := range targets {
			one[t.name] = runLoad(t, rs, admin, 1, round)
		}
	}
	b.StopTimer()
	median := func(v []float64) float64 { slices.Sort(v); return v[len(v)/2] }
	for _, name := range []string{"bare", "engine", "lockd", "etcd"} {
		if r, ok := one[name]; ok {
			b.Logf("%-6s 1 client: %5.0f cycles/s  p50 %5.0f µs  p99 %6.0f µs  %.0f allocations/cycle  %.0f µs in Redis/cycle, %.0f µs of it executing commands",
				name, r.rate(), float64(percentile(r.lat, .5).Microseconds()), float64(percentile(r.lat, .99).Microseconds()),
				float64(r.allocs)/float64(r.cycles), perCycle(r.redisCPU, r), perCycle(r.redisRun, r))
		}
	}
	for _, name := range []string{"bare", "engine", "lockd", "etcd"} {
		r, ok := last[name]
		if !ok {
			continue
		}
		if name == "etcd" {
			// etcd's own CPU is another process's, not counted here.
			b.Logf("%-6s %7.0f cycles/s  p50 %6.0f µs  p99 %6.0f µs  failures %d", name, r.rate(),
				float64(percentile(r.lat, .5).Microseconds()), float64(percentile(r.lat, .99).Microseconds()), r.failures)
			continue
		}
		b.Logf("%-5s %7.0f cycles/s  p50 %6.0f µs  p99 %6.0f µs  %.2f Redis calls/cycle in %.2f round trips  %.0f µs CPU/cycle (all processes, %.0f µs in Redis, %.0f of it executing commands)  %.0f allocations/cycle (server and load)  failures %d",
			name, r.rate(), float64(percentile(r.lat, .5).Microseconds()), float64(percentile(r.lat, .99).Microseconds()),
			float64(r.calls)/float64(r.cycles), float64(r.trips)/float64(r.cycles), perCycle(r.cpu, r),
			perCycle(r.redisCPU, r), perCycle(r.redisRun, r), float64(r.allocs)/float64(r.cycles), r.failures)
	}
	if only != "" {
		return // one side, for a profile
	}
	b.Logf("medians of %d rounds: lockd/bare %.2f = engine/bare %.2f (the engine: scripts, batching) × lockd/engine %.2f (the HTTP stack)",
		len(ratios), median(ratios), median(engineRatios), median(stackRatios))
	p50 := func(r loadResult) float64 { return float64(percentile(r.lat, .5).Microseconds()) }
	b.Logf("1 client: lockd p50 / bare p50 %.2f", p50(one["lockd"])/p50(one["bare"]))
	b.ReportMetric(p50(one["lockd"])/p50(one["bare"]), "lockd/bare-p50-1client")
	if _, ok := last["etcd"]; ok {
		b.Logf("etcd mutex/bare %.2f (median of %d rounds); 1 client: etcd p50 / bare p50 %.2f",
			median(etcdRatios), len(etcdRatios), p50(one["etcd"])/p50(one["bare"]))
		b.ReportMetric(median(etcdRatios), "etcd/bare")
	}
	l := last["lockd"]
	b.ReportMetric(median(ratios), "lockd/bare")
	b.ReportMetric(median(engineRatios), "engine/bare")
	b.ReportMetric(l.rate(), "cycles/s")
	b.ReportMetric(float64(percentile(l.lat, .5).Microseconds()), "p50-µs")
	b.ReportMetric(float64(percentile(l.lat, .99).Microseconds()), "p99-µs")
	b.ReportMetric(float64(l.calls)/float64(l.cycles), "redis-calls/cycle")
	b.ReportMetric(float64(l.cpu.Microseconds())/float64(l.cycles), "cpu-µs/cycle")
}

// BenchmarkHandoff: 16 waiters on one key over HTTP, each holding 1 ms,
// through lockd and through the engine server (the engine's hand-off
// without lockd's HTTP stack), interleaved. Reports grants/s of both and
// their ratio, the release→grant gap, fairness and Redis calls per grant.
func BenchmarkHandoff(b *testing.B) {
	lockdT, _, engineT, _ := benchTargets(b)
	const waiters, d, rounds = 16, 3 * time.Second, 3
	b.ResetTimer()
	for range b.N {
		var ratios []float64
		var last map[string]handoffResult
		for range rounds {
			last = map[string]handoffResult{}
			for _, t := range []target{engineT, lockdT} {
				r := handoffRound(t, waiters, d)
				b.Logf("hand-off through %s: %d waiters, %.0f grants/s, gap p50 %.2f ms p99 %.2f ms, grants per waiter min %d max %d, %.2f Redis calls/grant",
					t.name, waiters, r.rate, ms(r.gapP50), ms(r.gapP99), r.min, r.max, r.calls)
				last[t.name] = r
			}
			ratios = append(ratios, last["lockd"].rate/last["engine"].rate)
		}
		slices.Sort(ratios)
		l := last["lockd"]
		b.Logf("lockd/engine hand-off: %.2f (median of %d rounds)", ratios[len(ratios)/2], rounds)
		b.ReportMetric(ratios[len(ratios)/2], "lockd/engine")
		b.ReportMetric(l.rate, "grants/s")
		b.ReportMetric(ms(l.gapP50), "gap-p50-ms")
		b.ReportMetric(ms(l.gapP99), "gap-p99-ms")
		b.ReportMetric(float64(l.min), "min-grants/waiter")
		b.ReportMetric(float64(l.max), "max-grants/waiter")
		b.ReportMetric(l.calls, "redis-calls/grant")
	}
}

type handoffResult struct {
	rate           float64 // grants/s
	gapP50, gapP99 time.Duration
	min, max       int // grants per waiter
	calls          float64
}

// handoffRound runs waiters goroutines on one key of t for d, each taking
// the key (waiting for it), holding it 1 ms and releasing it.
func handoffRound(t target, waiters int, d time.Duration) handoffResult {
	var lastRelease atomic.Int64 // unix ns of the last release call
	var mu sync.Mutex
	var gaps []time.Duration
	grants := make([]int, waiters)
	calls0 := t.calls.Commands.Load()
	start := time.Now()
	deadline := start.Add(d)
	var wg sync.WaitGroup
	for w := range waiters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				status, body, err := postJSON(t.base+"/handoff/acquire", []byte(`{"ttl_ms":5000,"wait_ms":10000}`))
				if err != nil || status != 200 {
					continue
				}
				now := time.Now()
				if lr := lastRelease.Load(); lr != 0 {
					mu.Lock()
					gaps = append(gaps, now.Sub(time.Unix(0, lr)))
					mu.Unlock()
				}
				grants[w]++
				var l struct {
					Token string `json:"token"`
				}
				_ = json.Unmarshal(body, &l)
				time.Sleep(time.Millisecond)
				lastRelease.Store(time.Now().UnixNano())
				_, _, _ = postJSON(t.base+"/handoff/release", []byte(`{"token":"`+l.Token+`"}`))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	total := 0
	for _, g := range grants {
		total += g
	}
	return handoffResult{
		rate: float64(total) / elapsed.Seconds(), gapP50: percentile(gaps, .5), gapP99: percentile(gaps, .99),
		min: slices.Min(grants), max: slices.Max(grants),
		calls: float64(t.calls.Commands.Load()-calls0) / float64(total),
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
