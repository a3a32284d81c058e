package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lockd/lockd/api"
	"github.com/lockd/lockd/internal/auth"
	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/redistest"
	"github.com/lockd/lockd/internal/server"
)

// A lock set in a session over HTTP: every key held as long as the
// session, moved by its renewals, listed by it, and let go by its end
// (as "session") or its lapse; the set's own token cannot let one key go.
func TestLockSetInSessionOverHTTP(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	s := f.createSession(t, 5000)
	id := *s.Session
	keys := []string{"hss:b", "hss:a", "hss:c"}
	acq, err := f.client.AcquireLockSetWithResponse(ctx, api.LockSetRequest{Keys: keys, Session: &id})
	if err != nil || acq.JSON200 == nil {
		t.Fatalf("acquire a set in a session: %v %s", err, acq.Body)
	}
	set := *acq.JSON200
	if set.Owner != "worker-1" || len(set.Leases) != 3 {
		t.Fatalf("set in a session = %s", acq.Body)
	}
	near(t, "the set's expiry and the session's", set.ExpiresAt, s.ExpiresAt, 100*time.Millisecond)
	for _, k := range keys {
		st := f.lockState(t, k)
		if st.Set == nil || *st.Set != 3 || st.Owner != "worker-1" {
			t.Fatalf("state of %s: %+v", k, st)
		}
		near(t, "a key's expiry and the session's", st.ExpiresAt, s.ExpiresAt, 100*time.Millisecond)
	}
	got, err := f.client.GetSessionWithResponse(ctx, id)
	if err != nil || got.JSON200 == nil || len(got.JSON200.Holds) != 3 {
		t.Fatalf("get: %v %s", err, got.Body)
	}

	time.Sleep(200 * time.Millisecond)
	renewed, err := f.client.RenewSessionWithResponse(ctx, id)
	if err != nil || renewed.JSON200 == nil {
		t.Fatalf("renew: %v %s", err, renewed.Body)
	}
	for _, k := range keys {
		near(t, "a key after the session's renewal", f.lockState(t, k).ExpiresAt, renewed.JSON200.ExpiresAt, 100*time.Millisecond)
	}
	// The set's own renewal keeps the session's expiry, whatever it asks.
	ren, err := f.client.RenewLockSetWithResponse(ctx, api.LockSetRenewRequest{Token: set.Token, TtlMs: ptr(int64(60000))})
	if err != nil || ren.JSON200 == nil {
		t.Fatalf("renew the set: %v %s", err, ren.Body)
	}
	near(t, "the set renewed by its token", ren.JSON200.ExpiresAt, renewed.JSON200.ExpiresAt, 100*time.Millisecond)
	rel, _ := f.client.ReleaseLockWithResponse(ctx, "hss:a", api.ReleaseRequest{Token: set.Token})
	var p api.Problem
	if _ = json.Unmarshal(rel.Body, &p); rel.StatusCode() != http.StatusConflict || p.Code != api.ProblemCodeInLockSet {
		t.Fatalf("a lone release of a key of the set: %d %s", rel.StatusCode(), rel.Body)
	}

	ended, err := f.client.EndSessionWithResponse(ctx, id)
	if err != nil || ended.JSON200 == nil || len(ended.JSON200.Holds) != 3 {
		t.Fatalf("end: %v %s", err, ended.Body)
	}
	for _, k := range keys {
		hist, err := f.engine.History(ctx, lock.Lock(k), 1)
		if err != nil || len(hist) != 1 || hist[0].Type != "released" || hist[0].Actor != "session" {
			t.Fatalf("history of %s after the end: %+v, %v", k, hist, err)
		}
		if st, _ := f.client.GetLockWithResponse(ctx, k); st.StatusCode() != http.StatusNotFound {
			t.Fatalf("%s after the session's end: %d %s", k, st.StatusCode(), st.Body)
		}
	}

	// A session nobody renews takes the set with it.
	short := f.createSession(t, 400)
	if r, _ := f.client.AcquireLockSetWithResponse(ctx, api.LockSetRequest{Keys: keys, Session: short.Session}); r.JSON200 == nil {
		t.Fatalf("acquire in the short session: %s", r.Body)
	}
	next, err := f.client.AcquireLockSetWithResponse(ctx, api.LockSetRequest{Keys: keys, Owner: ptr("next"), WaitMs: ptr(int64(5000))})
	if err != nil || next.JSON200 == nil {
		t.Fatalf("a set waiting for the lapse: %v %s", err, next.Body)
	}
	hist, err := f.engine.History(ctx, lock.Lock("hss:c"), 2)
	if err != nil || len(hist) != 2 || hist[1].Actor != "session" || hist[1].Reason != "session expired" {
		t.Fatalf("history of hss:c after the lapse: %+v, %v", hist, err)
	}
}

// near fails the test unless a and b are within d of each other.
func near(t *testing.T, what string, a, b time.Time, d time.Duration) {
	t.Helper()
	if diff := a.Sub(b); diff > d || diff < -d {
		t.Fatalf("%s: %v and %v are %v apart (at most %v)", what, a, b, diff, d)
	}
}

