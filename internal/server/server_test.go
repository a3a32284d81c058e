package server_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lockd/lockd/api"
	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/lockdtest"
	"github.com/lockd/lockd/internal/redistest"
	"github.com/lockd/lockd/internal/server"
)

type fixture struct {
	url    string
	client *api.ClientWithResponses
	engine *lock.Engine
	redis  *redistest.Server
	srv    *server.Server
	logs   *lockdtest.Buffer
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	rs := redistest.Start(t)
	return newFixtureOn(t, rs)
}

func newFixtureOn(t testing.TB, rs *redistest.Server) *fixture {
	t.Helper()
	return newFixtureWith(t, rs, func(*server.Config) {})
}

func newFixtureWith(t testing.TB, rs *redistest.Server, configure func(*server.Config)) *fixture {
	t.Helper()
	ld := lockdtest.Start(t, lockdtest.Options{Redis: rs, Configure: func(c *server.Config) {
		c.MaxHolds = 4
		configure(c)
	}})
	c, err := api.NewClientWithResponses(ld.URL)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{url: ld.URL, client: c, engine: ld.Engine, redis: ld.Redis, srv: ld.Server, logs: ld.Logs}
}

func ptr[T any](v T) *T { return &v }

func (f *fixture) acquire(t *testing.T, key string, body api.AcquireRequest) api.Lease {
	t.Helper()
	res, err := f.client.AcquireLockWithResponse(context.Background(), key, nil, body)
	if err != nil {
		t.Fatal(err)
	}
	if res.JSON200 == nil {
		t.Fatalf("acquire %s: %d %s", key, res.StatusCode(), res.Body)
	}
	return *res.JSON200
}

func (f *fixture) acquireSem(t *testing.T, name string, body api.SemaphoreAcquireRequest) api.Lease {
	t.Helper()
	res, err := f.client.AcquireSemaphoreWithResponse(context.Background(), name, nil, body)
	if err != nil {
		t.Fatal(err)
	}
	if res.JSON200 == nil {
		t.Fatalf("acquire semaphore %s: %d %s", name, res.StatusCode(), res.Body)
	}
	return *res.JSON200
}

func TestLeaseLifecycle(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	l := f.acquire(t, "order:pay:1", api.AcquireRequest{Owner: ptr("worker-7"), TtlMs: ptr(int64(30000))})
	if l.Key != "order:pay:1" || l.Owner != "worker-7" || l.Count != 1 || l.TtlMs != 30000 || l.Fence <= 0 || len(l.Token) < 22 {
		t.Fatalf("lease = %+v", l)
	}
	if !l.ExpiresAt.Equal(l.AcquiredAt.Add(30 * time.Second)) {
		t.Fatalf("expires_at %v, acquired_at %v", l.ExpiresAt, l.AcquiredAt)
	}

	// Defaults: empty body, owner is the caller's address, TTL 30 s.
	d := f.acquire(t, "defaults", api.AcquireRequest{})
	if d.Owner != "127.0.0.1" || d.TtlMs != 30000 {
		t.Fatalf("defaults = %+v", d)
	}

	re := f.acquire(t, "order:pay:1", api.AcquireRequest{Token: &l.Token})
	if re.Count != 2 || re.Fence != l.Fence || re.Token != l.Token {
		t.Fatalf("re-entry = %+v", re)
	}

	get, err := f.client.GetLockWithResponse(ctx, "order:pay:1")
	if err != nil || get.JSON200 == nil {
		t.Fatalf("get: %v %s", err, get.Body)
	}
	if bytes.Contains(get.Body, []byte(l.Token)) || bytes.Contains(get.Body, []byte(`"token"`)) {
		t.Fatalf("state shows the token: %s", get.Body)
	}
	if s := get.JSON200; s.Count != 2 || s.Owner != "worker-7" || s.RemainingMs <= 0 || s.RemainingMs > 30000 {
		t.Fatalf("state = %+v", s)
	}

	rn, err := f.client.RenewLockWithResponse(ctx, "order:pay:1", api.RenewRequest{Token: l.Token, TtlMs: ptr(int64(60000))})
	if err != nil || rn.JSON200 == nil || rn.JSON200.TtlMs != 60000 || rn.JSON200.Fence != l.Fence {
		t.Fatalf("renew: %v %s", err, rn.Body)
	}

	list, err := f.client.ListLocksWithResponse(ctx, &api.ListLocksParams{Prefix: ptr("order:")})
	if err != nil || list.JSON200 == nil || len(list.JSON200.Locks) != 1 || list.JSON200.Locks[0].Renewals != 1 {
		t.Fatalf("list: %v %s", err, list.Body)
	}
	if list.JSON200.NextCursor != nil || bytes.Contains(list.Body, []byte(l.Token)) {
		t.Fatalf("list: %s", list.Body)
	}

	for _, want := range []api.ReleaseResult{{Key: "order:pay:1", Released: false, Count: 1}, {Key: "order:pay:1", Released: true, Count: 0}} {
		rel, err := f.client.ReleaseLockWithResponse(ctx, "order:pay:1", api.ReleaseRequest{Token: l.Token})
		if err != nil || rel.JSON200 == nil || *rel.JSON200 != want {
			t.Fatalf("release: %v %s, want %+v", err, rel.Body, want)
		}
	}

	hist, err := f.client.GetLockHistoryWithResponse(ctx, "order:pay:1", &api.GetLockHistoryParams{Limit: ptr(10)})
	if err != nil || hist.JSON200 == nil {
		t.Fatalf("history: %v %s", err, hist.Body)
	}
	var types []string
	for _, e := range hist.JSON200.Events {
		types = append(types, string(e.Type))
	}
	// Renewals are kept apart, with the time the lease had left.
	if got := strings.Join(types, " "); got != "released released reentered acquired" {
		t.Fatalf("history newest first = %q", got)
	}
	renewed := api.Renewed
	rs, err := f.client.GetLockHistoryWithResponse(ctx, "order:pay:1", &api.GetLockHistoryParams{Type: &renewed})
	if err != nil || rs.JSON200 == nil || len(rs.JSON200.Events) != 1 || rs.JSON200.Events[0].Type != api.Renewed ||
		rs.JSON200.Events[0].RemainingMs == nil || *rs.JSON200.Events[0].RemainingMs <= 0 {
		t.Fatalf("renewals: %v %s", err, rs.Body)
	}
	if e := hist.JSON200.Events[0]; e.Actor != "127.0.0.1" || e.Owner != "worker-7" || e.Fence != l.Fence {
		t.Fatalf("event = %+v", e)
	}

	empty, err := f.client.GetLockHistoryWithResponse(ctx, "never:used", nil)
	if err != nil || empty.JSON200 == nil || len(empty.JSON200.Events) != 0 || !bytes.Contains(empty.Body, []byte(`"events":[]`)) {
		t.Fatalf("unknown key history: %v %s", err, empty.Body)
	}

	f.acquire(t, "stuck", api.AcquireRequest{Owner: ptr("ghost")})
	fr, err := f.client.ForceReleaseLockWithResponse(ctx, "stuck", api.ForceReleaseRequest{Reason: ptr("stuck after deploy")})
	if err != nil || fr.JSON200 == nil || fr.JSON200.Owner != "ghost" || !fr.JSON200.Released {
		t.Fatalf("force-release: %v %s", err, fr.Body)
	}
	hist, _ = f.client.GetLockHistoryWithResponse(ctx, "stuck", &api.GetLockHistoryParams{Limit: ptr(1)})
	if e := hist.JSON200.Events[0]; e.Type != "force_released" || e.Reason != "stuck after deploy" || e.Actor != "127.0.0.1" {
		t.Fatalf("force-release event = %+v", e)
	}

	for _, path := range []string{"/healthz", "/readyz"} {
		res, err := http.Get(f.url + path)
		if err != nil || res.StatusCode != 200 {
			t.Fatalf("%s: %v %v", path, err, res.StatusCode)
		}
		res.Body.Close()
	}
	res, err := http.Get(f.url + "/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	spec, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if !bytes.Equal(spec, api.OpenAPI) {
		t.Fatal("/openapi.yaml is not the embedded spec")
	}
}

