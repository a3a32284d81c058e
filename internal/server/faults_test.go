package server_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/lockd/lockd/internal/lockdtest"
	"github.com/lockd/lockd/internal/redistest"
)

// proxy is a toxiproxy in front of Redis, in process: it adds latency to
// and resets the connections of every lockd that dials it. Each phase is a
// new proxy on the same address with its toxics set before it listens:
// toxiproxy v2.5 can deadlock when a toxic is added to or removed from a
// proxy with live connections, and changing phase cutting every connection
// is a fault worth having anyway.
type proxy struct {
	api      *toxiproxy.ApiServer
	upstream string
	listen   string
	p        *toxiproxy.Proxy
}

func startProxy(t *testing.T, upstream string) *proxy {
	t.Helper()
	x := &proxy{
		api:      toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop()),
		upstream: upstream,
		listen:   "127.0.0.1:0",
	}
	x.phase(t)
	t.Cleanup(func() { x.p.Stop() })
	return x
}

func (x *proxy) addr() string { return x.listen }

// phase cuts every connection and goes on with these toxics (JSON, as
// toxiproxy's API takes them).
func (x *proxy) phase(t *testing.T, toxics ...string) {
	t.Helper()
	if x.p != nil {
		x.p.Stop()
	}
	x.p = toxiproxy.NewProxy(x.api, "redis", x.listen, x.upstream)
	for _, toxic := range toxics {
		if _, err := x.p.Toxics.AddToxicJson(strings.NewReader(toxic)); err != nil {
			t.Fatalf("add toxic %s: %v", toxic, err)
		}
	}
	if err := x.p.Start(); err != nil {
		t.Fatalf("toxiproxy on %s: %v", x.listen, err)
	}
	x.listen = x.p.Listen
}

// hold is one grant as its client saw it.
type hold struct {
	key        string
	fence      int64
	start, end time.Time
}

