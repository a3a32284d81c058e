package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lockd/lockd/api"
	"github.com/lockd/lockd/internal/auth"
	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/lockdtest"
	"github.com/lockd/lockd/internal/redistest"
	"github.com/lockd/lockd/internal/server"
)

func (f *fixture) createSession(t *testing.T, ttlMs int64) api.Session {
	t.Helper()
	res, err := f.client.CreateSessionWithResponse(context.Background(), api.SessionRequest{Owner: ptr("worker-1"), TtlMs: &ttlMs})
	if err != nil || res.JSON201 == nil || res.JSON201.Session == nil {
		t.Fatalf("create session: %v %s", err, res.Body)
	}
	return *res.JSON201
}

// A session over HTTP: grants of every kind in it, listed, renewed with
// it, released by its end as "session".
func TestSessionsOverHTTP(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	s := f.createSession(t, 5000)
	id := *s.Session
	if s.Owner != "worker-1" || s.TtlMs != 5000 || len(s.Holds) != 0 {
		t.Fatalf("created %+v", s)
	}

	l := f.acquire(t, "sess:a", api.AcquireRequest{Session: &id})
	if d := l.ExpiresAt.Sub(s.ExpiresAt); d > 100*time.Millisecond || d < -100*time.Millisecond {
		t.Fatalf("the grant expires at %v, the session at %v", l.ExpiresAt, s.ExpiresAt)
	}
	f.acquireSem(t, "sess:pool", api.SemaphoreAcquireRequest{Limit: 2, Session: &id})
	f.campaign(t, "sess:leader", api.CampaignRequest{Session: &id})

	got, err := f.client.GetSessionWithResponse(ctx, id)
	if err != nil || got.JSON200 == nil || len(got.JSON200.Holds) != 3 || got.JSON200.Session != nil {
		t.Fatalf("get: %v %s", err, got.Body)
	}

	time.Sleep(200 * time.Millisecond)
	renewed, err := f.client.RenewSessionWithResponse(ctx, id)
	if err != nil || renewed.JSON200 == nil || !renewed.JSON200.ExpiresAt.After(s.ExpiresAt.Add(150*time.Millisecond)) {
		t.Fatalf("renew: %v %s", err, renewed.Body)
	}
	if st := f.lockState(t, "sess:a"); st.ExpiresAt.Before(renewed.JSON200.ExpiresAt.Add(-100 * time.Millisecond)) {
		t.Fatalf("the grant after the session's renewal: %+v", st)
	}

	ended, err := f.client.EndSessionWithResponse(ctx, id)
	if err != nil || ended.JSON200 == nil || len(ended.JSON200.Holds) != 3 {
		t.Fatalf("end: %v %s", err, ended.Body)
	}
	hist, err := f.engine.History(ctx, lock.Lock("sess:a"), 1)
	if err != nil || len(hist) != 1 || hist[0].Type != "released" || hist[0].Actor != "session" {
		t.Fatalf("history after the end: %+v, %v", hist, err)
	}
	f.acquire(t, "sess:a", api.AcquireRequest{})
	f.campaign(t, "sess:leader", api.CampaignRequest{})

	for name, call := range map[string]func() (int, []byte){
		"get": func() (int, []byte) { r, _ := f.client.GetSessionWithResponse(ctx, id); return r.StatusCode(), r.Body },
		"renew": func() (int, []byte) {
			r, _ := f.client.RenewSessionWithResponse(ctx, id)
			return r.StatusCode(), r.Body
		},
		"end": func() (int, []byte) {
			r, _ := f.client.EndSessionPostWithResponse(ctx, id)
			return r.StatusCode(), r.Body
		},
		"acquire": func() (int, []byte) {
			r, _ := f.client.AcquireLockWithResponse(ctx, "sess:b", nil, api.AcquireRequest{Session: &id})
			return r.StatusCode(), r.Body
		},
	} {
		status, body := call()
		var p api.Problem
		_ = json.Unmarshal(body, &p)
		if status != http.StatusNotFound || p.Code != api.ProblemCodeSessionNotFound {
			t.Errorf("%s of an ended session: %d %s", name, status, body)
		}
	}
}