// problemOf decodes a problem+json answer and checks its envelope.
func problemOf(t *testing.T, res *http.Response, body []byte) api.Problem {
	t.Helper()
	if ct := res.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("status %d with Content-Type %q: %s", res.StatusCode, ct, body)
	}
	var p api.Problem
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatalf("problem body %s: %v", body, err)
	}
	if p.Status != res.StatusCode || p.Type != "/problems/"+string(p.Code) || p.Title == "" {
		t.Fatalf("problem envelope %+v for status %d", p, res.StatusCode)
	}
	return p
}

// /livez answers 200 whatever Redis does: at once while Redis stalls (a
// handler that asked it would wait out the fixture's 500 ms read timeout,
// as /readyz does) and during the restart quarantine, when /readyz answers
// 503. A liveness probe that followed Redis would restart every replica
// during an outage.
func TestLivez(t *testing.T) {
	f := newFixture(t)
	f.acquire(t, "livez:held", api.AcquireRequest{})
	live := func(what string) {
		t.Helper()
		start := time.Now()
		res, body, err := do(http.MethodGet, f.url+"/livez", "", "")
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if d := time.Since(start); d > 300*time.Millisecond {
			t.Fatalf("%s: /livez answered in %v", what, d)
		}
		if res.StatusCode != 200 || res.Header.Get("Content-Type") != "application/json" || !bytes.Equal(bytes.TrimSpace(body), []byte(`{"status":"ok"}`)) {
			t.Fatalf("%s: /livez %d %q %s", what, res.StatusCode, res.Header.Get("Content-Type"), body)
		}
	}
	// ready is /readyz's status and, when not ready, its problem code.
	ready := func() (int, string) {
		res, body, err := do(http.MethodGet, f.url+"/readyz", "", "")
		if err != nil {
			t.Fatal(err)
		}
		var p api.Problem
		_ = json.Unmarshal(body, &p)
		return res.StatusCode, string(p.Code)
	}

	live("Redis up")
	if res, body, err := do(http.MethodHead, f.url+"/livez", "", ""); err != nil || res.StatusCode != 200 || len(body) != 0 {
		t.Fatalf("HEAD /livez: %v %v %q", err, res.StatusCode, body)
	}

	f.redis.Pause()
	live("Redis paused")
	if s, code := ready(); s != 503 {
		t.Fatalf("/readyz with Redis paused: %d %s", s, code)
	}
	f.redis.Resume()

	// Redis comes back empty: lockd grants nothing until the leases it
	// may have forgotten have expired, and stays live.
	f.redis.Restart()
	lockdtest.Eventually(t, func() bool {
		s, code := ready()
		return s == 503 && code == "backend_recovering"
	}, 5*time.Second, "/readyz 503 backend_recovering after Redis lost its data")
	live("restart quarantine")
}

