package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/lockd/lockd/internal/redistest"
)

// N16: Sentinels that require a password are asked with
// LOCKD_SENTINEL_PASSWORD, apart from the Redis servers' credentials
// (here none): lockd finds the master, grants, and /readyz sees the nodes.
func TestServeSentinelWithPassword(t *testing.T) {
	const password = "sentinel-pass-0123456789"
	s := redistest.StartSentinelWithPassword(t, password)
	inst := startServe(t, map[string]string{"LOCKD_SENTINEL_PASSWORD": password}, "--redis", s.URL())
	if status, l := post(t, inst.url+"/v1/locks/sentinel:auth/acquire", `{"ttl_ms":60000}`); status != 200 {
		t.Fatalf("acquire through password-protected sentinels: %d %v\n%s", status, l, inst.out)
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
	if err := json.NewDecoder(res.Body).Decode(&ready); err != nil || res.StatusCode != 200 || ready.Topology != "sentinel" || len(ready.Nodes) != 2 {
		t.Fatalf("/readyz: %d %+v %v", res.StatusCode, ready, err)
	}
	for _, n := range ready.Nodes {
		if !n.Up {
			t.Fatalf("/readyz: a node is down: %+v", ready)
		}
	}
	if strings.Contains(inst.out.String(), password) {
		t.Fatal("the sentinel password was logged")
	}
}