// Bad session input is a 400 that names the field; an unknown session a
// 404; a hold cannot be in a session.
func TestSessionBadInput(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	id := *f.createSession(t, 5000).Session
	unknown := strings.Repeat("A", 32)
	cases := []struct {
		name   string
		method string
		path   string
		body   string
		status int
		field  string
		code   api.ProblemCode
	}{
		{"ttl and session", "POST", "/v1/locks/k/acquire", `{"session":"` + id + `","ttl_ms":1000}`, 400, "ttl_ms", api.ProblemCodeInvalidRequest},
		{"short session id", "POST", "/v1/locks/k/acquire", `{"session":"abc"}`, 400, "session", api.ProblemCodeInvalidRequest},
		{"session of a number", "POST", "/v1/locks/k/acquire", `{"session":5}`, 400, "session", api.ProblemCodeInvalidRequest},
		{"unknown session", "POST", "/v1/locks/k/acquire", `{"session":"` + unknown + `"}`, 404, "", api.ProblemCodeSessionNotFound},
		{"hold in a session", "POST", "/v1/locks/k/hold", `{"session":"` + id + `"}`, 400, "session", api.ProblemCodeInvalidRequest},
		{"bad id", "GET", "/v1/sessions/not-an-id", "", 400, "id", api.ProblemCodeInvalidRequest},
		{"unknown id", "POST", "/v1/sessions/" + unknown + "/renew", "", 404, "", api.ProblemCodeSessionNotFound},
		{"short ttl", "POST", "/v1/sessions", `{"ttl_ms":50}`, 400, "ttl_ms", api.ProblemCodeInvalidRequest},
		{"unknown field", "POST", "/v1/sessions", `{"ttl":5000}`, 400, "ttl", api.ProblemCodeInvalidRequest},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req, _ := http.NewRequestWithContext(ctx, c.method, f.url+c.path, strings.NewReader(c.body))
			if c.body != "" {
				req.Header.Set("Content-Type", "application/json")
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			p := problemOf(t, res, body)
			if res.StatusCode != c.status || p.Code != c.code || (c.field != "" && (p.Field == nil || *p.Field != c.field)) {
				t.Fatalf("%d %s", res.StatusCode, body)
			}
		})
	}
}

// A session held by a connection lives past its TTL while the connection
// stays open, and ends, releasing its grants, the moment it closes.
func TestSessionHold(t *testing.T) {
	f := newFixture(t)
	s := f.createSession(t, 600)
	id := *s.Session
	f.acquire(t, "sh:a", api.AcquireRequest{Session: &id})

	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, f.url+"/v1/sessions/"+id+"/hold", nil)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != 200 {
		b, _ := io.ReadAll(res.Body)
		t.Fatalf("hold: %d %s", res.StatusCode, b)
	}
	events := make(chan sse, 16)
	go readEvents(res.Body, events)
	renewals := 0
	for deadline := time.After(1500 * time.Millisecond); renewals < 5; {
		select {
		case ev := <-events:
			if ev.event != "renewed" || strings.Contains(ev.data, id) {
				t.Fatalf("event %q: %s", ev.event, ev.data)
			}
			renewals++
		case <-deadline:
			t.Fatalf("%d renewals in 1.5 s of a 600 ms session", renewals)
		}
	}
	// Past the session's first expiry the grant lives.
	if st := f.lockState(t, "sh:a"); st.Fence == 0 || time.Until(st.ExpiresAt) < 200*time.Millisecond {
		t.Fatalf("the grant after %d renewals: %+v", renewals, st)
	}
	cancel()
	res.Body.Close()
	lockdtest.Eventually(t, func() bool {
		_, err := f.engine.State(context.Background(), lock.Lock("sh:a"))
		return err == lock.ErrNotFound
	}, 2*time.Second, "the grant released when the hold closed")
	hist, err := f.engine.History(context.Background(), lock.Lock("sh:a"), 1)
	if err != nil || hist[0].Type != "released" || hist[0].Actor != "session" {
		t.Fatalf("history after the hold closed: %+v, %v", hist, err)
	}
}