func TestErrorCodes(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	held := f.acquire(t, "busy", api.AcquireRequest{Owner: ptr("holder"), TtlMs: ptr(int64(20000))})
	// A semaphore of one permit, held: a semaphore is not the lock of the
	// same name.
	permit := f.acquireSem(t, "busy", api.SemaphoreAcquireRequest{Limit: 1, Owner: ptr("permit-holder"), TtlMs: ptr(int64(20000))})

	tests := []struct {
		name   string
		call   func() (*http.Response, []byte, error)
		status int
		code   api.ProblemCode
		check  func(t *testing.T, res *http.Response, p api.Problem)
	}{
		{"lock_held", func() (*http.Response, []byte, error) {
			r, err := f.client.AcquireLockWithResponse(ctx, "busy", nil, api.AcquireRequest{Owner: ptr("other")})
			return resp(r, err)
		}, 409, "lock_held", func(t *testing.T, res *http.Response, p api.Problem) {
			if p.Holder == nil || *p.Holder != "holder" || p.RemainingMs == nil || *p.RemainingMs <= 0 || *p.RemainingMs > 20000 {
				t.Fatalf("holder/remaining: %+v", p)
			}
			if ra := res.Header.Get("Retry-After"); ra != "20" && ra != "19" {
				t.Fatalf("Retry-After = %q", ra)
			}
			if p.Detail == nil || !strings.Contains(*p.Detail, "busy is held by holder for") {
				t.Fatalf("detail = %v", p.Detail)
			}
		}},
		{"lease_lost on re-entry", func() (*http.Response, []byte, error) {
			r, err := f.client.AcquireLockWithResponse(ctx, "busy", nil, api.AcquireRequest{Token: ptr("stale-token")})
			return resp(r, err)
		}, 409, "lease_lost", nil},
		{"lease_lost on renew", func() (*http.Response, []byte, error) {
			r, err := f.client.RenewLockWithResponse(ctx, "busy", api.RenewRequest{Token: "stale-token"})
			return resp(r, err)
		}, 409, "lease_lost", nil},
		{"lease_lost on release", func() (*http.Response, []byte, error) {
			r, err := f.client.ReleaseLockWithResponse(ctx, "busy", api.ReleaseRequest{Token: "stale-token"})
			return resp(r, err)
		}, 409, "lease_lost", nil},
		{"not_found on renew", func() (*http.Response, []byte, error) {
			r, err := f.client.RenewLockWithResponse(ctx, "free", api.RenewRequest{Token: held.Token})
			return resp(r, err)
		}, 404, "not_found", nil},
		{"not_found on release", func() (*http.Response, []byte, error) {
			r, err := f.client.ReleaseLockWithResponse(ctx, "free", api.ReleaseRequest{Token: held.Token})
			return resp(r, err)
		}, 404, "not_found", nil},
		{"not_found on force-release", func() (*http.Response, []byte, error) {
			r, err := f.client.ForceReleaseLockWithResponse(ctx, "free", api.ForceReleaseRequest{})
			return resp(r, err)
		}, 404, "not_found", nil},
		{"lease_lost on force-release with another fence", func() (*http.Response, []byte, error) {
			r, err := f.client.ForceReleaseLockWithResponse(ctx, "busy", api.ForceReleaseRequest{Fence: ptr(held.Fence + 1)})
			return resp(r, err)
		}, 409, "lease_lost", func(t *testing.T, _ *http.Response, p api.Problem) {
			if p.Detail == nil || !strings.Contains(*p.Detail, "no holder with fence") || strings.Contains(*p.Detail, "token") {
				t.Fatalf("detail = %v", p.Detail)
			}
		}},
		{"not_found on get", func() (*http.Response, []byte, error) {
			r, err := f.client.GetLockWithResponse(ctx, "free")
			return resp(r, err)
		}, 404, "not_found", nil},
		{"no_permits", func() (*http.Response, []byte, error) {
			r, err := f.client.AcquireSemaphoreWithResponse(ctx, "busy", nil, api.SemaphoreAcquireRequest{Limit: 1, Owner: ptr("other")})
			return resp(r, err)
		}, 409, "no_permits", func(t *testing.T, res *http.Response, p api.Problem) {
			if p.Holder == nil || *p.Holder != "permit-holder" || p.RemainingMs == nil || *p.RemainingMs <= 0 || *p.RemainingMs > 20000 {
				t.Fatalf("holder/remaining: %+v", p)
			}
			if ra := res.Header.Get("Retry-After"); ra != "20" && ra != "19" {
				t.Fatalf("Retry-After = %q", ra)
			}
			if p.Key == nil || *p.Key != "busy" || p.Detail == nil || !strings.Contains(*p.Detail, "every permit of busy is held") {
				t.Fatalf("key %v, detail %v", p.Key, p.Detail)
			}
		}},
		{"no_permits after waiting", func() (*http.Response, []byte, error) {
			r, err := f.client.AcquireSemaphoreWithResponse(ctx, "busy", nil, api.SemaphoreAcquireRequest{Limit: 1, WaitMs: ptr(int64(50))})
			return resp(r, err)
		}, 409, "no_permits", nil},
		{"no_permits on hold", func() (*http.Response, []byte, error) {
			return do(http.MethodPost, f.url+"/v1/semaphores/busy/hold", "application/json", `{"limit":1}`)
		}, 409, "no_permits", nil},
		{"limit_mismatch", func() (*http.Response, []byte, error) {
			r, err := f.client.AcquireSemaphoreWithResponse(ctx, "busy", nil, api.SemaphoreAcquireRequest{Limit: 5})
			return resp(r, err)
		}, 409, "limit_mismatch", func(t *testing.T, res *http.Response, p api.Problem) {
			if p.Key == nil || *p.Key != "busy" || res.Header.Get("Retry-After") != "" || p.Holder != nil {
				t.Fatalf("%+v, Retry-After %q", p, res.Header.Get("Retry-After"))
			}
		}},
		{"lease_lost on semaphore renew", func() (*http.Response, []byte, error) {
			r, err := f.client.RenewSemaphoreWithResponse(ctx, "busy", api.RenewRequest{Token: "stale-token"})
			return resp(r, err)
		}, 409, "lease_lost", nil},
		{"lease_lost on semaphore release with the lock's token", func() (*http.Response, []byte, error) {
			r, err := f.client.ReleaseSemaphoreWithResponse(ctx, "busy", api.ReleaseRequest{Token: held.Token})
			return resp(r, err)
		}, 409, "lease_lost", nil},
		{"lease_lost on lock release with the permit's token", func() (*http.Response, []byte, error) {
			r, err := f.client.ReleaseLockWithResponse(ctx, "busy", api.ReleaseRequest{Token: permit.Token})
			return resp(r, err)
		}, 409, "lease_lost", nil},
		{"lease_lost on semaphore force-release with another fence", func() (*http.Response, []byte, error) {
			r, err := f.client.ForceReleaseSemaphoreWithResponse(ctx, "busy", api.ForceReleaseRequest{Fence: ptr(permit.Fence + 1)})
			return resp(r, err)
		}, 409, "lease_lost", nil},
		{"not_found on semaphore get", func() (*http.Response, []byte, error) {
			r, err := f.client.GetSemaphoreWithResponse(ctx, "free")
			return resp(r, err)
		}, 404, "not_found", func(t *testing.T, _ *http.Response, p api.Problem) {
			if p.Detail == nil || !strings.Contains(*p.Detail, "semaphore free has no live permit") || p.Key == nil || *p.Key != "free" {
				t.Fatalf("%+v", p)
			}
		}},
		{"not_found on semaphore renew", func() (*http.Response, []byte, error) {
			r, err := f.client.RenewSemaphoreWithResponse(ctx, "free", api.RenewRequest{Token: permit.Token})
			return resp(r, err)
		}, 404, "not_found", nil},
		{"not_found on semaphore force-release", func() (*http.Response, []byte, error) {
			r, err := f.client.ForceReleaseSemaphoreWithResponse(ctx, "free", api.ForceReleaseRequest{})
			return resp(r, err)
		}, 404, "not_found", nil},
		{"semaphore method_not_allowed", func() (*http.Response, []byte, error) {
			return do(http.MethodDelete, f.url+"/v1/semaphores/k", "", "")
		}, 405, "method_not_allowed", func(t *testing.T, res *http.Response, _ api.Problem) {
			if a := res.Header.Get("Allow"); a != "GET" {
				t.Fatalf("Allow = %q, want GET", a)
			}
		}},
		{"invalid_request", func() (*http.Response, []byte, error) {
			r, err := f.client.AcquireLockWithResponse(ctx, "k", nil, api.AcquireRequest{TtlMs: ptr(int64(5))})
			return resp(r, err)
		}, 400, "invalid_request", func(t *testing.T, _ *http.Response, p api.Problem) {
			if p.Field == nil || *p.Field != "ttl_ms" || !strings.Contains(*p.Detail, "between 100 and 86400000") {
				t.Fatalf("%+v", p)
			}
		}},
		{"payload_too_large", func() (*http.Response, []byte, error) {
			big := `{"owner":"` + strings.Repeat("x", server.MaxBody) + `"}`
			r, err := f.client.AcquireLockWithBodyWithResponse(ctx, "k", nil, "application/json", strings.NewReader(big))
			return resp(r, err)
		}, 413, "payload_too_large", nil},
		{"unsupported_media_type", func() (*http.Response, []byte, error) {
			r, err := f.client.AcquireLockWithBodyWithResponse(ctx, "k", nil, "text/plain", strings.NewReader("owner=me"))
			return resp(r, err)
		}, 415, "unsupported_media_type", nil},
		{"method_not_allowed", func() (*http.Response, []byte, error) {
			return do(http.MethodDelete, f.url+"/v1/locks/k", "", "")
		}, 405, "method_not_allowed", func(t *testing.T, res *http.Response, _ api.Problem) {
			if a := res.Header.Get("Allow"); a != "GET" {
				t.Fatalf("Allow = %q, want GET", a)
			}
		}},
		{"unknown route", func() (*http.Response, []byte, error) {
			return do(http.MethodGet, f.url+"/v2/nothing", "", "")
		}, 404, "not_found", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, body, err := tc.call()
			if err != nil {
				t.Fatal(err)
			}
			if res.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", res.StatusCode, tc.status, body)
			}
			p := problemOf(t, res, body)
			if p.Code != tc.code {
				t.Fatalf("code %q, want %q", p.Code, tc.code)
			}
			if tc.check != nil {
				tc.check(t, res, p)
			}
		})
	}

	// backend_unavailable: Redis goes away, answers stay 503 (never 500,
	// never a hang) and service comes back by itself.
	f.redis.Stop()
	for _, call := range []func() (*http.Response, []byte, error){
		func() (*http.Response, []byte, error) {
			r, err := f.client.AcquireLockWithResponse(ctx, "k", nil, api.AcquireRequest{})
			return resp(r, err)
		},
		func() (*http.Response, []byte, error) {
			r, err := f.client.ReleaseLockWithResponse(ctx, "busy", api.ReleaseRequest{Token: held.Token})
			return resp(r, err)
		},
		func() (*http.Response, []byte, error) { return do(http.MethodGet, f.url+"/v1/locks", "", "") },
		func() (*http.Response, []byte, error) { return do(http.MethodGet, f.url+"/readyz", "", "") },
	} {
		start := time.Now()
		res, body, err := call()
		if err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d > 2500*time.Millisecond {
			t.Fatalf("answered in %v with Redis down", d)
		}
		p := problemOf(t, res, body)
		if res.StatusCode != 503 || p.Code != "backend_unavailable" || res.Header.Get("Retry-After") == "" {
			t.Fatalf("Redis down: %d %s (Retry-After %q)", res.StatusCode, body, res.Header.Get("Retry-After"))
		}
	}
	f.redis.Restart()
	// Redis came back empty: leases granted before may still be held, so
	// nothing is granted until they would have expired. lockd notices by
	// itself, without a request, and /readyz says so.
	deadline := time.Now().Add(5 * time.Second)
	for {
		res, body, err := do(http.MethodGet, f.url+"/readyz", "", "")
		if err == nil && res.StatusCode == 503 && problemOf(t, res, body).Code == "backend_recovering" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("/readyz did not say recovering 5 s after Redis came back empty")
		}
		time.Sleep(50 * time.Millisecond)
	}
	res, body, err := do(http.MethodPost, f.url+"/v1/locks/back/acquire", "application/json", `{}`)
	if err != nil {
		t.Fatal(err)
	}
	if p := problemOf(t, res, body); res.StatusCode != 503 || p.Code != "backend_recovering" || res.Header.Get("Retry-After") == "" {
		t.Fatalf("acquire after Redis lost its data: %d %s", res.StatusCode, body)
	}
	if res, _, _ := do(http.MethodGet, f.url+"/readyz", "", ""); res.StatusCode != 503 {
		t.Fatalf("/readyz during the quarantine: %d", res.StatusCode)
	}
}

