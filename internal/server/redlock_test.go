package server_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/lockd/lockd/api"
	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/lockdtest"
	"github.com/lockd/lockd/internal/redistest"
	"github.com/lockd/lockd/internal/server"
)

// threeMasters starts three independent redis-servers.
func threeMasters(t *testing.T) []*redistest.Server {
	return []*redistest.Server{redistest.Start(t), redistest.Start(t), redistest.Start(t)}
}

// redlockServer is lockd's server (API only) on a Redlock over masters,
// every exchange checked against api/openapi.yaml, with its own metrics
// registry.
func redlockServer(t *testing.T, masters []*redistest.Server) (*lock.Redlock, *httptest.Server, *prometheus.Registry) {
	t.Helper()
	clients := make([]*redis.Client, len(masters))
	for i, m := range masters {
		clients[i] = m.Client(t)
	}
	engine, err := lock.NewRedlock(clients, lock.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = engine.Close() })
	reg := prometheus.NewRegistry()
	srv := server.New(engine, zerolog.Nop(), server.DefaultConfig(), reg)
	ts := httptest.NewServer(lockdtest.ValidateSpec(srv.Handler(reg, nil), t.Errorf))
	t.Cleanup(func() { srv.Shutdown(); ts.Close() })
	return engine, ts, reg
}

// Redlock has neither shared holds nor semaphores: asking for them is a
// 400 unsupported that says so (never a 500, never an exclusive grant in
// their place), while exclusive locks work and show their one holder.
func TestRedlockRefusesSharedAndSemaphores(t *testing.T) {
	engine, ts, _ := redlockServer(t, threeMasters(t))

	for _, tc := range []struct {
		name, path, body, field string
	}{
		{"shared acquire", "/v1/locks/rl:1/acquire", `{"mode":"shared"}`, "mode"},
		{"shared hold", "/v1/locks/rl:1/hold", `{"mode":"shared"}`, "mode"},
		{"semaphore acquire", "/v1/semaphores/rl:1/acquire", `{"limit":2}`, ""},
		{"semaphore hold", "/v1/semaphores/rl:1/hold", `{"limit":2}`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, body, err := do(http.MethodPost, ts.URL+tc.path, "application/json", tc.body)
			if err != nil {
				t.Fatal(err)
			}
			p := problemOf(t, res, body)
			if res.StatusCode != 400 || p.Code != api.ProblemCodeUnsupported || p.Detail == nil || *p.Detail == "" {
				t.Fatalf("%d %s", res.StatusCode, body)
			}
			field := ""
			if p.Field != nil {
				field = *p.Field
			}
			if field != tc.field {
				t.Fatalf("field %q, want %q: %s", field, tc.field, body)
			}
		})
	}
	if _, err := engine.State(context.Background(), lock.Lock("rl:1")); err != lock.ErrNotFound {
		t.Fatalf("a refused shared acquire left a lease: %v", err)
	}

	c, err := api.NewClientWithResponses(ts.URL)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	l, err := c.AcquireLockWithResponse(ctx, "rl:2", nil, api.AcquireRequest{Owner: ptr("w")})
	if err != nil || l.JSON200 == nil || l.JSON200.Mode != api.GrantModeExclusive {
		t.Fatalf("exclusive acquire: %v %s", err, l.Body)
	}
	st, err := c.GetLockWithResponse(ctx, "rl:2")
	if err != nil || st.JSON200 == nil || len(st.JSON200.Holders) != 1 || st.JSON200.Holders[0].Fence != l.JSON200.Fence ||
		st.JSON200.Holders[0].Owner != "w" || st.JSON200.Queue == nil {
		t.Fatalf("state: %v %s", err, st.Body)
	}
}

