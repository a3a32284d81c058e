package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/auth"
	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/lockdtest"
	"github.com/lockd/lockd/internal/redistest"
	"github.com/lockd/lockd/internal/server"
)

const quotaAuth = `
keys:
  - {name: tenant-a, key: ta-key-0123456789ab, scopes: [write], prefixes: ["a:"], max_grants: 5, max_value_bytes: 8100, max_sessions: 2, max_ttl: 10s}
  - {name: tenant-b, key: tb-key-0123456789ab, scopes: [write], prefixes: ["b:"]}
  - {name: tenant-c, key: tc-key-0123456789ab, scopes: [write], prefixes: ["c:"], max_grants: 2}
`

// N22 of the third audit: what one API key keeps in the Redis all tenants
// share is capped per key (live grants, value bytes, sessions, TTL). Over
// a quota the key gets 429 naming it, Redis is not written, and the other
// tenant's acquires go on at 200.
func TestTenantQuotas(t *testing.T) {
	keys, err := auth.Parse([]byte(quotaAuth))
	if err != nil {
		t.Fatal(err)
	}
	f := newFixtureWith(t, redistest.Start(t), func(c *server.Config) { c.Keys = keys })
	ctx := context.Background()
	rdb := f.redis.Client(t)
	const a, b = "ta-key-0123456789ab", "tb-key-0123456789ab"
	post := func(t *testing.T, key, path, body string) (int, map[string]any) {
		t.Helper()
		status, text, _ := call(t, "POST", f.url+path, key, body)
		var m map[string]any
		_ = json.Unmarshal([]byte(text), &m)
		return status, m
	}
	// refused checks a 429 that names what is exhausted and wrote nothing.
	others := 0
	refused := func(t *testing.T, path, body, want string) {
		t.Helper()
		before, _ := rdb.DBSize(ctx).Result()
		status, p := post(t, a, path, body)
		detail, _ := p["detail"].(string)
		if status != 429 || p["code"] != "too_many_requests" || !strings.Contains(detail, want) {
			t.Fatalf("POST %s over the quota: %d %v, want 429 naming %q", path, status, p, want)
		}
		if after, _ := rdb.DBSize(ctx).Result(); after != before {
			t.Fatalf("POST %s over the quota wrote to Redis: %d keys, then %d", path, before, after)
		}
		others++
		if status, p := post(t, b, fmt.Sprintf("/v1/locks/b:other%d/acquire", others), `{"ttl_ms":1000}`); status != 200 {
			t.Fatalf("the other tenant's acquire while tenant-a is at its quota: %d %v", status, p)
		}
	}
	value := fmt.Sprintf(`{"blob":%q}`, strings.Repeat("x", 4000))

	t.Run("grants", func(t *testing.T) {
		// Shared holds of one key, as in the audit: each holder is a grant.
		var tokens []string
		for i := range 4 {
			status, p := post(t, a, "/v1/locks/a:shared/acquire", `{"mode":"shared","ttl_ms":10000}`)
			if status != 200 {
				t.Fatalf("shared hold %d: %d %v", i, status, p)
			}
			tokens = append(tokens, p["token"].(string))
		}
		// A semaphore permit is one more: the fifth and last.
		status, p := post(t, a, "/v1/semaphores/a:sem/acquire", `{"limit":3,"ttl_ms":10000,"owner":"w"}`)
		if status != 200 {
			t.Fatalf("permit: %d %v", status, p)
		}
		permit := p["token"].(string)
		refused(t, "/v1/locks/a:shared/acquire", `{"mode":"shared","ttl_ms":10000}`, "5 live grants of at most 5")
		refused(t, "/v1/elections/a:el/campaign", `{"ttl_ms":10000}`, "live grants")
		if _, err := f.engine.State(ctx, lock.Lock("a:el")); err == nil {
			t.Fatal("the refused campaign left a leadership")
		}
		// Re-entering a live grant and renewing it are no new grants.
		if status, p := post(t, a, "/v1/semaphores/a:sem/acquire", `{"limit":3,"token":"`+permit+`"}`); status != 200 {
			t.Fatalf("re-entry at the quota: %d %v", status, p)
		}
		if status, p := post(t, a, "/v1/locks/a:shared/renew", `{"token":"`+tokens[0]+`"}`); status != 200 {
			t.Fatalf("renewal at the quota: %d %v", status, p)
		}
		// A release makes room.
		if status, p := post(t, a, "/v1/locks/a:shared/release", `{"token":"`+tokens[0]+`"}`); status != 200 {
			t.Fatalf("release: %d %v", status, p)
		}
		if status, p := post(t, a, "/v1/locks/a:next/acquire", `{"ttl_ms":10000}`); status != 200 {
			t.Fatalf("acquire after a release: %d %v", status, p)
		}
		for _, tok := range tokens[1:] {
			post(t, a, "/v1/locks/a:shared/release", `{"token":"`+tok+`"}`)
		}
		post(t, a, "/v1/semaphores/a:sem/release", `{"token":"`+permit+`"}`)
		post(t, a, "/v1/semaphores/a:sem/release", `{"token":"`+permit+`"}`)
	})

	t.Run("idempotent retry at the quota", func(t *testing.T) {
		var tokens []string
		for i := range 3 {
			status, p := post(t, a, fmt.Sprintf("/v1/locks/a:i%d/acquire", i), `{"ttl_ms":10000}`)
			if status != 200 {
				t.Fatalf("acquire: %d %v", status, p)
			}
			tokens = append(tokens, p["token"].(string))
		}
		// a:next from above is the fourth; this one the fifth.
		status, text, _ := callIdem(t, f.url+"/v1/locks/a:idem/acquire", a, "retry-1", `{"ttl_ms":10000}`)
		if status != 200 {
			t.Fatalf("acquire with an Idempotency-Key: %d %s", status, text)
		}
		status, text, h := callIdem(t, f.url+"/v1/locks/a:idem/acquire", a, "retry-1", `{"ttl_ms":10000}`)
		if status != 200 || h.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("its retry at the quota: %d %s, want the replay", status, text)
		}
		for i, tok := range tokens {
			post(t, a, fmt.Sprintf("/v1/locks/a:i%d/release", i), `{"token":"`+tok+`"}`)
		}
	})

	t.Run("value bytes", func(t *testing.T) {
		// 4,011 bytes each: two fit in 8,100, a third does not.
		status, p := post(t, a, "/v1/locks/a:v1/acquire", `{"ttl_ms":10000,"value":`+value+`}`)
		if status != 200 {
			t.Fatalf("first value: %d %v", status, p)
		}
		v1 := p["token"].(string)
		status, p = post(t, a, "/v1/locks/a:v2/acquire", `{"ttl_ms":10000,"value":`+value+`,"mode":"shared"}`)
		if status != 200 {
			t.Fatalf("second value: %d %v", status, p)
		}
		v2 := p["token"].(string)
		refused(t, "/v1/locks/a:v3/acquire", `{"ttl_ms":10000,"value":`+value+`,"mode":"shared"}`, "bytes of values of at most 8100")
		// A renewal that grows a value counts too.
		refused(t, "/v1/locks/a:v2/renew", `{"token":"`+v2+`","value":{"blob":"`+strings.Repeat("y", 4085)+`"}}`, "bytes of values")
		for _, l := range []struct{ key, token string }{{"a:v1", v1}, {"a:v2", v2}} {
			if status, p := post(t, a, "/v1/locks/"+l.key+"/release", `{"token":"`+l.token+`"}`); status != 200 {
				t.Fatalf("release: %d %v", status, p)
			}
		}
	})

	t.Run("sessions", func(t *testing.T) {
		var ids []string
		for range 2 {
			status, p := post(t, a, "/v1/sessions", `{"ttl_ms":10000}`)
			if status != 201 {
				t.Fatalf("session: %d %v", status, p)
			}
			ids = append(ids, p["session"].(string))
		}
		refused(t, "/v1/sessions", `{"ttl_ms":10000}`, "2 sessions of at most 2")
		if status, p := post(t, a, "/v1/sessions/"+ids[0]+"/end", ""); status != 200 {
			t.Fatalf("end: %d %v", status, p)
		}
		if status, p := post(t, a, "/v1/sessions", `{"ttl_ms":10000}`); status != 201 {
			t.Fatalf("a session after one ended: %d %v", status, p)
		}
	})

	t.Run("expiry frees the quota", func(t *testing.T) {
		const c = "tc-key-0123456789ab"
		for _, k := range []string{"c:1", "c:2"} {
			if status, p := post(t, c, "/v1/locks/"+k+"/acquire", `{"ttl_ms":300}`); status != 200 {
				t.Fatalf("acquire %s: %d %v", k, status, p)
			}
		}
		if status, p := post(t, c, "/v1/locks/c:3/acquire", `{"ttl_ms":300}`); status != 429 {
			t.Fatalf("a third grant: %d %v", status, p)
		}
		// Once the grants have expired (nobody released them), the
		// book lets the key grant again.
		lockdtest.Eventually(t, func() bool {
			_, err := f.engine.State(ctx, lock.Lock("c:2"))
			return errors.Is(err, lock.ErrNotFound)
		}, 10*time.Second, "c:2 expired")
		lockdtest.Eventually(t, func() bool {
			status, _ := post(t, c, "/v1/locks/c:3/acquire", `{"ttl_ms":300}`)
			return status == 200
		}, 5*time.Second, "c:3 granted after the expiry")
	})

	t.Run("max_ttl", func(t *testing.T) {
		for _, path := range []string{"/v1/locks/a:long/acquire", "/v1/sessions"} {
			status, p := post(t, a, path, `{"ttl_ms":10001}`)
			if status != 400 || p["field"] != "ttl_ms" || !strings.Contains(p["detail"].(string), "max_ttl") {
				t.Fatalf("POST %s beyond max_ttl: %d %v", path, status, p)
			}
		}
		// The other tenant keeps the server's maximum.
		if status, p := post(t, b, "/v1/locks/b:long/acquire", `{"ttl_ms":3600000}`); status != 200 {
			t.Fatalf("tenant-b's hour: %d %v", status, p)
		}
	})
}