func resp[R interface{ GetBody() []byte }](r R, err error) (*http.Response, []byte, error) {
	if err != nil {
		return nil, nil, err
	}
	hr := httpResponseOf(any(r))
	return hr, r.GetBody(), nil
}

// httpResponseOf digs the *http.Response out of a generated response.
func httpResponseOf(r any) *http.Response {
	switch v := r.(type) {
	case *api.AcquireLockResponse:
		return v.HTTPResponse
	case *api.RenewLockResponse:
		return v.HTTPResponse
	case *api.ReleaseLockResponse:
		return v.HTTPResponse
	case *api.ForceReleaseLockResponse:
		return v.HTTPResponse
	case *api.GetLockResponse:
		return v.HTTPResponse
	case *api.AcquireSemaphoreResponse:
		return v.HTTPResponse
	case *api.RenewSemaphoreResponse:
		return v.HTTPResponse
	case *api.ReleaseSemaphoreResponse:
		return v.HTTPResponse
	case *api.ForceReleaseSemaphoreResponse:
		return v.HTTPResponse
	case *api.GetSemaphoreResponse:
		return v.HTTPResponse
	}
	panic(fmt.Sprintf("unexpected response type %T", r))
}

func do(method, url, contentType, body string) (*http.Response, []byte, error) {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		return nil, nil, err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return res, b, err
}

