package main

import (
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
	for i, up := range checkReady(t, inst.url, "sentinel", 2) {
		if !up {
			t.Fatalf("/readyz: node %d is down", i)
		}
	}
	if strings.Contains(inst.out.String(), password) {
		t.Fatal("the sentinel password was logged")
	}
}