// Every semaphore endpoint, the list included, answers 400 unsupported
// under Redlock: never an empty page, a 404 or an empty history, which
// would read as "no semaphore is in use".
func TestRedlockSemaphoresUnsupported(t *testing.T) {
	_, ts, _ := redlockServer(t, threeMasters(t))
	for _, tc := range []struct {
		method, path, body string
	}{
		{http.MethodGet, "/v1/semaphores", ""},
		{http.MethodGet, "/v1/semaphores?prefix=rl:", ""},
		{http.MethodGet, "/v1/semaphores/rl:pool", ""},
		{http.MethodGet, "/v1/semaphores/rl:pool/history", ""},
		{http.MethodGet, "/v1/semaphores/rl:pool/history?type=renewed", ""},
		{http.MethodPost, "/v1/semaphores/rl:pool/renew", `{"token":"t0123456789012345678901"}`},
		{http.MethodPost, "/v1/semaphores/rl:pool/release", `{"token":"t0123456789012345678901"}`},
		{http.MethodPost, "/v1/semaphores/rl:pool/force-release", `{}`},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			ct := ""
			if tc.body != "" {
				ct = "application/json"
			}
			res, body, err := do(tc.method, ts.URL+tc.path, ct, tc.body)
			if err != nil {
				t.Fatal(err)
			}
			if res.StatusCode != 400 {
				t.Fatalf("%d %s, want 400 unsupported", res.StatusCode, body)
			}
			p := problemOf(t, res, body)
			if p.Code != api.ProblemCodeUnsupported || p.Detail == nil || !strings.Contains(*p.Detail, "semaphores") || p.Field != nil {
				t.Fatalf("%s, want unsupported saying Redlock has no semaphores", body)
			}
		})
	}
}

// GET /v1/events answers 400 unsupported under Redlock: no master has
// every event (each records those it took part in, failed attempts
// included), so one master's stream would be neither whole nor true.
func TestRedlockEventStreamUnsupported(t *testing.T) {
	_, ts, _ := redlockServer(t, threeMasters(t))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, ts.URL+"/v1/events", nil)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != 400 {
		t.Fatalf("GET /v1/events: %d %s, want 400 unsupported", res.StatusCode, res.Header.Get("Content-Type"))
	}
	body, _ := io.ReadAll(res.Body)
	p := problemOf(t, res, body)
	if p.Code != api.ProblemCodeUnsupported || p.Detail == nil || !strings.Contains(*p.Detail, "event stream") || p.Field != nil {
		t.Fatalf("%s, want unsupported saying Redlock has no event stream", body)
	}
}

// The replica-acks counter, which can only stay 0 under Redlock
// (--replica-acks does not apply to independent masters), is not exported.
func TestRedlockNoReplicaAcksMetric(t *testing.T) {
	_, _, reg := redlockServer(t, threeMasters(t))
	if seriesOf(t, reg, "lockd_replica_acks_missed_total") != 0 {
		t.Fatal("lockd_replica_acks_missed_total is exported under Redlock, where it can only be 0")
	}
	if seriesOf(t, reg, "lockd_waiters") != 1 {
		t.Fatal("no lockd_waiters: the registry is not the server's")
	}
}

// Lapses are counted under Redlock, each once, whichever of two lockd
// replicas notices it: lockd_hold_seconds{end="expired"} and
// lockd_expiry_notice_delay_seconds.
func TestRedlockLapseMetrics(t *testing.T) {
	masters := threeMasters(t)
	a, _, regA := redlockServer(t, masters)
	_, _, regB := redlockServer(t, masters)
	const n = 8
	for i := range n {
		if _, err := a.Acquire(context.Background(), lock.Lock(fmt.Sprintf("rl:lapse:%d", i)), lock.AcquireRequest{
			Owner: "w", TTL: time.Duration(300+20*i) * time.Millisecond,
		}); err != nil {
			t.Fatal(err)
		}
	}
	counts := func() (held, noticed uint64) {
		for _, reg := range []*prometheus.Registry{regA, regB} {
			mfs, err := reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			for _, mf := range mfs {
				for _, m := range mf.GetMetric() {
					switch mf.GetName() {
					case "lockd_hold_seconds":
						for _, l := range m.GetLabel() {
							if l.GetName() == "end" && l.GetValue() == "expired" {
								held += m.GetHistogram().GetSampleCount()
							}
						}
					case "lockd_expiry_notice_delay_seconds":
						noticed += m.GetHistogram().GetSampleCount()
					}
				}
			}
		}
		return held, noticed
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		held, noticed := counts()
		if held == n && noticed == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 5 s: %d expired holds and %d notice delays counted, want %d each", held, noticed, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Each master records each lapse; none of those records is counted
	// twice.
	time.Sleep(time.Second)
	if held, noticed := counts(); held != n || noticed != n {
		t.Fatalf("%d expired holds and %d notice delays counted, want %d each", held, noticed, n)
	}
}