// Every bad input is a 4xx problem+json that names the field at fault.
func TestBadInput(t *testing.T) {
	f := newFixture(t)
	f.acquire(t, "live", api.AcquireRequest{})
	const jsonCT = "application/json"
	tests := []struct {
		name, method, path, ct, body string
		status                       int
		field                        string
	}{
		{"key too long", "POST", "/v1/locks/" + strings.Repeat("k", 201) + "/acquire", jsonCT, "", 400, "key"},
		{"key starts with a dot", "POST", "/v1/locks/.k/acquire", jsonCT, "", 400, "key"},
		{"key with a space", "POST", "/v1/locks/a%20b/acquire", jsonCT, "", 400, "key"},
		{"key with a slash", "GET", "/v1/locks/a%2Fb", "", "", 400, "key"},
		{"key with unicode", "GET", "/v1/locks/sch%C3%B6n", "", "", 400, "key"},
		{"key with a glob", "GET", "/v1/locks/a*", "", "", 400, "key"},
		{"key with braces", "POST", "/v1/locks/a%7Bb%7D/release", jsonCT, `{"token":"x"}`, 400, "key"},
		{"ttl too short", "POST", "/v1/locks/k/acquire", jsonCT, `{"ttl_ms":99}`, 400, "ttl_ms"},
		{"ttl zero", "POST", "/v1/locks/k/acquire", jsonCT, `{"ttl_ms":0}`, 400, "ttl_ms"},
		{"ttl negative", "POST", "/v1/locks/k/acquire", jsonCT, `{"ttl_ms":-1}`, 400, "ttl_ms"},
		{"ttl over max", "POST", "/v1/locks/k/acquire", jsonCT, `{"ttl_ms":86400001}`, 400, "ttl_ms"},
		{"ttl overflows", "POST", "/v1/locks/k/acquire", jsonCT, `{"ttl_ms":1e30}`, 400, "ttl_ms"},
		{"ttl a string", "POST", "/v1/locks/k/acquire", jsonCT, `{"ttl_ms":"30s"}`, 400, "ttl_ms"},
		{"ttl a fraction", "POST", "/v1/locks/k/acquire", jsonCT, `{"ttl_ms":1.5}`, 400, "ttl_ms"},
		{"wait negative", "POST", "/v1/locks/k/acquire", jsonCT, `{"wait_ms":-5}`, 400, "wait_ms"},
		{"wait over max", "POST", "/v1/locks/k/acquire", jsonCT, `{"wait_ms":60001}`, 400, "wait_ms"},
		{"owner empty", "POST", "/v1/locks/k/acquire", jsonCT, `{"owner":""}`, 400, "owner"},
		{"owner too long", "POST", "/v1/locks/k/acquire", jsonCT, `{"owner":"` + strings.Repeat("o", 129) + `"}`, 400, "owner"},
		{"owner with a control char", "POST", "/v1/locks/k/acquire", jsonCT, `{"owner":"a\u0007b"}`, 400, "owner"},
		{"owner a number", "POST", "/v1/locks/k/acquire", jsonCT, `{"owner":7}`, 400, "owner"},
		{"token too long", "POST", "/v1/locks/k/acquire", jsonCT, `{"token":"` + strings.Repeat("t", 257) + `"}`, 400, "token"},
		{"unknown field", "POST", "/v1/locks/k/acquire", jsonCT, `{"ttl":30000}`, 400, "ttl"},
		{"array body", "POST", "/v1/locks/k/acquire", jsonCT, `[1,2]`, 400, "body"},
		{"string body", "POST", "/v1/locks/k/acquire", jsonCT, `"hello"`, 400, "body"},
		{"trailing data", "POST", "/v1/locks/k/acquire", jsonCT, `{} {}`, 400, "body"},
		{"malformed JSON", "POST", "/v1/locks/k/acquire", jsonCT, `{"owner":`, 400, "body"},
		{"broken JSON", "POST", "/v1/locks/k/acquire", jsonCT, `{owner: x}`, 400, "body"},
		{"renew without body", "POST", "/v1/locks/live/renew", jsonCT, ``, 400, "body"},
		{"renew without token", "POST", "/v1/locks/live/renew", jsonCT, `{}`, 400, "token"},
		{"renew token a number", "POST", "/v1/locks/live/renew", jsonCT, `{"token":5}`, 400, "token"},
		{"renew ttl too short", "POST", "/v1/locks/live/renew", jsonCT, `{"token":"x","ttl_ms":1}`, 400, "ttl_ms"},
		{"release without token", "POST", "/v1/locks/live/release", jsonCT, `{"token":""}`, 400, "token"},
		{"release unknown field", "POST", "/v1/locks/live/release", jsonCT, `{"token":"x","force":true}`, 400, "force"},
		{"reason too long", "POST", "/v1/locks/live/force-release", jsonCT, `{"reason":"` + strings.Repeat("r", 501) + `"}`, 400, "reason"},
		{"text body", "POST", "/v1/locks/k/acquire", "text/plain", `{}`, 415, ""},
		{"xml body", "POST", "/v1/locks/k/acquire", "application/xml", `<a/>`, 415, ""},
		{"form body", "POST", "/v1/locks/k/acquire", "application/x-www-form-urlencoded", `owner=me`, 415, ""},
		{"bad content type", "POST", "/v1/locks/k/acquire", ";;;", `{}`, 415, ""},
		{"body too large", "POST", "/v1/locks/k/acquire", jsonCT, strings.Repeat(" ", server.MaxBody+1), 413, ""},
		{"limit zero", "GET", "/v1/locks?limit=0", "", "", 400, "limit"},
		{"limit too big", "GET", "/v1/locks?limit=1001", "", "", 400, "limit"},
		{"limit not a number", "GET", "/v1/locks?limit=ten", "", "", 400, "limit"},
		{"prefix with a glob", "GET", "/v1/locks?prefix=a*", "", "", 400, "prefix"},
		{"prefix too long", "GET", "/v1/locks?prefix=" + strings.Repeat("p", 201), "", "", 400, "prefix"},
		{"cursor garbage", "GET", "/v1/locks?cursor=%25%25%25", "", "", 400, "cursor"},
		{"cursor not ours", "GET", "/v1/locks?cursor=bm90LWpzb24", "", "", 400, "cursor"},
		{"history limit zero", "GET", "/v1/locks/k/history?limit=0", "", "", 400, "limit"},
		{"history limit text", "GET", "/v1/locks/k/history?limit=x", "", "", 400, "limit"},
		{"history type unknown", "GET", "/v1/locks/k/history?type=stolen", "", "", 400, "type"},
		{"force-release fence zero", "POST", "/v1/locks/live/force-release", jsonCT, `{"fence":0}`, 400, "fence"},
		{"force-release fence negative", "POST", "/v1/locks/live/force-release", jsonCT, `{"fence":-3}`, 400, "fence"},
		{"force-release fence text", "POST", "/v1/locks/live/force-release", jsonCT, `{"fence":"42"}`, 400, "fence"},

		// Modes.
		{"mode unknown", "POST", "/v1/locks/k/acquire", jsonCT, `{"mode":"read"}`, 400, "mode"},
		{"mode empty", "POST", "/v1/locks/k/acquire", jsonCT, `{"mode":""}`, 400, "mode"},
		{"mode upper case", "POST", "/v1/locks/k/acquire", jsonCT, `{"mode":"SHARED"}`, 400, "mode"},
		{"mode a number", "POST", "/v1/locks/k/acquire", jsonCT, `{"mode":1}`, 400, "mode"},
		{"mode on hold", "POST", "/v1/locks/k/hold", jsonCT, `{"mode":"permit"}`, 400, "mode"},
		{"limit on a lock", "POST", "/v1/locks/k/acquire", jsonCT, `{"limit":3}`, 400, "limit"},

		// Semaphores: the lock matrix on /v1/semaphores, and limit.
		{"sem key too long", "POST", "/v1/semaphores/" + strings.Repeat("k", 201) + "/acquire", jsonCT, `{"limit":1}`, 400, "key"},
		{"sem key starts with a dot", "POST", "/v1/semaphores/.k/acquire", jsonCT, `{"limit":1}`, 400, "key"},
		{"sem key with a slash", "GET", "/v1/semaphores/a%2Fb", "", "", 400, "key"},
		{"sem key with unicode", "GET", "/v1/semaphores/sch%C3%B6n/history", "", "", 400, "key"},
		{"sem key with braces", "POST", "/v1/semaphores/a%7Bb%7D/release", jsonCT, `{"token":"x"}`, 400, "key"},
		{"sem no body", "POST", "/v1/semaphores/s/acquire", jsonCT, ``, 400, "limit"},
		{"sem no body, no type", "POST", "/v1/semaphores/s/acquire", "", ``, 400, "limit"},
		{"sem null body", "POST", "/v1/semaphores/s/acquire", jsonCT, `null`, 400, "limit"},
		{"sem limit missing", "POST", "/v1/semaphores/s/acquire", jsonCT, `{"owner":"w"}`, 400, "limit"},
		{"sem limit zero", "POST", "/v1/semaphores/s/acquire", jsonCT, `{"limit":0}`, 400, "limit"},
		{"sem limit negative", "POST", "/v1/semaphores/s/acquire", jsonCT, `{"limit":-1}`, 400, "limit"},
		{"sem limit over max", "POST", "/v1/semaphores/s/acquire", jsonCT, `{"limit":10001}`, 400, "limit"},
		{"sem limit overflows", "POST", "/v1/semaphores/s/acquire", jsonCT, `{"limit":1e30}`, 400, "limit"},
		{"sem limit a fraction", "POST", "/v1/semaphores/s/acquire", jsonCT, `{"limit":2.5}`, 400, "limit"},
		{"sem limit a string", "POST", "/v1/semaphores/s/acquire", jsonCT, `{"limit":"3"}`, 400, "limit"},
		{"sem limit null", "POST", "/v1/semaphores/s/acquire", jsonCT, `{"limit":null}`, 400, "limit"},
		{"sem mode", "POST", "/v1/semaphores/s/acquire", jsonCT, `{"limit":3,"mode":"shared"}`, 400, "mode"},
		{"sem ttl too short", "POST", "/v1/semaphores/s/acquire", jsonCT, `{"limit":3,"ttl_ms":99}`, 400, "ttl_ms"},
		{"sem wait over max", "POST", "/v1/semaphores/s/acquire", jsonCT, `{"limit":3,"wait_ms":60001}`, 400, "wait_ms"},
		{"sem owner empty", "POST", "/v1/semaphores/s/acquire", jsonCT, `{"limit":3,"owner":""}`, 400, "owner"},
		{"sem token too long", "POST", "/v1/semaphores/s/acquire", jsonCT, `{"limit":3,"token":"` + strings.Repeat("t", 257) + `"}`, 400, "token"},
		{"sem unknown field", "POST", "/v1/semaphores/s/acquire", jsonCT, `{"limit":3,"permits":2}`, 400, "permits"},
		{"sem array body", "POST", "/v1/semaphores/s/acquire", jsonCT, `[3]`, 400, "body"},
		{"sem trailing data", "POST", "/v1/semaphores/s/acquire", jsonCT, `{"limit":3} {}`, 400, "body"},
		{"sem text body", "POST", "/v1/semaphores/s/acquire", "text/plain", `{"limit":3}`, 415, ""},
		{"sem body too large", "POST", "/v1/semaphores/s/acquire", jsonCT, strings.Repeat(" ", server.MaxBody+1), 413, ""},
		{"sem bad Idempotency-Key", "POST", "/v1/semaphores/s/acquire", jsonCT, `{"limit":3}`, 400, "Idempotency-Key"},
		{"sem hold without limit", "POST", "/v1/semaphores/s/hold", jsonCT, `{}`, 400, "limit"},
		{"sem hold no body", "POST", "/v1/semaphores/s/hold", jsonCT, ``, 400, "limit"},
		{"sem hold limit over max", "POST", "/v1/semaphores/s/hold", jsonCT, `{"limit":20000}`, 400, "limit"},
		{"sem renew without body", "POST", "/v1/semaphores/s/renew", jsonCT, ``, 400, "body"},
		{"sem renew without token", "POST", "/v1/semaphores/s/renew", jsonCT, `{}`, 400, "token"},
		{"sem renew ttl too short", "POST", "/v1/semaphores/s/renew", jsonCT, `{"token":"x","ttl_ms":1}`, 400, "ttl_ms"},
		{"sem renew limit", "POST", "/v1/semaphores/s/renew", jsonCT, `{"token":"x","limit":3}`, 400, "limit"},
		{"sem release without token", "POST", "/v1/semaphores/s/release", jsonCT, `{"token":""}`, 400, "token"},
		{"sem release unknown field", "POST", "/v1/semaphores/s/release", jsonCT, `{"token":"x","all":true}`, 400, "all"},
		{"sem reason too long", "POST", "/v1/semaphores/s/force-release", jsonCT, `{"reason":"` + strings.Repeat("r", 501) + `"}`, 400, "reason"},
		{"sem fence zero", "POST", "/v1/semaphores/s/force-release", jsonCT, `{"fence":0}`, 400, "fence"},
		{"sem fence a string", "POST", "/v1/semaphores/s/force-release", jsonCT, `{"fence":"1"}`, 400, "fence"},
		{"sem list limit zero", "GET", "/v1/semaphores?limit=0", "", "", 400, "limit"},
		{"sem list limit too big", "GET", "/v1/semaphores?limit=1001", "", "", 400, "limit"},
		{"sem list prefix with a glob", "GET", "/v1/semaphores?prefix=a*", "", "", 400, "prefix"},
		{"sem list prefix with a slash", "GET", "/v1/semaphores?prefix=sem/", "", "", 400, "prefix"},
		{"sem list cursor garbage", "GET", "/v1/semaphores?cursor=%25%25%25", "", "", 400, "cursor"},
		{"sem history limit zero", "GET", "/v1/semaphores/s/history?limit=0", "", "", 400, "limit"},
		{"sem history type unknown", "GET", "/v1/semaphores/s/history?type=x", "", "", 400, "type"},
		{"sem history limit overflows", "GET", "/v1/semaphores/s/history?limit=99999999999999999999", "", "", 400, "limit"},
		{"sem history limit twice", "GET", "/v1/semaphores/s/history?limit=1&limit=2", "", "", 400, "limit"},

		// History and the event stream: every parameter and header they
		// read (the header's value is in headers below).
		{"history limit overflows", "GET", "/v1/locks/k/history?limit=99999999999999999999", "", "", 400, "limit"},
		{"history limit twice", "GET", "/v1/locks/k/history?limit=1&limit=2", "", "", 400, "limit"},
		{"history type twice", "GET", "/v1/locks/k/history?type=expired&type=released", "", "", 400, "type"},
		{"events prefix with a space", "GET", "/v1/events?prefix=a%20b", "", "", 400, "prefix"},
		{"events prefix not UTF-8", "GET", "/v1/events?prefix=%ff", "", "", 400, "prefix"},
		{"events prefix too long", "GET", "/v1/events?prefix=" + strings.Repeat("p", 201), "", "", 400, "prefix"},
		{"events prefix twice", "GET", "/v1/events?prefix=a&prefix=b", "", "", 400, "prefix"},
		{"events Last-Event-ID not an ID", "GET", "/v1/events", "", "", 400, "Last-Event-ID"},
		{"events Last-Event-ID three parts", "GET", "/v1/events", "", "", 400, "Last-Event-ID"},
		{"events Last-Event-ID 20 digits beyond uint64", "GET", "/v1/events", "", "", 400, "Last-Event-ID"},
		{"events Last-Event-ID 2^64", "GET", "/v1/events", "", "", 400, "Last-Event-ID"},
		{"events Last-Event-ID seq 2^64", "GET", "/v1/events", "", "", 400, "Last-Event-ID"},
		{"events Last-Event-ID twice", "GET", "/v1/events", "", "", 400, "Last-Event-ID"},
	}
	// headers are the request headers of the rows that send one.
	headers := map[string]http.Header{
		"sem bad Idempotency-Key":                      {"Idempotency-Key": {strings.Repeat("i", 201)}},
		"events Last-Event-ID not an ID":               {"Last-Event-ID": {"yesterday"}},
		"events Last-Event-ID three parts":             {"Last-Event-ID": {"1-2-3"}},
		"events Last-Event-ID 20 digits beyond uint64": {"Last-Event-ID": {"99999999999999999999-0"}},
		"events Last-Event-ID 2^64":                    {"Last-Event-ID": {"18446744073709551616-0"}},
		"events Last-Event-ID seq 2^64":                {"Last-Event-ID": {"1-18446744073709551616"}},
		"events Last-Event-ID twice":                   {"Last-Event-ID": {"1-0", "2-0"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, f.url+tc.path, strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			if tc.ct != "" {
				req.Header.Set("Content-Type", tc.ct)
			}
			for name, values := range headers[tc.name] {
				req.Header[name] = values
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", res.StatusCode, tc.status, body)
			}
			p := problemOf(t, res, body)
			if tc.field != "" && (p.Field == nil || *p.Field != tc.field) {
				t.Fatalf("field %v, want %q: %s", p.Field, tc.field, body)
			}
			if p.Detail == nil || *p.Detail == "" {
				t.Fatalf("no detail: %s", body)
			}
		})
	}
	// None of that touched the live lease.
	st, err := f.engine.State(context.Background(), lock.Lock("live"))
	if err != nil || st.Count != 1 {
		t.Fatalf("live lease after bad input: %+v %v", st, err)
	}
	if _, err := f.engine.State(context.Background(), lock.Lock("k")); err != lock.ErrNotFound {
		t.Fatalf("a bad request created lock k: %v", err)
	}
	if _, err := f.engine.State(context.Background(), lock.Semaphore("s")); err != lock.ErrNotFound {
		t.Fatalf("a bad request created semaphore s: %v", err)
	}
}

