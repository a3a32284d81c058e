package main

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/lockd/lockd/internal/redistest"
)

const exposureAuthYAML = `
keys:
  - {name: reader, key: "reader-key-0123456789", scopes: [read]}
  - {name: ci,     key: "ci-key-0123456789abc",  scopes: [write], prefixes: ["ci:"]}
  - {name: a1,     key: "a1-key-0123456789abc",  scopes: [write], prefixes: ["a:1", "b."]}
`

// get is a GET of url with key (none when empty): its status and body.
func get(t *testing.T, url, key string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// N13: with API keys configured, /metrics needs a key with the read scope
// unless --metrics-auth=false opens it; with auth off it stays open.
func TestServeMetricsNeedAKeyWithAuth(t *testing.T) {
	rs := redistest.Start(t)
	env := map[string]string{"LOCKD_AUTH_YAML": exposureAuthYAML}
	inst := startServe(t, env, "--redis", rs.URL())
	if status, _ := get(t, inst.url+"/metrics", ""); status != 401 {
		t.Errorf("/metrics without a key, auth on: %d, want 401", status)
	}
	if status, body := get(t, inst.url+"/metrics", "reader-key-0123456789"); status != 200 || !strings.Contains(body, "lockd_waiters") {
		t.Errorf("/metrics with a read key: %d", status)
	}
	open := startServe(t, env, "--redis", rs.URL(), "--metrics-auth=false")
	if status, _ := get(t, open.url+"/metrics", ""); status != 200 {
		t.Errorf("/metrics without a key, --metrics-auth=false: %d, want 200", status)
	}
	noAuth := startServe(t, nil, "--redis", rs.URL())
	if status, _ := get(t, noAuth.url+"/metrics", ""); status != 200 {
		t.Errorf("/metrics with auth off: %d, want 200", status)
	}
}