// What a lone acquire refuses with a session, a set refuses alike, naming
// the field; a session of another API key is no session to a set either.
func TestLockSetSessionRefusals(t *testing.T) {
	keys, err := auth.Parse([]byte(tenantsYAML))
	if err != nil {
		t.Fatal(err)
	}
	f := newFixtureWith(t, redistest.Start(t), func(c *server.Config) { c.Keys = keys })
	const ta, tb, admin = "tenant-a-key-0123456789", "tenant-b-key-0123456789", "everyone-key-0123456789"
	status, body, _ := call(t, "POST", f.url+"/v1/sessions", ta, `{"ttl_ms":60000}`)
	var created api.Session
	if err := json.Unmarshal([]byte(body), &created); status != 201 || err != nil || created.Session == nil {
		t.Fatalf("create: %d %s", status, body)
	}
	id := *created.Session
	for _, c := range []struct {
		name, path, key, body string
		status                int
		code                  api.ProblemCode
		field                 string
	}{
		{"ttl_ms", "acquire", ta, `{"keys":["a:1","a:2"],"session":"` + id + `","ttl_ms":1000}`, 400, api.ProblemCodeInvalidRequest, "ttl_ms"},
		{"bad id", "acquire", ta, `{"keys":["a:1","a:2"],"session":"nope"}`, 400, api.ProblemCodeInvalidRequest, "session"},
		{"hold", "hold", ta, `{"keys":["a:1","a:2"],"session":"` + id + `"}`, 400, api.ProblemCodeInvalidRequest, "session"},
		{"unknown", "acquire", ta, `{"keys":["a:1","a:2"],"session":"` + strings.Repeat("x", 32) + `"}`, 404, api.ProblemCodeSessionNotFound, ""},
		{"another key's", "acquire", tb, `{"keys":["b:1","b:2"],"session":"` + id + `"}`, 404, api.ProblemCodeSessionNotFound, ""},
		{"admin", "acquire", admin, `{"keys":["b:1","b:2"],"session":"` + id + `"}`, 404, api.ProblemCodeSessionNotFound, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			status, body, _ := call(t, "POST", f.url+"/v1/lock-sets/"+c.path, c.key, c.body)
			var p api.Problem
			_ = json.Unmarshal([]byte(body), &p)
			if status != c.status || p.Code != c.code || c.field != "" && (p.Field == nil || *p.Field != c.field) || strings.Contains(body, "a:") {
				t.Fatalf("%d %s; want %d %s naming %q", status, body, c.status, c.code, c.field)
			}
		})
	}
	ctx := context.Background()
	for _, k := range []string{"a:1", "a:2", "b:1", "b:2"} {
		if _, err := f.engine.State(ctx, lock.Lock(k)); !errors.Is(err, lock.ErrNotFound) {
			t.Fatalf("%s after the refusals: %v", k, err)
		}
	}
	if status, body, _ := call(t, "POST", f.url+"/v1/lock-sets/acquire", ta, `{"keys":["a:1","a:2"],"session":"`+id+`"}`); status != 200 {
		t.Fatalf("tenant-a's set in its own session: %d %s", status, body)
	}
	status, body, _ = call(t, "GET", f.url+"/v1/sessions/"+id, ta, "")
	var s api.Session
	if err := json.Unmarshal([]byte(body), &s); status != 200 || err != nil || len(s.Holds) != 2 {
		t.Fatalf("tenant-a's session: %d %s", status, body)
	}
}

// A set in a session counts one grant per key against the API key's quota,
// booked in the session: its renewals and the session's book nothing more,
// and the session's end gives them back.
func TestTenantQuotaLockSetInSession(t *testing.T) {
	keys, err := auth.Parse([]byte(quotaAuth))
	if err != nil {
		t.Fatal(err)
	}
	f := newFixtureWith(t, redistest.Start(t), func(c *server.Config) { c.Keys = keys })
	const c = "tc-key-0123456789ab" // max_grants: 2
	post := func(t *testing.T, method, path, body string) (int, map[string]any) {
		t.Helper()
		status, text, _ := call(t, method, f.url+path, c, body)
		var m map[string]any
		_ = json.Unmarshal([]byte(text), &m)
		return status, m
	}
	status, sess := post(t, "POST", "/v1/sessions", `{"ttl_ms":5000}`)
	if status != 201 {
		t.Fatalf("create: %d %v", status, sess)
	}
	id := sess["session"].(string)
	status, set := post(t, "POST", "/v1/lock-sets/acquire", `{"keys":["c:1","c:2"],"session":"`+id+`"}`)
	if status != 200 {
		t.Fatalf("a set of 2 keys in a session: %d %v", status, set)
	}
	atQuota := func(after string) {
		t.Helper()
		if status, p := post(t, "POST", "/v1/locks/c:3/acquire", `{}`); status != 429 {
			t.Fatalf("a lone acquire with the set at the quota, after %s: %d %v", after, status, p)
		}
	}
	atQuota("the set's grant")
	if status, p := post(t, "POST", "/v1/lock-sets/renew", `{"token":"`+set["token"].(string)+`"}`); status != 200 {
		t.Fatalf("the set's renewal: %d %v", status, p)
	}
	atQuota("the set's renewal")
	if status, p := post(t, "POST", "/v1/sessions/"+id+"/renew", ``); status != 200 {
		t.Fatalf("the session's renewal: %d %v", status, p)
	}
	atQuota("the session's renewal")
	if status, p := post(t, "DELETE", "/v1/sessions/"+id, ``); status != 200 {
		t.Fatalf("end: %d %v", status, p)
	}
	if status, p := post(t, "POST", "/v1/locks/c:3/acquire", `{}`); status != 200 {
		t.Fatalf("a lone acquire after the session's end: %d %v", status, p)
	}
}