func TestIdempotencyKey(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	params := &api.AcquireLockParams{IdempotencyKey: ptr("delivery-42")}
	first, err := f.client.AcquireLockWithResponse(ctx, "hook:42", params, api.AcquireRequest{Owner: ptr("webhook"), TtlMs: ptr(int64(5000))})
	if err != nil || first.JSON200 == nil {
		t.Fatalf("%v %s", err, first.Body)
	}
	again, err := f.client.AcquireLockWithResponse(ctx, "hook:42", params, api.AcquireRequest{Owner: ptr("webhook"), TtlMs: ptr(int64(5000))})
	if err != nil || again.JSON200 == nil {
		t.Fatalf("retry: %v %s", err, again.Body)
	}
	a, b := first.JSON200, again.JSON200
	if a.Token != b.Token || a.Fence != b.Fence || a.Count != b.Count {
		t.Fatalf("retry got another lease: %+v vs %+v", a, b)
	}
	other, _ := f.client.AcquireLockWithResponse(ctx, "hook:42", &api.AcquireLockParams{IdempotencyKey: ptr("delivery-43")}, api.AcquireRequest{})
	if other.StatusCode() != 409 {
		t.Fatalf("another idempotency key: %d %s", other.StatusCode(), other.Body)
	}
	long, _ := f.client.AcquireLockWithResponse(ctx, "hook:43", &api.AcquireLockParams{IdempotencyKey: ptr(strings.Repeat("i", 201))}, api.AcquireRequest{})
	if long.StatusCode() != 400 || !bytes.Contains(long.Body, []byte(`"field":"Idempotency-Key"`)) {
		t.Fatalf("long idempotency key: %d %s", long.StatusCode(), long.Body)
	}
}

