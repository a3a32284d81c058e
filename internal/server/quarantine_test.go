package server_test

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/auth"
	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/lockdtest"
	"github.com/lockd/lockd/internal/redistest"
	"github.com/lockd/lockd/internal/server"
)

// quarantineReplica is a lockd with authYAML's keys on rs that refreshes
// its knowledge of the quarantine every 100 ms.
func quarantineReplica(t *testing.T, rs *redistest.Server, off bool) *lockdtest.Lockd {
	t.Helper()
	keys, err := auth.Parse([]byte(authYAML))
	if err != nil {
		t.Fatal(err)
	}
	return lockdtest.Start(t, lockdtest.Options{Redis: rs,
		Engine:    lock.Options{EpochRefresh: 100 * time.Millisecond, NoQuarantine: off},
		Configure: func(c *server.Config) { c.Keys = keys }})
}

// codeOf is the problem code of a problem+json body ("" for another).
func codeOf(body string) string {
	var p struct{ Code string }
	_ = json.Unmarshal([]byte(body), &p)
	return p.Code
}

// N23: after Redis lost its data while a 24 h lease was live, the
// quarantine can end before the lease would have: on a lockd started with
// the quarantine off, which grants and is ready (its readiness follows what
// it does), and for every replica at once by an admin's
// POST /v1/admin/quarantine/end, which is logged with the actor and the
// reason and refused to keys that are not admin or are limited to prefixes.
func TestEndQuarantineOverHTTP(t *testing.T) {
	rs := redistest.Start(t)
	a, b, dead := quarantineReplica(t, rs, false), quarantineReplica(t, rs, false), quarantineReplica(t, rs, false)
	const writer, admin = "write-key-0123456789", "admin-key-0123456789"
	// The 24 h lease is granted by a lockd that then dies: nobody can put
	// it back, so keys nobody knows wait for it.
	if status, body, _ := call(t, "POST", dead.URL+"/v1/locks/a:live24h/acquire", writer, `{"ttl_ms":86400000}`); status != 200 {
		t.Fatalf("acquire: %d %s", status, body)
	}
	if status, body, _ := call(t, "POST", b.URL+"/v1/locks/b:warm/acquire", writer, `{"ttl_ms":100}`); status != 200 {
		t.Fatalf("acquire: %d %s", status, body)
	}
	time.Sleep(300 * time.Millisecond) // every replica reads the marker
	_ = dead.Engine.Close()
	rs.Restart()
	for _, r := range []*lockdtest.Lockd{a, b} {
		lockdtest.Eventually(t, func() bool {
			status, body, _ := call(t, "GET", r.URL+"/readyz", "", "")
			return status == 503 && codeOf(body) == "backend_recovering"
		}, 5*time.Second, "/readyz 503 backend_recovering after the loss")
	}
	// Once the lockds that live have put their leases back, the
	// quarantine says the dead one's lease.
	lockdtest.Eventually(t, func() bool {
		status, body, h := call(t, "POST", b.URL+"/v1/locks/b:y1/acquire", writer, `{}`)
		retry, _ := strconv.Atoi(h.Get("Retry-After"))
		if status == 200 {
			t.Fatalf("acquire during the quarantine: %d %s", status, body)
		}
		return status == 503 && codeOf(body) == "backend_recovering" && retry >= 86_000
	}, 5*time.Second, "acquire during the quarantine: 503 with the dead lockd's lease's Retry-After")

	t.Run("a lockd with the quarantine off grants and is ready", func(t *testing.T) {
		off := quarantineReplica(t, rs, true)
		if status, body, _ := call(t, "POST", off.URL+"/v1/locks/b:y2/acquire", writer, `{}`); status != 200 {
			t.Fatalf("acquire with the quarantine off: %d %s", status, body)
		}
		time.Sleep(300 * time.Millisecond) // it has read the marker's quarantine
		if status, body, _ := call(t, "GET", off.URL+"/readyz", "", ""); status != 200 {
			t.Fatalf("/readyz with the quarantine off: %d %s", status, body)
		}
		if status, _, _ := call(t, "GET", b.URL+"/readyz", "", ""); status != 503 {
			t.Fatalf("/readyz of a replica with the quarantine on: %d", status)
		}
	})

	t.Run("refused", func(t *testing.T) {
		for _, tc := range []struct {
			key, body string
			status    int
			code      string
		}{
			{"read-key-0123456789", `{"reason":"r"}`, 403, "forbidden"},
			{writer, `{"reason":"r"}`, 403, "forbidden"},
			{"prefix-key-0123456789", `{"reason":"r"}`, 403, "forbidden"}, // admin, but only of deploy:
			{"", `{"reason":"r"}`, 401, "unauthorized"},
			{admin, `{}`, 400, "invalid_request"},
			{admin, `{"reason":""}`, 400, "invalid_request"},
		} {
			status, body, _ := call(t, "POST", a.URL+"/v1/admin/quarantine/end", tc.key, tc.body)
			if status != tc.status || codeOf(body) != tc.code {
				t.Errorf("key %.6s… body %s: %d %s, want %d %s", tc.key, tc.body, status, body, tc.status, tc.code)
			}
		}
		if status, _, _ := call(t, "GET", a.URL+"/readyz", "", ""); status != 503 {
			t.Fatalf("/readyz after refused ends: %d", status)
		}
	})

	// An admin ends it: both replicas grant and are ready.
	status, body, _ := call(t, "POST", a.URL+"/v1/admin/quarantine/end", admin, `{"reason":"the 24 h holder was stopped by hand"}`)
	var ended struct {
		Ended       bool  `json:"ended"`
		RemainingMs int64 `json:"remaining_ms"`
	}
	if err := json.Unmarshal([]byte(body), &ended); status != 200 || err != nil || !ended.Ended || ended.RemainingMs < 86_000_000 {
		t.Fatalf("end the quarantine: %d %s", status, body)
	}
	for i, r := range []*lockdtest.Lockd{a, b} {
		lockdtest.Eventually(t, func() bool {
			status, _, _ := call(t, "GET", r.URL+"/readyz", "", "")
			return status == 200
		}, 5*time.Second, "/readyz 200 after the end")
		if status, body, _ := call(t, "POST", r.URL+"/v1/locks/after:"+string(rune('a'+i))+"/acquire", writer, `{}`); status != 200 {
			t.Fatalf("acquire after the end: %d %s", status, body)
		}
	}
	var audit string
	for _, line := range strings.Split(a.Logs.String(), "\n") {
		if strings.Contains(line, "restart quarantine ended") {
			audit = line
		}
	}
	if !strings.Contains(audit, `"level":"warn"`) || !strings.Contains(audit, `"actor":"ops"`) ||
		!strings.Contains(audit, `"reason":"the 24 h holder was stopped by hand"`) || strings.Contains(audit, admin) {
		t.Fatalf("the end's log line: %q", audit)
	}
	// Ending none says so.
	status, body, _ = call(t, "POST", b.URL+"/v1/admin/quarantine/end", admin, `{"reason":"again"}`)
	if status != 200 || !strings.Contains(body, `"ended":false`) || !strings.Contains(body, `"remaining_ms":0`) {
		t.Fatalf("end with none on: %d %s", status, body)
	}
}
