package server_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/auth"
	"github.com/lockd/lockd/internal/authlimit"
	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/redistest"
	"github.com/lockd/lockd/internal/server"
)

const authYAML = `
keys:
  - name: viewer
    key: "read-key-0123456789"
    scopes: [read]
  - name: ci-runner
    key: "write-key-0123456789"
    scopes: [write]
  - name: ops
    key: "admin-key-0123456789"
    scopes: [admin]
  - name: deployer
    key: "prefix-key-0123456789"
    scopes: [admin]
    prefixes: ["deploy:"]
`

func authFixture(t *testing.T, metricsAuth bool) *fixture {
	t.Helper()
	keys, err := auth.Parse([]byte(authYAML))
	if err != nil {
		t.Fatal(err)
	}
	return newFixtureWith(t, redistest.Start(t), func(c *server.Config) {
		c.Keys = keys
		c.MetricsAuth = metricsAuth
		// These tests send many unknown keys from one address on purpose.
		c.UnknownKeys = authlimit.New(1000, time.Second)
	})
}

func call(t *testing.T, method, url, key, body string) (int, string, http.Header) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.Header.Get("Content-Type") == "text/event-stream" {
		return res.StatusCode, "", res.Header // a hold: hang up at once
	}
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b), res.Header
}

// Every endpoint × no key, unknown key, read, write, admin, and a key
// outside its prefixes. "ok" is any answer past auth (2xx, 404, 409).
func TestAuthMatrix(t *testing.T) {
	f := authFixture(t, false)
	ctx := context.Background()
	if _, err := f.engine.Acquire(ctx, lock.Lock("order:1"), lock.AcquireRequest{Owner: "o", TTL: 60e9}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.engine.Acquire(ctx, lock.Lock("deploy:prod"), lock.AcquireRequest{Owner: "o", TTL: 60e9}); err != nil {
		t.Fatal(err)
	}
	// Semaphores of the same names: API-key prefixes apply to their names.
	for _, name := range []string{"order:1", "deploy:prod"} {
		if _, err := f.engine.Acquire(ctx, lock.Semaphore(name), lock.AcquireRequest{Owner: "o", TTL: 60e9, Limit: 2}); err != nil {
			t.Fatal(err)
		}
	}
	const ok, unauth, forbidden = 0, 401, 403
	keys := []struct{ name, key string }{
		{"none", ""}, {"unknown", "not-a-key-0123456789"}, {"read", "read-key-0123456789"},
		{"write", "write-key-0123456789"}, {"admin", "admin-key-0123456789"}, {"prefix", "prefix-key-0123456789"},
	}
	endpoints := []struct {
		method, path, body string
		want               [6]int // by keys above
	}{
		{"GET", "/v1/locks", "", [6]int{unauth, unauth, ok, ok, ok, ok}},
		{"GET", "/v1/locks?prefix=order:", "", [6]int{unauth, unauth, ok, ok, ok, forbidden}},
		{"GET", "/v1/locks/order:1", "", [6]int{unauth, unauth, ok, ok, ok, forbidden}},
		{"GET", "/v1/locks/order:1/history", "", [6]int{unauth, unauth, ok, ok, ok, forbidden}},
		{"POST", "/v1/locks/order:2/acquire", `{"ttl_ms":60000}`, [6]int{unauth, unauth, forbidden, ok, ok, forbidden}},
		{"POST", "/v1/locks/order:1/renew", `{"token":"x"}`, [6]int{unauth, unauth, forbidden, ok, ok, forbidden}},
		{"POST", "/v1/locks/order:1/release", `{"token":"x"}`, [6]int{unauth, unauth, forbidden, ok, ok, forbidden}},
		{"POST", "/v1/locks/order:3/hold", `{"ttl_ms":60000}`, [6]int{unauth, unauth, forbidden, ok, ok, forbidden}},
		{"POST", "/v1/locks/order:1/request-release", `{}`, [6]int{unauth, unauth, forbidden, ok, ok, forbidden}},
		{"POST", "/v1/locks/order:9/force-release", `{}`, [6]int{unauth, unauth, forbidden, forbidden, ok, forbidden}},
		{"POST", "/v1/locks/deploy:x/acquire", `{}`, [6]int{unauth, unauth, forbidden, ok, ok, ok}},
		{"POST", "/v1/locks/deploy:y/force-release", `{}`, [6]int{unauth, unauth, forbidden, forbidden, ok, ok}},
		{"POST", "/v1/locks/order:4/acquire", `{"mode":"shared"}`, [6]int{unauth, unauth, forbidden, ok, ok, forbidden}},
		{"GET", "/v1/semaphores", "", [6]int{unauth, unauth, ok, ok, ok, ok}},
		{"GET", "/v1/semaphores?prefix=order:", "", [6]int{unauth, unauth, ok, ok, ok, forbidden}},
		{"GET", "/v1/semaphores?prefix=deploy:", "", [6]int{unauth, unauth, ok, ok, ok, ok}},
		{"GET", "/v1/semaphores/order:1", "", [6]int{unauth, unauth, ok, ok, ok, forbidden}},
		{"GET", "/v1/semaphores/order:1/history", "", [6]int{unauth, unauth, ok, ok, ok, forbidden}},
		{"POST", "/v1/semaphores/order:2/acquire", `{"limit":2,"ttl_ms":60000}`, [6]int{unauth, unauth, forbidden, ok, ok, forbidden}},
		{"POST", "/v1/semaphores/order:1/renew", `{"token":"x"}`, [6]int{unauth, unauth, forbidden, ok, ok, forbidden}},
		{"POST", "/v1/semaphores/order:1/release", `{"token":"x"}`, [6]int{unauth, unauth, forbidden, ok, ok, forbidden}},
		{"POST", "/v1/semaphores/order:3/hold", `{"limit":5,"ttl_ms":60000}`, [6]int{unauth, unauth, forbidden, ok, ok, forbidden}},
		{"POST", "/v1/semaphores/order:9/force-release", `{}`, [6]int{unauth, unauth, forbidden, forbidden, ok, forbidden}},
		{"POST", "/v1/semaphores/deploy:x/acquire", `{"limit":2}`, [6]int{unauth, unauth, forbidden, ok, ok, ok}},
		{"GET", "/v1/semaphores/deploy:prod", "", [6]int{unauth, unauth, ok, ok, ok, ok}},
		{"POST", "/v1/admin/quarantine/end", `{"reason":"test"}`, [6]int{unauth, unauth, forbidden, forbidden, ok, forbidden}},
		{"POST", "/v1/semaphores/deploy:y/force-release", `{}`, [6]int{unauth, unauth, forbidden, forbidden, ok, ok}},
		{"GET", "/livez", "", [6]int{ok, ok, ok, ok, ok, ok}},
		{"GET", "/healthz", "", [6]int{ok, ok, ok, ok, ok, ok}},
		{"GET", "/readyz", "", [6]int{ok, ok, ok, ok, ok, ok}},
		{"GET", "/openapi.yaml", "", [6]int{ok, ok, ok, ok, ok, ok}},
		{"GET", "/metrics", "", [6]int{ok, ok, ok, ok, ok, ok}},
	}
	for _, ep := range endpoints {
		for i, k := range keys {
			t.Run(ep.method+" "+ep.path+" as "+k.name, func(t *testing.T) {
				status, body, h := call(t, ep.method, f.url+ep.path, k.key, ep.body)
				switch want := ep.want[i]; want {
				case ok:
					if status == 401 || status == 403 || status >= 500 {
						t.Fatalf("status %d: %s", status, body)
					}
				default:
					if status != want {
						t.Fatalf("status %d, want %d: %s", status, want, body)
					}
					if !strings.Contains(body, `"code":"`+map[int]string{401: "unauthorized", 403: "forbidden"}[want]+`"`) {
						t.Fatalf("body %s", body)
					}
					if want == 401 && !strings.HasPrefix(h.Get("WWW-Authenticate"), "Bearer") {
						t.Fatalf("401 without WWW-Authenticate: Bearer")
					}
				}
			})
		}
	}

	// A key limited to prefixes lists only its own locks.
	_, body, _ := call(t, "GET", f.url+"/v1/locks", "prefix-key-0123456789", "")
	var list struct{ Locks []struct{ Key string } }
	if err := json.Unmarshal([]byte(body), &list); err != nil {
		t.Fatal(err)
	}
	for _, l := range list.Locks {
		if !strings.HasPrefix(l.Key, "deploy:") {
			t.Fatalf("deployer sees %s", l.Key)
		}
	}
	if len(list.Locks) == 0 {
		t.Fatal("deployer sees none of its own locks")
	}
	_, body, _ = call(t, "GET", f.url+"/v1/semaphores", "prefix-key-0123456789", "")
	var sems struct{ Semaphores []struct{ Key string } }
	if err := json.Unmarshal([]byte(body), &sems); err != nil {
		t.Fatal(err)
	}
	if len(sems.Semaphores) == 0 {
		t.Fatalf("deployer sees none of its own semaphores: %s", body)
	}
	for _, s := range sems.Semaphores {
		if !strings.HasPrefix(s.Key, "deploy:") {
			t.Fatalf("deployer sees semaphore %s", s.Key)
		}
	}

	// The actor in history and the default owner are the key's name.
	_, body, _ = call(t, "POST", f.url+"/v1/locks/order:7/acquire", "write-key-0123456789", `{}`)
	if !strings.Contains(body, `"owner":"ci-runner"`) {
		t.Fatalf("default owner: %s", body)
	}
	call(t, "POST", f.url+"/v1/locks/order:7/force-release", "admin-key-0123456789", `{"reason":"test"}`)
	evs, _ := f.engine.History(ctx, lock.Lock("order:7"), 1)
	if len(evs) != 1 || evs[0].Actor != "ops" {
		t.Fatalf("history actor: %+v", evs)
	}
	_, body, _ = call(t, "POST", f.url+"/v1/semaphores/order:7/acquire", "write-key-0123456789", `{"limit":1}`)
	if !strings.Contains(body, `"owner":"ci-runner"`) {
		t.Fatalf("default owner of a permit: %s", body)
	}
	call(t, "POST", f.url+"/v1/semaphores/order:7/force-release", "admin-key-0123456789", `{"reason":"test"}`)
	evs, _ = f.engine.History(ctx, lock.Semaphore("order:7"), 1)
	if len(evs) != 1 || evs[0].Actor != "ops" || evs[0].Type != "force_released" {
		t.Fatalf("semaphore history actor: %+v", evs)
	}

	// Neither the API keys nor a lease token appear in the logs.
	logs := f.logs.String()
	for _, k := range keys[1:] {
		if strings.Contains(logs, k.key) {
			t.Fatalf("the %s key appears in the logs", k.name)
		}
	}
}

func TestMetricsAuth(t *testing.T) {
	f := authFixture(t, true)
	if status, _, _ := call(t, "GET", f.url+"/metrics", "", ""); status != 401 {
		t.Fatalf("/metrics without a key: %d", status)
	}
	if status, _, _ := call(t, "GET", f.url+"/metrics", "read-key-0123456789", ""); status != 200 {
		t.Fatalf("/metrics with a read key: %d", status)
	}
}

// N25 of the third audit: /metrics labels every tenant's prefix, so a key
// limited to prefixes (a tenant's, whatever its scope) gets 403; keys
// without prefixes read it.
func TestMetricsNeedAKeyWithoutPrefixes(t *testing.T) {
	keys, err := auth.Parse([]byte(authYAML + `
  - name: tenant-reader
    key: "tenant-read-0123456789"
    scopes: [read]
    prefixes: ["deploy:"]
  - name: tenant-writer
    key: "tenant-write-0123456789"
    scopes: [write]
    prefixes: ["deploy:"]
`))
	if err != nil {
		t.Fatal(err)
	}
	f := newFixtureWith(t, redistest.Start(t), func(c *server.Config) {
		c.Keys, c.MetricsAuth = keys, true
	})
	for _, tc := range []struct {
		key  string
		want int
	}{
		{"read-key-0123456789", 200},
		{"write-key-0123456789", 200},
		{"admin-key-0123456789", 200},
		{"tenant-read-0123456789", 403},
		{"tenant-write-0123456789", 403},
		{"prefix-key-0123456789", 403}, // an admin limited to deploy:
		{"", 401},
	} {
		status, body, _ := call(t, "GET", f.url+"/metrics", tc.key, "")
		if status != tc.want {
			t.Errorf("/metrics with %q: %d, want %d: %.200s", tc.key, status, tc.want, body)
		}
		if tc.want == 403 && (strings.Contains(body, "lockd_") || !strings.Contains(body, "without prefixes")) {
			t.Errorf("/metrics with %q: the 403 must say why and show no metric: %.300s", tc.key, body)
		}
	}
}

// An idempotent retry returns the lease only to the API key that got it.
func TestIdempotencyKeyIsPerAPIKey(t *testing.T) {
	f := authFixture(t, false)
	acquire := func(apiKey string) (int, string) {
		req, _ := http.NewRequest("POST", f.url+"/v1/locks/hook:1/acquire", strings.NewReader(`{"ttl_ms":5000}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+apiKey)
		req.Header.Set("Idempotency-Key", "delivery-1")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	s1, first := acquire("write-key-0123456789")
	s2, again := acquire("write-key-0123456789")
	// The replay is the same lease, marked as a replay.
	var a, b struct {
		Token    string
		Fence    int64
		Replayed bool
	}
	_ = json.Unmarshal([]byte(first), &a)
	_ = json.Unmarshal([]byte(again), &b)
	if s1 != 200 || s2 != 200 || a.Token != b.Token || a.Fence != b.Fence || a.Replayed || !b.Replayed {
		t.Fatalf("retry by the same key: %d %s / %d %s", s1, first, s2, again)
	}
	if s3, other := acquire("admin-key-0123456789"); s3 != 409 || strings.Contains(other, "token") {
		t.Fatalf("same idempotency key from another API key: %d %s", s3, other)
	}
}

// A full acquire/renew/release/force-release cycle with API keys leaves
// neither the lease token nor an API key in the logs or the metrics.
func TestSecretsStayOutOfLogsWithAuth(t *testing.T) {
	f := authFixture(t, true)
	const writer, admin = "write-key-0123456789", "admin-key-0123456789"
	_, body, _ := call(t, "POST", f.url+"/v1/locks/cycle/acquire", writer, `{"ttl_ms":10000}`)
	var l struct{ Token string }
	if err := json.Unmarshal([]byte(body), &l); err != nil || l.Token == "" {
		t.Fatalf("acquire: %s", body)
	}
	steps := []struct{ method, path, key, body string }{
		{"POST", "/v1/locks/cycle/acquire", writer, `{"token":"` + l.Token + `"}`},
		{"POST", "/v1/locks/cycle/renew", writer, `{"token":"` + l.Token + `"}`},
		{"POST", "/v1/locks/cycle/release", writer, `{"token":"` + l.Token + `"}`},
		{"POST", "/v1/locks/cycle/renew", writer, `{"token":"` + l.Token + `x"}`},
		{"POST", "/v1/locks/cycle/force-release", admin, `{"reason":"test"}`},
		{"POST", "/v1/locks/cycle/release", writer, `{"token":"` + l.Token + `"}`},
		{"GET", "/v1/locks/cycle/history", "read-key-0123456789", ""},
		{"GET", "/v1/locks", "wrong-key-0123456789", ""},
	}
	for _, s := range steps {
		if status, body, _ := call(t, s.method, f.url+s.path, s.key, s.body); status >= 500 {
			t.Fatalf("%s %s: %d %s", s.method, s.path, status, body)
		}
	}
	_, metrics, _ := call(t, "GET", f.url+"/metrics", "read-key-0123456789", "")
	logs := f.logs.String()
	if !strings.Contains(logs, `"route":"/v1/locks/{key}/force-release"`) {
		t.Fatalf("the cycle was not logged:\n%s", logs)
	}
	for _, secret := range []string{l.Token, writer, admin, "read-key-0123456789", "wrong-key-0123456789"} {
		if strings.Contains(logs, secret) || strings.Contains(metrics, secret) {
			t.Fatalf("a secret (%.4s…) appears in the logs or metrics", secret)
		}
	}
}
