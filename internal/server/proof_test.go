package server_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/lockd/lockd/api"
	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/lockdtest"
	"github.com/lockd/lockd/internal/server"
	"github.com/lockd/lockd/internal/web"
)

// claimOf verifies a proof the server answered for (resource id, token).
func claimOf(t *testing.T, proof *string, resourceID, token string) lock.Claim {
	t.Helper()
	if proof == nil || *proof == "" {
		t.Fatalf("no proof in the answer")
	}
	c, err := lockdtest.Signer().Verify(*proof, resourceID, token, time.Now())
	if err != nil {
		t.Fatalf("the answer's proof: %v", err)
	}
	return c
}

// TestProofsOverHTTP: every grant and renewal answers a proof of the lease
// as it is; renew, release, proclaim, resign and a re-entry take one back;
// a proof, good or bad, changes no answer, and only an over-long one is a
// 400 naming it.
func TestProofsOverHTTP(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	l := f.acquire(t, "pf:a", api.AcquireRequest{Owner: ptr("w1"), TtlMs: ptr(int64(10_000)), Value: ptr(api.Value(`{"n":1}`))})
	c := claimOf(t, l.Proof, "pf:a", l.Token)
	if c.Fence != l.Fence || c.ExpiresMS != l.ExpiresAt.UnixMilli() || c.Owner != "w1" || c.Value != `{"n":1}` || c.Mode != "x" {
		t.Fatalf("grant's claim %+v of %+v", c, l)
	}

	r, err := f.client.RenewLockWithResponse(ctx, "pf:a", api.RenewRequest{Token: l.Token, TtlMs: ptr(int64(20_000)), Proof: l.Proof})
	if err != nil || r.JSON200 == nil {
		t.Fatalf("renew: %v %s", err, r.Body)
	}
	rc := claimOf(t, r.JSON200.Proof, "pf:a", l.Token)
	if *r.JSON200.Proof == *l.Proof || rc.ExpiresMS != r.JSON200.ExpiresAt.UnixMilli() || rc.ExpiresMS <= c.ExpiresMS || rc.Value != `{"n":1}` {
		t.Fatalf("renewal's claim %+v, grant's %+v", rc, c)
	}

	// A proof that does not verify changes nothing on a live lease.
	for _, bad := range []string{"garbage", "!!!", strings.Repeat("A", 512), *l.Proof + "x"} {
		r, err := f.client.RenewLockWithResponse(ctx, "pf:a", api.RenewRequest{Token: l.Token, Proof: &bad})
		if err != nil || r.StatusCode() != 200 {
			t.Fatalf("renew with proof %.12q: %d %s", bad, r.StatusCode(), r.Body)
		}
	}
	status, body, _ := call(t, "POST", f.url+"/v1/locks/pf:a/renew", "", `{"token":"`+l.Token+`","proof":"`+strings.Repeat("A", 513)+`"}`)
	if status != 400 || !strings.Contains(body, `"field":"proof"`) {
		t.Fatalf("an over-long proof: %d %s", status, body)
	}
	status, body, _ = call(t, "POST", f.url+"/v1/locks/pf:a/acquire", "", `{"proof":"`+*l.Proof+`"}`)
	if status != 400 || !strings.Contains(body, `"field":"proof"`) {
		t.Fatalf("a proof without its token: %d %s", status, body)
	}
	re := f.acquire(t, "pf:a", api.AcquireRequest{Token: &l.Token, Proof: r.JSON200.Proof})
	if rc := claimOf(t, re.Proof, "pf:a", l.Token); rc.Count != 2 || rc.Value != `{"n":1}` {
		t.Fatalf("re-entry's claim %+v", rc)
	}
	for range 2 {
		rel, err := f.client.ReleaseLockWithResponse(ctx, "pf:a", api.ReleaseRequest{Token: l.Token, Proof: ptr("garbage")})
		if err != nil || rel.JSON200 == nil {
			t.Fatalf("release with a bad proof: %v %s", err, rel.Body)
		}
	}

	// The lease is gone: with its proof or without, renew and release
	// answer the same 404 as ever.
	var want []string
	for i, proof := range []*string{nil, re.Proof, ptr("garbage")} {
		r, _ := f.client.RenewLockWithResponse(ctx, "pf:a", api.RenewRequest{Token: l.Token, Proof: proof})
		rel, _ := f.client.ReleaseLockWithResponse(ctx, "pf:a", api.ReleaseRequest{Token: l.Token, Proof: proof})
		got := []string{r.Status(), string(r.Body), rel.Status(), string(rel.Body)}
		if i == 0 {
			want = got
			if r.StatusCode() != 404 || rel.StatusCode() != 404 {
				t.Fatalf("a released lease: %v", got)
			}
		} else if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Fatalf("a released lease with proof %.12q: %v, without: %v", *proof, got, want)
		}
	}

	// A permit and a leadership.
	p := f.acquireSem(t, "pf:pool", api.SemaphoreAcquireRequest{Limit: 3})
	if pc := claimOf(t, p.Proof, "sem/pf:pool", p.Token); pc.Mode != "p" || pc.Limit != 3 {
		t.Fatalf("permit's claim %+v", pc)
	}
	ps, err := f.client.RenewSemaphoreWithResponse(ctx, "pf:pool", api.RenewRequest{Token: p.Token, Proof: p.Proof})
	if err != nil || ps.JSON200 == nil {
		t.Fatalf("renew permit: %v %s", err, ps.Body)
	}
	claimOf(t, ps.JSON200.Proof, "sem/pf:pool", p.Token)
	if rel, err := f.client.ReleaseSemaphoreWithResponse(ctx, "pf:pool", api.ReleaseRequest{Token: p.Token, Proof: ps.JSON200.Proof}); err != nil || rel.JSON200 == nil {
		t.Fatalf("release permit: %v %s", err, rel.Body)
	}

	ld, err := f.client.CampaignWithResponse(ctx, "pf:e", nil, api.CampaignRequest{Candidate: ptr("c1")})
	if err != nil || ld.JSON200 == nil {
		t.Fatalf("campaign: %v %s", err, ld.Body)
	}
	lc := claimOf(t, ld.JSON200.Proof, "elect/pf:e", ld.JSON200.Token)
	if lc.Fence != ld.JSON200.Term || lc.Owner != "c1" {
		t.Fatalf("leadership's claim %+v", lc)
	}
	rl, err := f.client.RenewLeadershipWithResponse(ctx, "pf:e", api.RenewRequest{Token: ld.JSON200.Token, Proof: ld.JSON200.Proof})
	if err != nil || rl.JSON200 == nil {
		t.Fatalf("renew leadership: %v %s", err, rl.Body)
	}
	claimOf(t, rl.JSON200.Proof, "elect/pf:e", ld.JSON200.Token)
	pr, err := f.client.ProclaimWithResponse(ctx, "pf:e", api.ProclaimRequest{Token: ld.JSON200.Token, Value: api.Value(`"v2"`), Proof: rl.JSON200.Proof})
	if err != nil || pr.JSON200 == nil {
		t.Fatalf("proclaim: %v %s", err, pr.Body)
	}
	if pc := claimOf(t, pr.JSON200.Proof, "elect/pf:e", ld.JSON200.Token); pc.Value != `"v2"` {
		t.Fatalf("proclaim's claim %+v", pc)
	}
	if rs, err := f.client.ResignWithResponse(ctx, "pf:e", api.ReleaseRequest{Token: ld.JSON200.Token, Proof: ptr("garbage")}); err != nil || rs.JSON200 == nil || !rs.JSON200.Resigned {
		t.Fatalf("resign with a bad proof: %v %s", err, rs.Body)
	}
}