func callIdem(t *testing.T, url, key, idem, body string) (int, string, http.Header) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Idempotency-Key", idem)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b), res.Header
}

// A lock set counts one grant per key against the API key's quota, and its
// release gives them all back.
func TestTenantQuotaLockSets(t *testing.T) {
	keys, err := auth.Parse([]byte(quotaAuth))
	if err != nil {
		t.Fatal(err)
	}
	f := newFixtureWith(t, redistest.Start(t), func(c *server.Config) { c.Keys = keys })
	const c = "tc-key-0123456789ab" // max_grants: 2
	post := func(t *testing.T, path, body string) (int, map[string]any) {
		t.Helper()
		status, text, _ := call(t, "POST", f.url+path, c, body)
		var m map[string]any
		_ = json.Unmarshal([]byte(text), &m)
		return status, m
	}
	if status, p := post(t, "/v1/lock-sets/acquire", `{"keys":["c:1","c:2","c:3"]}`); status != 429 {
		t.Fatalf("a set of 3 keys over a quota of 2 grants: %d %v", status, p)
	}
	status, p := post(t, "/v1/lock-sets/acquire", `{"keys":["c:1","c:2"]}`)
	if status != 200 {
		t.Fatalf("a set of 2 keys: %d %v", status, p)
	}
	if status, p := post(t, "/v1/locks/c:3/acquire", `{}`); status != 429 {
		t.Fatalf("a lone acquire with the set at the quota: %d %v", status, p)
	}
	if status, p := post(t, "/v1/lock-sets/renew", `{"token":"`+p["token"].(string)+`"}`); status != 200 {
		t.Fatalf("the set's renewal at the quota: %d %v", status, p)
	}
	if status, p := post(t, "/v1/lock-sets/release", `{"token":"`+p["token"].(string)+`"}`); status != 200 {
		t.Fatalf("release: %d %v", status, p)
	}
	if status, p := post(t, "/v1/locks/c:3/acquire", `{}`); status != 200 {
		t.Fatalf("a lone acquire after the set's release: %d %v", status, p)
	}
}
