package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockd/lockd/api"
	"github.com/lockd/lockd/client"
	"github.com/lockd/lockd/internal/lockdtest"
	"github.com/lockd/lockd/internal/redistest"
)

// cliServer is an in-process lockd server on a real Redis.
type cliServer struct {
	url   string
	redis *redistest.Server
	c     *client.Client // to set up and inspect what the CLI did
}

func startCLIServer(t *testing.T) *cliServer {
	t.Helper()
	ld := lockdtest.Start(t, lockdtest.Options{})
	c, err := client.New(ld.URL, client.WithRetry(0))
	if err != nil {
		t.Fatal(err)
	}
	return &cliServer{url: ld.URL, redis: ld.Redis, c: c}
}

// cli runs `lockd ARGS...` in process, as main would, with env as its
// only environment, and returns the exit code and output.
func cli(t *testing.T, env map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb lockdtest.Buffer
	err := run(context.Background(), append([]string{"lockd"}, args...), func(k string) string { return env[k] }, &out, &errb)
	code = exitCode(err, &errb)
	return code, out.String(), errb.String()
}

func TestCLIExitCodes(t *testing.T) {
	ls := startCLIServer(t)
	env := map[string]string{"LOCKD_SERVER": ls.url}
	ctx := context.Background()
	held, err := ls.c.Acquire(ctx, "cli:held", client.AcquireOptions{Owner: "holder", TTL: time.Minute, NoAutoRenew: true})
	if err != nil {
		t.Fatal(err)
	}
	const stranger = "not-the-token-not-the-token-xxxx"

	tests := []struct {
		name string
		env  map[string]string
		args []string
		code int
		// stderr must contain this.
		msg string
	}{
		{"acquire free", env, []string{"acquire", "cli:free"}, exitOK, "acquired cli:free"},
		{"acquire held", env, []string{"acquire", "cli:held"}, exitHeld, "held by holder"},
		{"acquire held after wait", env, []string{"acquire", "--wait", "200ms", "cli:held"}, exitHeld, "held by holder"},
		{"renew stranger token", env, []string{"renew", "--token", stranger, "cli:held"}, exitLeaseLost, "lease lost"},
		{"renew free key", env, []string{"renew", "--token", stranger, "cli:nobody"}, exitLeaseLost, "no live lease"},
		{"release stranger token", env, []string{"release", "--token", stranger, "cli:held"}, exitLeaseLost, "nothing to release"},
		{"renew token from env", map[string]string{"LOCKD_SERVER": ls.url, "LOCKD_TOKEN": held.Token()}, []string{"renew", "cli:held"}, exitOK, ""},
		{"status held", env, []string{"status", "cli:held"}, exitOK, ""},
		{"status free", env, []string{"status", "cli:nobody"}, exitLeaseLost, "no live lease"},
		{"force-release free", env, []string{"force-release", "cli:nobody"}, exitLeaseLost, "no live lease"},
		{"ls", env, []string{"ls", "--prefix", "cli:"}, exitOK, ""},
		{"history", env, []string{"history", "cli:held"}, exitOK, ""},
		{"unreachable", nil, []string{"status", "--server", "http://127.0.0.1:1", "cli:held"}, exitUnreachable, "unavailable"},
		{"unreachable from env", map[string]string{"LOCKD_SERVER": "http://127.0.0.1:1"}, []string{"acquire", "cli:x"}, exitUnreachable, "connection refused"},
		{"no key", env, []string{"acquire"}, exitUsage, "wants KEY"},
		{"two keys", env, []string{"status", "a", "b"}, exitUsage, "wants KEY"},
		{"unknown flag", env, []string{"status", "--nope", "cli:held"}, exitUsage, "flag provided but not defined"},
		{"bad key", env, []string{"acquire", "-/bad"}, exitUsage, "flag provided but not defined"},
		{"invalid key", env, []string{"acquire", "bad/key"}, exitUsage, "invalid_request"},
		{"bad env duration", map[string]string{"LOCKD_SERVER": ls.url, "LOCKD_TTL": "soon"}, []string{"acquire", "cli:y"}, exitUsage, "LOCKD_TTL"},
		{"renew without token", env, []string{"renew", "cli:held"}, exitUsage, "--token"},
		{"unknown command", env, []string{"lock", "cli:held"}, exitUsage, "unknown command"},
		{"help", env, []string{"status", "-h"}, exitOK, "usage: lockd status"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := cli(t, tt.env, tt.args...)
			if code != tt.code {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, tt.code, stderr)
			}
			if !strings.Contains(stderr, tt.msg) {
				t.Errorf("stderr %q does not say %q", stderr, tt.msg)
			}
		})
	}
}