// TestHoldStreamsCarryProofs: the first and every renewed event of /hold
// and campaign/hold carry the lease's proof, each a newer one.
func TestHoldStreamsCarryProofs(t *testing.T) {
	f := newFixture(t)
	for _, tc := range []struct{ path, resourceID, first string }{
		{"/v1/locks/pf:h/hold", "pf:h", "acquired"},
		{"/v1/elections/pf:h/campaign/hold", "elect/pf:h", "leader"},
	} {
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, f.url+tc.path, strings.NewReader(`{"ttl_ms":300}`))
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil || res.StatusCode != 200 {
			t.Fatalf("%s: %v", tc.path, err)
		}
		events := make(chan sse, 16)
		go readEvents(res.Body, events)
		var seen []string
		for len(seen) < 3 {
			var ev sse
			select {
			case ev = <-events:
			case <-time.After(3 * time.Second):
				t.Fatalf("%s: no event in 3 s", tc.path)
			}
			var l struct {
				Token string  `json:"token"`
				Proof *string `json:"proof"`
			}
			if err := json.Unmarshal([]byte(ev.data), &l); err != nil || (len(seen) == 0) != (ev.event == tc.first) {
				t.Fatalf("%s: event %+v", tc.path, ev)
			}
			claimOf(t, l.Proof, tc.resourceID, l.Token)
			if len(seen) > 0 && seen[len(seen)-1] == *l.Proof {
				t.Fatalf("%s: a renewal answered the same proof", tc.path)
			}
			seen = append(seen, *l.Proof)
		}
		cancel()
		res.Body.Close()
	}
}

