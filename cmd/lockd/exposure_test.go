package main

import (
	"errors"
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

// N19: an API-key prefix that does not end in a separator also covers
// longer names (a:1 covers a:10): lockd says so at start, naming the key
// and the prefix, and is quiet about prefixes that end in one.
func TestServeWarnsOfPrefixesWithoutSeparator(t *testing.T) {
	inst := startServe(t, map[string]string{"LOCKD_AUTH_YAML": exposureAuthYAML}, "--redis", redistest.Start(t).URL())
	var warned []string
	for _, line := range strings.Split(inst.out.String(), "\n") {
		if strings.Contains(line, `"prefix":`) && strings.Contains(line, `"level":"warn"`) {
			warned = append(warned, line)
		}
	}
	if len(warned) != 1 || !strings.Contains(warned[0], `"prefix":"a:1"`) || !strings.Contains(warned[0], `"api_key":"a1"`) {
		t.Fatalf("warnings about prefixes: %q, want one about a1's a:1\n%s", warned, inst.out)
	}
	// --strict-prefixes refuses to start with such a prefix.
	getenv := func(k string) string { return map[string]string{"LOCKD_AUTH_YAML": exposureAuthYAML}[k] }
	_, err := parseServe([]string{"--strict-prefixes"}, getenv, io.Discard)
	var ee *exitError
	if !errors.As(err, &ee) || ee.code != exitUsage || !strings.Contains(ee.msg, `"a:1"`) {
		t.Fatalf("--strict-prefixes with a:1: %v, want a usage error naming it", err)
	}
}