func TestCLIAcquireRenewRelease(t *testing.T) {
	ls := startCLIServer(t)
	env := map[string]string{"LOCKD_SERVER": ls.url}

	// The plain output is the token, alone, for tok=$(lockd acquire KEY).
	code, out, stderr := cli(t, env, "acquire", "--ttl", "10s", "--owner", "script", "cli:k")
	if code != exitOK {
		t.Fatalf("acquire: exit %d: %s", code, stderr)
	}
	token := strings.TrimSpace(out)
	if strings.ContainsAny(token, " \n") || len(token) < 22 {
		t.Fatalf("acquire printed %q, want just the token", out)
	}
	if strings.Contains(stderr, token) {
		t.Error("the token is on stderr too")
	}
	if code, _, stderr := cli(t, env, "renew", "--token", token, "--ttl", "20s", "cli:k"); code != exitOK {
		t.Fatalf("renew: exit %d: %s", code, stderr)
	}
	st, err := ls.c.State(context.Background(), "cli:k")
	if err != nil || st.Owner != "script" || st.TtlMs != 20000 || st.Renewals != 1 {
		t.Fatalf("state after renew = %+v, %v", st, err)
	}
	code, out, stderr = cli(t, env, "release", "--token", token, "cli:k")
	if code != exitOK || !strings.Contains(out, "released cli:k") {
		t.Fatalf("release: exit %d: %s%s", code, out, stderr)
	}
	if code, _, _ := cli(t, env, "release", "--token", token, "cli:k"); code != exitLeaseLost {
		t.Errorf("second release: exit %d, want %d", code, exitLeaseLost)
	}
}

// --json prints the API's own JSON: each output decodes as the API type,
// with no field unknown to it.
func TestCLIJSON(t *testing.T) {
	ls := startCLIServer(t)
	env := map[string]string{"LOCKD_SERVER": ls.url, "LOCKD_JSON": ""}

	var lease api.Lease
	mustJSON(t, env, &lease, "acquire", "--json", "--ttl", "10s", "cli:j")
	if lease.Key != "cli:j" || lease.Token == "" || lease.Fence == 0 || lease.TtlMs != 10000 {
		t.Fatalf("acquire --json = %+v", lease)
	}
	var renewed api.Lease
	mustJSON(t, env, &renewed, "renew", "--json", "--token", lease.Token, "cli:j")
	if renewed.Fence != lease.Fence {
		t.Errorf("renew changed the fence")
	}
	var st api.LockState
	mustJSON(t, env, &st, "status", "--json", "cli:j")
	if st.Fence != lease.Fence || st.Renewals != 1 {
		t.Errorf("status --json = %+v", st)
	}
	var list api.LockList
	// LOCKD_JSON turns it on like the flag does.
	mustJSON(t, map[string]string{"LOCKD_SERVER": ls.url, "LOCKD_JSON": "true"}, &list, "ls", "--prefix", "cli:")
	if len(list.Locks) != 1 || list.Locks[0].Key != "cli:j" {
		t.Errorf("ls --json = %+v", list)
	}
	var h api.History
	mustJSON(t, env, &h, "history", "--json", "cli:j")
	// Renewals are kept apart, so the lifecycle keeps its story.
	if len(h.Events) != 1 || h.Events[0].Type != api.Acquired {
		t.Errorf("history --json = %+v", h)
	}
	var rn api.History
	mustJSON(t, env, &rn, "history", "--renewals", "--json", "cli:j")
	if len(rn.Events) != 1 || rn.Events[0].Type != api.Renewed {
		t.Errorf("history --renewals --json = %+v", rn)
	}
	var fr api.ForceReleaseResult
	mustJSON(t, env, &fr, "force-release", "--json", "--reason", "test", "cli:j")
	if !fr.Released || fr.Fence != lease.Fence {
		t.Errorf("force-release --json = %+v", fr)
	}
	var rel api.ReleaseResult
	if code, _, _ := cli(t, env, "release", "--json", "--token", lease.Token, "cli:j"); code != exitLeaseLost {
		t.Errorf("release after force-release: exit %d, want %d", code, exitLeaseLost)
	}
	mustJSON(t, env, &lease, "acquire", "--json", "cli:j")
	mustJSON(t, env, &rel, "release", "--json", "--token", lease.Token, "cli:j")
	if !rel.Released || rel.Count != 0 {
		t.Errorf("release --json = %+v", rel)
	}
}