// TestProofsStayWithTheHolder: a held key's state, history, events and
// dashboard pages, and the server's log, never show its proof.
func TestProofsStayWithTheHolder(t *testing.T) {
	ld := lockdtest.Start(t, lockdtest.Options{Dashboard: func(e *lock.Engine, log zerolog.Logger) server.Dashboard {
		return web.NewDashboard(e, log)
	}})
	_, events := openEvents(t, ld.URL+"/v1/events?prefix=pf:", "", "")
	c, err := api.NewClientWithResponses(ld.URL)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	a, err := c.AcquireLockWithResponse(ctx, "pf:held", nil, api.AcquireRequest{Owner: ptr("w"), Value: ptr(api.Value(`"v"`))})
	if err != nil || a.JSON200 == nil {
		t.Fatalf("acquire: %v", err)
	}
	r, err := c.RenewLockWithResponse(ctx, "pf:held", api.RenewRequest{Token: a.JSON200.Token, Proof: a.JSON200.Proof})
	if err != nil || r.JSON200 == nil {
		t.Fatalf("renew: %v", err)
	}
	sem, err := c.AcquireSemaphoreWithResponse(ctx, "pf:held", nil, api.SemaphoreAcquireRequest{Limit: 2})
	if err != nil || sem.JSON200 == nil {
		t.Fatalf("acquire semaphore: %v", err)
	}
	proofs := []string{*a.JSON200.Proof, *r.JSON200.Proof, *sem.JSON200.Proof}
	if ev := events.next(t); ev.event != "acquired" || strings.Contains(ev.raw, proofs[0]) {
		t.Fatalf("event %+v", ev)
	}
	pages := map[string]string{}
	for _, path := range []string{
		"/v1/locks/pf:held", "/v1/locks/pf:held/history", "/v1/locks/pf:held/history?type=renewed", "/v1/locks?prefix=pf:",
		"/v1/semaphores/pf:held", "/v1/semaphores?prefix=pf:",
		"/", "/ui/locks/pf:held", "/ui/fragments/locks/pf:held", "/ui/semaphores/pf:held",
	} {
		res, err := http.Get(ld.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 200 || !strings.Contains(string(b), "pf:held") {
			t.Fatalf("%s: %d %.200s", path, res.StatusCode, b)
		}
		pages[path] = string(b)
	}
	pages["log"] = ld.Logs.String()
	for where, text := range pages {
		for _, p := range proofs {
			if strings.Contains(text, p) || strings.Contains(text, p[:24]) {
				t.Fatalf("a proof in %s", where)
			}
		}
	}
}