// A session's id is a secret like a token: it appears in no log line, no
// metric, no state, history or session read.
func TestSessionIDStaysSecret(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	id := *f.createSession(t, 5000).Session
	f.acquire(t, "sess:secret", api.AcquireRequest{Session: &id, Owner: ptr("w")})
	f.acquireSem(t, "sess:secret", api.SemaphoreAcquireRequest{Limit: 2, Session: &id})
	var texts []string
	for _, call := range []func() ([]byte, error){
		func() ([]byte, error) { r, err := f.client.GetSessionWithResponse(ctx, id); return r.Body, err },
		func() ([]byte, error) { r, err := f.client.RenewSessionWithResponse(ctx, id); return r.Body, err },
		func() ([]byte, error) { r, err := f.client.GetLockWithResponse(ctx, "sess:secret"); return r.Body, err },
		func() ([]byte, error) {
			r, err := f.client.GetSemaphoreWithResponse(ctx, "sess:secret")
			return r.Body, err
		},
		func() ([]byte, error) {
			r, err := f.client.GetLockHistoryWithResponse(ctx, "sess:secret", nil)
			return r.Body, err
		},
		func() ([]byte, error) { r, err := f.client.EndSessionWithResponse(ctx, id); return r.Body, err },
		func() ([]byte, error) { _, b, err := do(http.MethodGet, f.url+"/metrics", "", ""); return b, err },
	} {
		b, err := call()
		if err != nil {
			t.Fatal(err)
		}
		texts = append(texts, string(b))
	}
	texts = append(texts, f.logs.String())
	if !strings.Contains(f.logs.String(), `"route":"/v1/sessions/{id}/renew"`) {
		t.Fatalf("the access log lacks the session's route:\n%s", f.logs.String())
	}
	for i, text := range texts {
		if strings.Contains(text, id) || strings.Contains(text, id[:16]) {
			t.Fatalf("the session id appears in answer %d:\n%s", i, text)
		}
	}
}

const tenantsYAML = `
keys:
  - name: tenant-a
    key: "tenant-a-key-0123456789"
    scopes: [write]
    prefixes: ["a:"]
  - name: tenant-b
    key: "tenant-b-key-0123456789"
    scopes: [write]
    prefixes: ["b:"]
  - name: everyone
    key: "everyone-key-0123456789"
    scopes: [admin]
`

// A session belongs to the API key that made it (N20): to another key,
// even an admin key, its id names no session. Every session operation,
// and every "session" on an acquire, a shared hold, a permit or a
// campaign, answers 404 session_not_found and changes nothing: the
// session is not renewed, ended or given grants, and what it holds stays
// held and unlisted to others.
func TestSessionBelongsToItsAPIKey(t *testing.T) {
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
	inSession := `{"session":"` + id + `"}`
	for _, c := range []struct{ path, body string }{
		{"/v1/locks/a:s1/acquire", inSession},
		{"/v1/locks/a:shared/acquire", `{"session":"` + id + `","mode":"shared"}`},
		{"/v1/semaphores/a:sem/acquire", `{"session":"` + id + `","limit":2}`},
		{"/v1/elections/a:sel/campaign", inSession},
	} {
		if status, body, _ := call(t, "POST", f.url+c.path, ta, c.body); status != 200 {
			t.Fatalf("tenant-a %s: %d %s", c.path, status, body)
		}
	}
	ownHolds := func() api.Session {
		t.Helper()
		status, body, _ := call(t, "GET", f.url+"/v1/sessions/"+id, ta, "")
		var s api.Session
		if err := json.Unmarshal([]byte(body), &s); status != 200 || err != nil {
			t.Fatalf("tenant-a GET: %d %s", status, body)
		}
		return s
	}
	before := ownHolds()

	for _, key := range []struct{ name, key string }{{"tenant-b", tb}, {"admin", admin}} {
		for _, c := range []struct{ name, method, path, body string }{
			{"get", "GET", "/v1/sessions/" + id, ""},
			{"renew", "POST", "/v1/sessions/" + id + "/renew", ""},
			{"hold", "POST", "/v1/sessions/" + id + "/hold", ""},
			{"acquire", "POST", "/v1/locks/b:s2/acquire", inSession},
			{"shared hold", "POST", "/v1/locks/b:shared/acquire", `{"session":"` + id + `","mode":"shared"}`},
			{"permit", "POST", "/v1/semaphores/b:sem/acquire", `{"session":"` + id + `","limit":2}`},
			{"campaign", "POST", "/v1/elections/b:sel/campaign", inSession},
			{"end", "POST", "/v1/sessions/" + id + "/end", ""},
			{"delete", "DELETE", "/v1/sessions/" + id, ""},
		} {
			status, body, _ := call(t, c.method, f.url+c.path, key.key, c.body)
			var p api.Problem
			_ = json.Unmarshal([]byte(body), &p)
			if status != http.StatusNotFound || p.Code != api.ProblemCodeSessionNotFound || strings.Contains(body, "a:") {
				t.Errorf("%s %s of tenant-a's session: %d %s", key.name, c.name, status, body)
			}
		}
	}

	after := ownHolds()
	if !after.ExpiresAt.Equal(before.ExpiresAt) || len(after.Holds) != 4 || len(before.Holds) != 4 {
		t.Fatalf("tenant-a's session before the other keys' calls: %+v\nafter: %+v", before, after)
	}
	for _, h := range after.Holds {
		if !strings.HasPrefix(h.Key, "a:") {
			t.Errorf("tenant-a's session holds %s", h.Key)
		}
	}
	ctx := context.Background()
	for _, res := range []lock.Resource{lock.Lock("a:s1"), lock.Lock("a:shared"), lock.Semaphore("a:sem"), lock.Election("a:sel")} {
		if _, err := f.engine.State(ctx, res); err != nil {
			t.Errorf("%s after the other keys' calls: %v", res, err)
		}
	}
	for _, res := range []lock.Resource{lock.Lock("b:s2"), lock.Lock("b:shared"), lock.Semaphore("b:sem"), lock.Election("b:sel")} {
		if _, err := f.engine.State(ctx, res); !errors.Is(err, lock.ErrNotFound) {
			t.Errorf("%s was granted in tenant-a's session: %v", res, err)
		}
	}
	// Its own key still renews and ends it.
	if status, body, _ := call(t, "POST", f.url+"/v1/sessions/"+id+"/renew", ta, ""); status != 200 {
		t.Fatalf("tenant-a renew: %d %s", status, body)
	}
	if status, body, _ := call(t, "DELETE", f.url+"/v1/sessions/"+id, ta, ""); status != 200 {
		t.Fatalf("tenant-a end: %d %s", status, body)
	}
	if _, err := f.engine.State(ctx, lock.Lock("a:s1")); !errors.Is(err, lock.ErrNotFound) {
		t.Fatalf("a:s1 after tenant-a ended its session: %v", err)
	}
}

