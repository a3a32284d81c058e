package server_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lockd/lockd/api"
	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/lockdtest"
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
