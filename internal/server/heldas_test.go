package server_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/lockd/lockd/internal/lockdtest"
)

// Over HTTP, a grant's mode and limit are the lease's: a shared holder's
// re-entry without a mode answers "shared", one that names exclusive is
// 409 mode_mismatch naming the field; a semaphore re-entry with another
// limit is 409 limit_mismatch.
func TestGrantAnswersTheModeHeld(t *testing.T) {
	ld := lockdtest.Start(t, lockdtest.Options{})
	post := func(path, body string) (int, map[string]any) {
		t.Helper()
		res, b, err := do(http.MethodPost, ld.URL+path, "application/json", body)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		_ = json.Unmarshal(b, &m)
		return res.StatusCode, m
	}
	_, r1 := post("/v1/locks/sh:up/acquire", `{"mode":"shared","owner":"r1","ttl_ms":20000}`)
	post("/v1/locks/sh:up/acquire", `{"mode":"shared","owner":"r2","ttl_ms":20000}`)
	tok := r1["token"].(string)

	status, p := post("/v1/locks/sh:up/acquire", `{"mode":"exclusive","ttl_ms":20000,"token":"`+tok+`"}`)
	if status != 409 || p["code"] != "mode_mismatch" || p["field"] != "mode" {
		t.Fatalf("shared re-entry naming exclusive: %d %v", status, p)
	}
	status, l := post("/v1/locks/sh:up/acquire", `{"ttl_ms":20000,"token":"`+tok+`"}`)
	if status != 200 || l["mode"] != "shared" || l["count"] != 2.0 {
		t.Fatalf("shared re-entry without a mode: %d %v", status, l)
	}
	_, s := post("/v1/semaphores/sem:lim/acquire", `{"limit":2,"ttl_ms":20000}`)
	status, p = post("/v1/semaphores/sem:lim/acquire", `{"limit":7,"token":"`+s["token"].(string)+`"}`)
	if status != 409 || p["code"] != "limit_mismatch" {
		t.Fatalf("permit re-entry with another limit: %d %v", status, p)
	}
}