// TestWaitersUnderFaults runs contended waiters through two lockd replicas
// while a proxy between lockd and Redis adds latency and resets
// connections. Every waiter must be granted, or answered 409 after its full
// wait naming a holder, or 503; no two holds of a key overlap; fences rise.
func TestWaitersUnderFaults(t *testing.T) {
	rs := redistest.Start(t)
	px := startProxy(t, rs.Addr)
	replicas := []*lockdtest.Lockd{
		lockdtest.Start(t, lockdtest.Options{Redis: rs, RedisAddr: px.addr()}),
		lockdtest.Start(t, lockdtest.Options{Redis: rs, RedisAddr: px.addr()}),
	}
	keys := []string{"fault:a", "fault:b", "fault:c"}
	const (
		workers = 12
		waitMs  = 1500
		ttlMs   = 3000
		run     = 6 * time.Second
	)

	var (
		mu       sync.Mutex
		holds    []hold
		holding  = map[string]int{} // key → holders now, by the clients' view
		overlaps int
		ops      atomic.Int64
		grants   atomic.Int64
		timeouts atomic.Int64
		unavail  atomic.Int64
		early    atomic.Int64 // 409s before the wait was over
	)
	httpc := &http.Client{Timeout: 10 * time.Second}
	post := func(url string, body any) (int, []byte, error) {
		b, _ := json.Marshal(body)
		res, err := httpc.Post(url, "application/json", bytes.NewReader(b))
		if err != nil {
			return 0, nil, err
		}
		defer res.Body.Close()
		out, err := io.ReadAll(res.Body)
		return res.StatusCode, out, err
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 7))
			for {
				select {
				case <-stop:
					return
				default:
				}
				key := keys[r.IntN(len(keys))]
				base := replicas[r.IntN(len(replicas))].URL + "/v1/locks/" + key
				ops.Add(1)
				asked := time.Now()
				status, body, err := post(base+"/acquire", map[string]any{"owner": fmt.Sprint("w", w), "ttl_ms": ttlMs, "wait_ms": waitMs})
				if err != nil {
					t.Errorf("acquire: %v", err)
					return
				}
				switch status {
				case http.StatusOK:
				case http.StatusConflict:
					timeouts.Add(1)
					var p struct {
						Code        string `json:"code"`
						Holder      string `json:"holder"`
						RemainingMs int64  `json:"remaining_ms"`
						Next        *struct {
							Owner string `json:"owner"`
						} `json:"next"`
					}
					_ = json.Unmarshal(body, &p)
					// lock_held names a holder and a time left that a
					// lease of this key can have; queued names the
					// next waiter and no holder.
					switch {
					case p.Code == "lock_held" && p.Holder != "" && p.RemainingMs <= ttlMs:
					case p.Code == "queued" && p.Holder == "" && p.Next != nil && p.Next.Owner != "":
					default:
						t.Errorf("409 that is neither a live holder nor the queue: %s", body)
					}
					if time.Since(asked) < waitMs*time.Millisecond-5*time.Millisecond {
						early.Add(1)
					}
					continue
				case http.StatusServiceUnavailable:
					unavail.Add(1)
					continue
				default:
					t.Errorf("acquire answered %d: %s", status, body)
					continue
				}
				grants.Add(1)
				var l struct {
					Token string `json:"token"`
					Fence int64  `json:"fence"`
				}
				if err := json.Unmarshal(body, &l); err != nil {
					t.Errorf("lease: %v", err)
					continue
				}
				h := hold{key: key, fence: l.Fence, start: time.Now()}
				mu.Lock()
				holding[key]++
				if holding[key] > 1 {
					overlaps++
				}
				mu.Unlock()
				time.Sleep(time.Duration(2+r.IntN(8)) * time.Millisecond) // the protected work
				mu.Lock()
				holding[key]--
				h.end = time.Now()
				holds = append(holds, h)
				mu.Unlock()
				// A release lost to a fault leaves the lease to expire.
				_, _, _ = post(base+"/release", map[string]any{"token": l.Token})
			}
		}()
	}

	// The faults, one after another: quiet, latency, resets, both.
	const (
		latency = `{"name":"lat-down","type":"latency","stream":"downstream","attributes":{"latency":40,"jitter":30}}`
		latUp   = `{"name":"lat-up","type":"latency","stream":"upstream","attributes":{"latency":20,"jitter":20}}`
		resets  = `{"name":"reset","type":"reset_peer","toxicity":0.3,"attributes":{"timeout":200}}`
	)
	time.Sleep(run / 6)
	px.phase(t, latency, latUp)
	time.Sleep(run / 6)
	for range 5 {
		px.phase(t)
		time.Sleep(run / 30)
	}
	px.phase(t, latency, resets)
	time.Sleep(run / 6)
	px.phase(t)
	time.Sleep(run / 6)
	close(stop)
	wg.Wait()

	// Fences rise with every grant of a key, in the order of the holds.
	sort.Slice(holds, func(i, j int) bool { return holds[i].start.Before(holds[j].start) })
	last := map[string]int64{}
	regressions := 0
	for _, h := range holds {
		if h.fence <= last[h.key] {
			regressions++
		}
		last[h.key] = h.fence
	}
	t.Logf("%d operations: %d grants, %d timed out (409), %d unavailable (503), %d overlapping holds, %d fence regressions",
		ops.Load(), grants.Load(), timeouts.Load(), unavail.Load(), overlaps, regressions)
	if overlaps != 0 || regressions != 0 {
		t.Fatalf("mutual exclusion broken: %d overlaps, %d fence regressions", overlaps, regressions)
	}
	if n := early.Load(); n != 0 {
		t.Fatalf("%d waiters were answered 409 before their wait was over", n)
	}
	if grants.Load() < int64(len(keys))*20 {
		t.Fatalf("only %d grants in %v: waiters were not woken", grants.Load(), run)
	}
}