func TestWaitOverHTTP(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	h := f.acquire(t, "q", api.AcquireRequest{Owner: ptr("first")})
	got := make(chan *api.AcquireLockResponse, 1)
	go func() {
		r, err := f.client.AcquireLockWithResponse(ctx, "q", nil, api.AcquireRequest{Owner: ptr("second"), WaitMs: ptr(int64(5000))})
		if err != nil {
			t.Error(err)
		}
		got <- r
	}()
	lockdtest.Eventually(t, func() bool { return f.engine.Waiters() == 1 }, 5*time.Second, "the waiter registers")
	time.Sleep(20 * time.Millisecond)
	start := time.Now()
	if _, err := f.client.ReleaseLockWithResponse(ctx, "q", api.ReleaseRequest{Token: h.Token}); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.JSON200 == nil || r.JSON200.Owner != "second" {
		t.Fatalf("waiter: %d %s", r.StatusCode(), r.Body)
	}
	t.Logf("waiter answered %v after the release", time.Since(start))

	// A client that disconnects while waiting is never granted the lock.
	h2 := f.acquire(t, "q2", api.AcquireRequest{Owner: ptr("first")})
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = f.client.AcquireLockWithResponse(cctx, "q2", nil, api.AcquireRequest{Owner: ptr("leaver"), WaitMs: ptr(int64(5000))})
	}()
	lockdtest.Eventually(t, func() bool { return f.engine.Waiters() == 1 }, 5*time.Second, "the waiter registers")
	cancel()
	<-done
	lockdtest.Eventually(t, func() bool { return f.engine.Waiters() == 0 }, 5*time.Second, "the waiter leaves")
	if _, err := f.client.ReleaseLockWithResponse(ctx, "q2", api.ReleaseRequest{Token: h2.Token}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if st, err := f.engine.State(ctx, lock.Lock("q2")); err != lock.ErrNotFound {
		t.Fatalf("the departed waiter holds q2: %+v %v", st, err)
	}
}

type sse struct {
	event string
	data  string
}

func readEvents(r io.Reader, out chan<- sse) {
	defer close(out)
	sc := bufio.NewScanner(r)
	var ev sse
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			ev.event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			ev.data = strings.TrimPrefix(line, "data: ")
		case line == "":
			out <- ev
			ev = sse{}
		}
	}
}