func mustJSON(t *testing.T, env map[string]string, v any, args ...string) {
	t.Helper()
	code, out, stderr := cli(t, env, args...)
	if code != exitOK {
		t.Fatalf("lockd %s: exit %d: %s", strings.Join(args, " "), code, stderr)
	}
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("lockd %s printed %q: %v", strings.Join(args, " "), out, err)
	}
}

// Against a server with API keys: a missing or unknown key exits 5, a key
// without the scope exits 5, the right key works, from flag or environment.
func TestCLIAuthExitCodes(t *testing.T) {
	yaml := "keys:\n  - name: viewer\n    key: viewer-key-0123456789\n    scopes: [read]\n  - name: writer\n    key: writer-key-0123456789\n    scopes: [write]\n"
	inst := startServe(t, map[string]string{"LOCKD_AUTH_YAML": yaml})
	tests := []struct {
		name string
		env  map[string]string
		args []string
		code int
	}{
		{"no key", nil, []string{"acquire", "a:1"}, exitAuth},
		{"unknown key", nil, []string{"acquire", "--api-key", "wrong-key-0123456789", "a:1"}, exitAuth},
		{"read key writes", nil, []string{"acquire", "--api-key", "viewer-key-0123456789", "a:1"}, exitAuth},
		{"write key", nil, []string{"acquire", "--api-key", "writer-key-0123456789", "a:1"}, exitOK},
		{"write key from env", map[string]string{"LOCKD_API_KEY": "writer-key-0123456789"}, []string{"acquire", "a:2"}, exitOK},
		{"write key force-releases", map[string]string{"LOCKD_API_KEY": "writer-key-0123456789"}, []string{"force-release", "a:2"}, exitAuth},
		{"read key reads", map[string]string{"LOCKD_API_KEY": "viewer-key-0123456789"}, []string{"status", "a:2"}, exitOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := map[string]string{"LOCKD_SERVER": inst.url}
			for k, v := range tt.env {
				env[k] = v
			}
			code, stdout, stderr := cli(t, env, tt.args...)
			if code != tt.code {
				t.Fatalf("exit %d, want %d; stderr:\n%s", code, tt.code, stderr)
			}
			if strings.Contains(stdout+stderr, "-key-0123456789") {
				t.Fatal("the CLI printed an API key")
			}
		})
	}
}