// A request that a grant bound to a session step aside reaches its holder
// the way the session is kept: in the renew answer's hold, and as a
// release_requested event of the session's hold stream (once).
func TestSessionHearsReleaseRequests(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	s := f.createSession(t, 900)
	id := *s.Session
	f.acquire(t, "shr:asked", api.AcquireRequest{Session: &id})
	f.acquire(t, "shr:quiet", api.AcquireRequest{Session: &id})

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, f.url+"/v1/sessions/"+id+"/hold", nil)
	res, err := http.DefaultClient.Do(req)
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("hold: %v", err)
	}
	defer res.Body.Close()
	events := make(chan sse, 64)
	go readEvents(res.Body, events)
	if ev := <-events; ev.event != "renewed" || strings.Contains(ev.data, "release_requested") {
		t.Fatalf("first event %q: %s", ev.event, ev.data)
	}

	rr, err := f.client.RequestReleaseLockWithResponse(ctx, "shr:asked", api.RequestReleaseLockJSONRequestBody{By: ptr("ops"), Reason: ptr("rerun")})
	if err != nil || rr.StatusCode() != http.StatusAccepted {
		t.Fatalf("request-release: %v %s", err, rr.Body)
	}
	renewed, err := f.client.RenewSessionWithResponse(ctx, id)
	if err != nil || renewed.JSON200 == nil {
		t.Fatalf("renew: %v %s", err, renewed.Body)
	}
	asked := 0
	for _, h := range renewed.JSON200.Holds {
		switch {
		case h.Key == "shr:asked" && h.ReleaseRequested != nil && h.ReleaseRequested.By == "ops" && h.ReleaseRequested.Reason == "rerun":
			asked++
		case h.ReleaseRequested != nil:
			t.Fatalf("hold %s carries a request: %+v", h.Key, h.ReleaseRequested)
		}
	}
	if asked != 1 {
		t.Fatalf("the renew answer's holds: %s", renewed.Body)
	}

	// The hold stream tells it once, after a renewal; later renewals
	// carry it in their session but send no second event.
	told, renewals := 0, 0
	for deadline := time.After(10 * time.Second); renewals < 4; {
		select {
		case ev := <-events:
			switch ev.event {
			case "renewed":
				if told > 0 {
					renewals++
				}
			case "release_requested":
				var h api.SessionHold
				if err := json.Unmarshal([]byte(ev.data), &h); err != nil || h.Key != "shr:asked" || h.Kind != "lock" ||
					h.ReleaseRequested == nil || h.ReleaseRequested.By != "ops" {
					t.Fatalf("release_requested event: %s (%v)", ev.data, err)
				}
				told++
			default:
				t.Fatalf("event %q: %s", ev.event, ev.data)
			}
		case <-deadline:
			t.Fatalf("%d release_requested events and %d renewals after it within 10 s", told, renewals)
		}
	}
	if told != 1 {
		t.Fatalf("%d release_requested events; want 1", told)
	}
}