func TestHold(t *testing.T) {
	f := newFixture(t)
	open := func(t *testing.T, ctx context.Context, key string, body string) (*http.Response, chan sse) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, f.url+"/v1/locks/"+key+"/hold", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if res.StatusCode != 200 || res.Header.Get("Content-Type") != "text/event-stream" {
			b, _ := io.ReadAll(res.Body)
			t.Fatalf("hold: %d %s", res.StatusCode, b)
		}
		events := make(chan sse, 16)
		go readEvents(res.Body, events)
		return res, events
	}
	next := func(t *testing.T, events chan sse) sse {
		t.Helper()
		select {
		case ev, ok := <-events:
			if !ok {
				t.Fatal("stream ended")
			}
			return ev
		case <-time.After(3 * time.Second):
			t.Fatal("no event in 3 s")
		}
		return sse{}
	}

	t.Run("renews and releases on disconnect", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		_, events := open(t, ctx, "hold:a", `{"owner":"sh","ttl_ms":300}`)
		ev := next(t, events)
		var l api.Lease
		if ev.event != "acquired" || json.Unmarshal([]byte(ev.data), &l) != nil || l.Token == "" || l.Owner != "sh" {
			t.Fatalf("first event %+v", ev)
		}
		// Past 3× the TTL, the lease is still live and renewed.
		for range 9 {
			if ev := next(t, events); ev.event != "renewed" {
				t.Fatalf("event %+v", ev)
			}
		}
		st, err := f.engine.State(context.Background(), lock.Lock("hold:a"))
		if err != nil || st.Fence != l.Fence || st.Renewals < 9 {
			t.Fatalf("state after 9 renewals: %+v %v", st, err)
		}
		cancel()
		start := time.Now()
		lockdtest.Eventually(t, func() bool {
			_, err := f.engine.State(context.Background(), lock.Lock("hold:a"))
			return err == lock.ErrNotFound
		}, 5*time.Second, "the hold's lease is released")
		d := time.Since(start)
		t.Logf("released %v after the client disconnected", d)
		if d > 100*time.Millisecond {
			t.Fatalf("released %v after disconnect, want within 100ms", d)
		}
	})

	t.Run("lost on force-release", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		_, events := open(t, ctx, "hold:b", `{"ttl_ms":300}`)
		if ev := next(t, events); ev.event != "acquired" {
			t.Fatalf("%+v", ev)
		}
		if _, err := f.engine.ForceReleaseFence(context.Background(), lock.Lock("hold:b"), 0, "ops", "test"); err != nil {
			t.Fatal(err)
		}
		for {
			ev := next(t, events)
			if ev.event == "renewed" {
				continue
			}
			var p api.Problem
			if ev.event != "lost" || json.Unmarshal([]byte(ev.data), &p) != nil || p.Code != "not_found" {
				t.Fatalf("want lost, got %+v", ev)
			}
			break
		}
		if _, ok := <-events; ok {
			t.Fatal("stream goes on after lost")
		}
	})

	t.Run("held answers a problem, not a stream", func(t *testing.T) {
		f.acquire(t, "hold:c", api.AcquireRequest{Owner: ptr("someone")})
		res, body, err := do(http.MethodPost, f.url+"/v1/locks/hold:c/hold", "application/json", `{"wait_ms":50}`)
		if err != nil {
			t.Fatal(err)
		}
		if p := problemOf(t, res, body); res.StatusCode != 409 || p.Code != "lock_held" {
			t.Fatalf("%d %s", res.StatusCode, body)
		}
	})

	t.Run("capped", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		for i := range 4 { // MaxHolds in the fixture
			open(t, ctx, fmt.Sprint("cap:", i), `{"ttl_ms":10000}`)
		}
		res, body, err := do(http.MethodPost, f.url+"/v1/locks/cap:x/hold", "application/json", `{}`)
		if err != nil {
			t.Fatal(err)
		}
		if p := problemOf(t, res, body); res.StatusCode != 429 || p.Code != "too_many_requests" || res.Header.Get("Retry-After") == "" {
			t.Fatalf("%d %s", res.StatusCode, body)
		}
	})
}

// The token of a full cycle appears in no log line and no metric.
func TestSecretsStayOutOfLogsAndMetrics(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	l := f.acquire(t, "secret", api.AcquireRequest{Owner: ptr("w")})
	f.acquire(t, "secret", api.AcquireRequest{Token: &l.Token})
	if _, err := f.client.RenewLockWithResponse(ctx, "secret", api.RenewRequest{Token: l.Token}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.ReleaseLockWithResponse(ctx, "secret", api.ReleaseRequest{Token: l.Token}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.RenewLockWithResponse(ctx, "secret", api.RenewRequest{Token: l.Token + "x"}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.ForceReleaseLockWithResponse(ctx, "secret", api.ForceReleaseRequest{}); err != nil {
		t.Fatal(err)
	}
	// A permit and a shared hold go the same way.
	p := f.acquireSem(t, "secret", api.SemaphoreAcquireRequest{Limit: 2, Owner: ptr("w")})
	if _, err := f.client.RenewSemaphoreWithResponse(ctx, "secret", api.RenewRequest{Token: p.Token}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.ReleaseSemaphoreWithResponse(ctx, "secret", api.ReleaseRequest{Token: p.Token}); err != nil {
		t.Fatal(err)
	}
	sh := f.acquire(t, "secret", api.AcquireRequest{Owner: ptr("w"), Mode: ptr(api.LockModeShared)})
	if _, err := f.client.ReleaseLockWithResponse(ctx, "secret", api.ReleaseRequest{Token: sh.Token + "x"}); err != nil {
		t.Fatal(err)
	}
	_, metrics, err := do(http.MethodGet, f.url+"/metrics", "", "")
	if err != nil {
		t.Fatal(err)
	}
	logs := f.logs.String()
	if !strings.Contains(logs, `"route":"/v1/locks/{key}/renew"`) || !strings.Contains(logs, `"owner":"w"`) {
		t.Fatalf("access log lacks route or owner:\n%s", logs)
	}
	for name, text := range map[string]string{"logs": logs, "metrics": string(metrics)} {
		for _, tok := range []string{l.Token, p.Token, sh.Token} {
			if strings.Contains(text, tok) || strings.Contains(text, tok[:16]) {
				t.Fatalf("a token appears in the %s", name)
			}
		}
	}
	if !strings.Contains(logs, `"route":"/v1/semaphores/{key}/renew"`) || !strings.Contains(logs, `"key":"secret","kind":"semaphore"`) {
		t.Fatalf("access log lacks the semaphore's route or key:\n%s", logs)
	}
	for _, series := range []string{
		`lockd_http_requests_total{method="POST",route="/v1/locks/{key}/acquire",status="200"} 3`,
		`lockd_http_requests_total{method="POST",route="/v1/semaphores/{key}/acquire",status="200"} 1`,
		`lockd_acquires_total{kind="lock",outcome="granted",prefix="secret"} 2`,
		`lockd_acquires_total{kind="semaphore",outcome="granted",prefix="secret"} 1`,
		`lockd_acquires_total{kind="lock",outcome="reentered",prefix="secret"} 1`,
		"lockd_waiters 0",
	} {
		if !strings.Contains(string(metrics), series) {
			t.Fatalf("metrics lack %q", series)
		}
	}
}