// Keys with ':', '@' and '.' go through every client subcommand intact:
// a proxy in front of the server records each path as sent, and the
// server must find the lease under the decoded key. A key typed with a
// '%' is taken literally (sent as %25), never decoded twice: it is no key.
func TestCLIKeysThatNeedEscaping(t *testing.T) {
	ls := startCLIServer(t)
	target, err := url.Parse(ls.url)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var paths []string // escaped paths, as they reached the server
	rp := httputil.NewSingleHostReverseProxy(target)
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.URL.EscapedPath())
		mu.Unlock()
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(proxy.Close)
	env := map[string]string{"LOCKD_SERVER": proxy.URL}
	ctx := context.Background()

	for _, key := range []string{"order:pay:1", "svc@eu.web-1", "build.v2_x:main"} {
		t.Run(key, func(t *testing.T) {
			var lease api.Lease
			mustJSON(t, env, &lease, "acquire", "--json", "--ttl", "1m", "--owner", "cli", key)
			if lease.Key != key {
				t.Fatalf("acquire answered key %q, want %q", lease.Key, key)
			}
			// The server holds the decoded key, whatever the path's escaping.
			if st, err := ls.c.State(ctx, key); err != nil || st.Owner != "cli" {
				t.Fatalf("server's state of %s = %+v, %v", key, st, err)
			}
			var st api.LockState
			mustJSON(t, env, &st, "status", "--json", key)
			if st.Key != key || st.Fence != lease.Fence {
				t.Fatalf("status = %+v, want key %s fence %d", st, key, lease.Fence)
			}
			var list api.LockList
			mustJSON(t, env, &list, "ls", "--json", "--prefix", key)
			if len(list.Locks) != 1 || list.Locks[0].Key != key {
				t.Fatalf("ls --prefix %s = %+v", key, list)
			}
			if code, _, stderr := cli(t, env, "renew", "--token", lease.Token, key); code != exitOK {
				t.Fatalf("renew: exit %d: %s", code, stderr)
			}
			if code, out, stderr := cli(t, env, "release", "--token", lease.Token, key); code != exitOK || !strings.Contains(out, "released "+key) {
				t.Fatalf("release: exit %d: %s%s", code, out, stderr)
			}
			mustJSON(t, env, &lease, "acquire", "--json", key)
			var broken api.ForceReleaseResult
			mustJSON(t, env, &broken, "force-release", "--json", "--reason", "test", key)
			if broken.Key != key || broken.Fence != lease.Fence {
				t.Fatalf("force-release = %+v, want key %s fence %d", broken, key, lease.Fence)
			}
			// History keeps the lifecycle, newest first (renewals are kept
			// apart, GET …/history?type=renewed).
			var h api.History
			mustJSON(t, env, &h, "history", "--json", key)
			var types []string
			for _, e := range h.Events {
				types = append(types, string(e.Type))
			}
			if got := strings.Join(types, " "); h.Key != key || got != "force_released acquired released acquired" {
				t.Fatalf("history of %s = %s %q, want force_released acquired released acquired", key, h.Key, got)
			}
			mu.Lock()
			defer mu.Unlock()
			seen := 0
			for _, p := range paths {
				rest, ok := strings.CutPrefix(p, "/v1/locks/")
				if !ok {
					continue
				}
				seg, _, _ := strings.Cut(rest, "/")
				if k, err := url.PathUnescape(seg); err == nil && k == key {
					seen++
				}
			}
			// acquire, status, renew, release, acquire, force-release, history.
			if seen != 7 {
				t.Fatalf("%d requests named %s in their path, want 7; paths: %q", seen, key, paths)
			}
		})
	}

	t.Run("percent typed literally", func(t *testing.T) {
		code, _, stderr := cli(t, env, "acquire", "order%3Apay%3A1")
		if code != exitUsage || !strings.Contains(stderr, "key") {
			t.Fatalf("exit %d, want %d naming the key; stderr: %s", code, exitUsage, stderr)
		}
		mu.Lock()
		defer mu.Unlock()
		if last := paths[len(paths)-1]; last != "/v1/locks/order%253Apay%253A1/acquire" {
			t.Fatalf("sent %s, want the '%%' itself escaped", last)
		}
	})
}
