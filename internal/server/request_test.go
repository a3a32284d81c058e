package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lockd/lockd/api"
	"github.com/lockd/lockd/internal/auth"
	"github.com/lockd/lockd/internal/lockdtest"
	"github.com/lockd/lockd/internal/server"
)

// POST /v1/locks/{key}/request-release: 202 naming the holder asked; the
// holder's renewals answer release_requested {by, reason, at}, the state
// shows it, the event stream has a release_requested event (never a
// token); bad input is 400 naming the field, a free key 404, another
// fence 409 lease_lost, shared holders 409 not_exclusive.
func TestRequestRelease(t *testing.T) {
	keys, err := auth.Parse([]byte(eventsAuth))
	if err != nil {
		t.Fatal(err)
	}
	ld := lockdtest.Start(t, lockdtest.Options{Configure: func(c *server.Config) { c.Keys = keys }})
	f := newEvFixture(t, ld, "ops-key-0123456789")
	const admin = "ops-key-0123456789"
	_, s := openEvents(t, ld.URL+"/v1/events?key=rq:1", "ops-key-0123456789", "")

	l := f.acquire(t, "rq:1", api.AcquireRequest{Owner: ptr("w1")})
	shared := api.LockModeShared
	f.acquire(t, "rq:s", api.AcquireRequest{Owner: ptr("r1"), Mode: &shared})
	for _, tc := range []struct {
		name, key, body string
		status          int
		code, field     string
	}{
		{"bad by", "rq:1", `{"by":""}`, 400, "invalid_request", "by"},
		{"long reason", "rq:1", `{"reason":"` + strings.Repeat("x", 501) + `"}`, 400, "invalid_request", "reason"},
		{"bad fence", "rq:1", `{"fence":-1}`, 400, "invalid_request", "fence"},
		{"another fence", "rq:1", `{"fence":1}`, 409, "lease_lost", ""},
		{"free key", "rq:none", `{}`, 404, "not_found", ""},
		{"shared holders", "rq:s", `{}`, 409, "not_exclusive", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body, _ := call(t, "POST", ld.URL+"/v1/locks/"+tc.key+"/request-release", admin, tc.body)
			var p api.Problem
			_ = json.Unmarshal([]byte(body), &p)
			if status != tc.status || string(p.Code) != tc.code || (tc.field != "" && (p.Field == nil || *p.Field != tc.field)) {
				t.Fatalf("%d %s, want %d %s field %q", status, body, tc.status, tc.code, tc.field)
			}
		})
	}

	status, body, _ := call(t, "POST", ld.URL+"/v1/locks/rq:1/request-release", admin, `{"by":"deploy-42","reason":"the deploy needs it"}`)
	var got api.RequestReleaseResult
	if err := json.Unmarshal([]byte(body), &got); err != nil || status != http.StatusAccepted || got.Owner != "w1" || got.Fence != l.Fence {
		t.Fatalf("request-release: %d %s", status, body)
	}
	res, err := f.c.RenewLockWithResponse(context.Background(), "rq:1", api.RenewRequest{Token: l.Token})
	if err != nil || res.JSON200 == nil {
		t.Fatalf("renew: %v %s", err, res.Body)
	}
	rq := res.JSON200.ReleaseRequested
	if rq == nil || rq.By != "deploy-42" || rq.Reason != "the deploy needs it" || !rq.At.Equal(got.RequestedAt) {
		t.Fatalf("renew answer: %s", res.Body)
	}
	if st := f.state(t, "rq:1"); st.ReleaseRequested == nil || st.ReleaseRequested.By != "deploy-42" {
		t.Fatalf("state: %+v", st.ReleaseRequested)
	}
	if ev := s.next(t); ev.event != "acquired" {
		t.Fatalf("first event %+v", ev)
	}
	ev := s.next(t)
	if ev.event != "release_requested" || ev.data["owner"] != "w1" || ev.data["actor"] != "ops" || ev.data["reason"] != "the deploy needs it" ||
		strings.Contains(ev.raw, l.Token) {
		t.Fatalf("event %+v", ev)
	}
}

// A hold stream gets one release_requested event per request, after the
// renewal that learnt of it (within ttl/3), and keeps holding: the
// holder decides.
func TestHoldStreamReleaseRequested(t *testing.T) {
	ld := lockdtest.Start(t, lockdtest.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, ld.URL+"/v1/locks/rq:hold/hold", strings.NewReader(`{"ttl_ms":600,"owner":"h"}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	events := make(chan string, 100)
	go func() {
		defer close(events)
		sc := bufio.NewScanner(resp.Body)
		var event string
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				event = line[7:]
			case strings.HasPrefix(line, "data: "):
				events <- event + " " + line[6:]
			}
		}
	}()
	next := func() string {
		t.Helper()
		select {
		case e, ok := <-events:
			if !ok {
				t.Fatal("the hold stream ended")
			}
			return e
		case <-time.After(10 * time.Second):
			t.Fatal("no event within 10 s")
		}
		return ""
	}
	if e := next(); !strings.HasPrefix(e, "acquired ") {
		t.Fatalf("first event %s", e)
	}
	status, body, _ := call(t, "POST", ld.URL+"/v1/locks/rq:hold/request-release", "", `{"by":"ops","reason":"step aside"}`)
	if status != http.StatusAccepted {
		t.Fatalf("request-release: %d %s", status, body)
	}
	last := next()
	for strings.HasPrefix(last, "renewed ") {
		last = next()
	}
	if !strings.HasPrefix(last, "release_requested ") || !strings.Contains(last, `"by":"ops"`) || !strings.Contains(last, `"reason":"step aside"`) {
		t.Fatalf("event %s", last)
	}
	// Later renewals answer the same request: no second event.
	for range 3 {
		if e := next(); !strings.HasPrefix(e, "renewed ") {
			t.Fatalf("after the request: %s", e)
		}
	}
}
