package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/redistest"
)

// lockd serve --redlock grants by majority over three independent Redis
// servers, end to end over HTTP, and says so in /readyz.
func TestServeRedlock(t *testing.T) {
	masters := []*redistest.Server{redistest.Start(t), redistest.Start(t), redistest.Start(t)}
	urls := make([]string, len(masters))
	for i, m := range masters {
		urls[i] = m.URL()
	}
	inst := startServe(t, nil, "--redlock", strings.Join(urls, ","))
	status, l := post(t, inst.url+"/v1/locks/rl:http/acquire", `{"owner":"a","ttl_ms":5000}`)
	if status != 200 || l["fence"] == nil {
		t.Fatalf("acquire: %d %v", status, l)
	}
	// Every master has the lease.
	for i, m := range masters {
		if n, _ := m.Client(t).Exists(t.Context(), "lockd:{rl:http}:lease").Result(); n != 1 {
			t.Fatalf("master %d has no lease", i)
		}
	}
	checkReady(t, inst.url, "redlock", 3)
	if status, _ := post(t, inst.url+"/v1/locks/rl:http/release", `{"token":"`+l["token"].(string)+`"}`); status != 200 {
		t.Fatalf("release: %d", status)
	}
}

func TestServeRedlockUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--redlock", "redis://127.0.0.1:1,redis://127.0.0.1:2"}, "odd number"},
		{[]string{"--redlock", "redis://a:1,redis-cluster://b:2,redis://c:3"}, "one server"},
		{[]string{"--redlock", "redis://a:1,redis://b:2,redis://c:3", "--redis", "redis://d:4"}, "exclude each other"},
	} {
		_, err := parseServe(append([]string{}, tc.args...), func(string) string { return "" }, nil)
		if err == nil {
			// Some errors come when the clients are made.
			_, err = openRedlock(tc.args[1], credentials{})
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}
}

// lockd serve --redlock refuses what Redlock cannot do before it listens,
// with exit code 2 and a message that names the flags: webhooks (no master
// has the whole event stream, so nothing could be delivered truthfully)
// and --replica-acks (independent masters have no replicas to wait for).
func TestServeRedlockRefusesWebhooksAndReplicaAcks(t *testing.T) {
	masters := []*redistest.Server{redistest.Start(t), redistest.Start(t), redistest.Start(t)}
	urls := make([]string, len(masters))
	for i, m := range masters {
		urls[i] = m.URL()
	}
	hooks := filepath.Join(t.TempDir(), "hooks.yaml")
	if err := os.WriteFile(hooks, []byte("webhooks:\n  - url: https://ops.example.com/hook\n    secret: very-secret-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	redlock := strings.Join(urls, ",")
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want []string
	}{
		{"--webhooks-file", []string{"--redlock", redlock, "--webhooks-file", hooks}, nil, []string{"--webhooks-file", "--redlock"}},
		{"LOCKD_WEBHOOKS_FILE", []string{"--redlock", redlock}, map[string]string{"LOCKD_WEBHOOKS_FILE": hooks}, []string{"--webhooks-file", "--redlock"}},
		{"--replica-acks", []string{"--redlock", redlock, "--replica-acks", "1"}, nil, []string{"--replica-acks", "--redlock"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var stdout, stderr strings.Builder
			err := run(ctx, append([]string{"lockd", "serve", "--listen", "127.0.0.1:0"}, tc.args...),
				func(k string) string { return tc.env[k] }, &stdout, io.Discard)
			code := exitCode(err, &stderr)
			if code != exitUsage {
				t.Fatalf("exit %d, want %d (usage); stderr %q", code, exitUsage, stderr.String())
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr.String(), w) {
					t.Errorf("stderr %q does not name %s", stderr.String(), w)
				}
			}
			if strings.Contains(stdout.String(), `"listening"`) {
				t.Errorf("lockd listened before refusing:\n%s", stdout.String())
			}
		})
	}
}

// checkReady asks url's /readyz (without a key: auth is off) for 200 with
// the topology and that many nodes, and returns whether each is up.
func checkReady(t *testing.T, url, topology string, nodes int) []bool {
	t.Helper()
	res, err := http.Get(url + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var ready struct {
		Topology string
		Nodes    []struct{ Up bool }
	}
	if err := json.NewDecoder(res.Body).Decode(&ready); err != nil || res.StatusCode != 200 || ready.Topology != topology || len(ready.Nodes) != nodes {
		t.Fatalf("/readyz: %d %+v %v", res.StatusCode, ready, err)
	}
	up := make([]bool, len(ready.Nodes))
	for i, n := range ready.Nodes {
		up[i] = n.Up
	}
	return up
}
