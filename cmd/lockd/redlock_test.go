package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

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
	res, err := http.Get(inst.url + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var ready struct {
		Topology string
		Nodes    []struct{ Up bool }
	}
	if err := json.NewDecoder(res.Body).Decode(&ready); err != nil || res.StatusCode != 200 || ready.Topology != "redlock" || len(ready.Nodes) != 3 {
		t.Fatalf("/readyz: %d %+v %v", res.StatusCode, ready, err)
	}
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
