package web

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/lock"
)

// confirmForm opens the confirmation page of key and returns its form's
// CSRF token (and, through the client's jar, the cookie) and the fence of
// the lease it shows.
func (e *env) confirmForm(key string) (token, fence string) {
	e.t.Helper()
	p := e.get("/ui/locks/" + key + "/force-release")
	if p.status != http.StatusOK {
		e.t.Fatalf("confirm page: status %d\n%s", p.status, p.body)
	}
	form := p.doc.Find(`form.confirm[method="post"]`)
	if form.AttrOr("action", "") != "/ui/locks/"+key+"/force-release" {
		e.t.Fatalf("form action %q", form.AttrOr("action", ""))
	}
	if form.Find(`label[for="reason"]`).Length() != 1 || form.Find("textarea#reason").Length() != 1 {
		e.t.Fatal("reason field is not labelled")
	}
	token = form.Find(`input[name="csrf"]`).AttrOr("value", "")
	if token == "" {
		e.t.Fatal("no CSRF token in the form")
	}
	fence = form.Find(`input[type="hidden"][name="fence"]`).AttrOr("value", "")
	if fence == "" {
		e.t.Fatal("no fence in the form")
	}
	return token, fence
}

func TestForceRelease_ConfirmThenBreak(t *testing.T) {
	e := newEnv(t)
	l := e.acquire("fr:stuck", "worker-3", 30*time.Second)
	token, fence := e.confirmForm("fr:stuck")
	if fence != itoa(l.Fence) {
		t.Fatalf("form fence %s, want the lease's %d", fence, l.Fence)
	}

	p := e.post("/ui/locks/fr:stuck/force-release", url.Values{"csrf": {token}, "fence": {fence}, "reason": {"  stuck after deploy "}}, nil)
	if p.status != http.StatusOK {
		t.Fatalf("status %d\n%s", p.status, p.body)
	}
	if g := text(p.doc.Find(`[data-testid="notice"]`)); !strings.Contains(g, "worker-3") || !strings.Contains(g, "fence "+itoa(l.Fence)) {
		t.Errorf("outcome %q does not name the broken lease", g)
	}
	if _, held := e.held(lock.Lock("fr:stuck")); held {
		t.Fatal("still held after force-release")
	}
	ev := p.doc.Find(`[data-testid="event"]`).First()
	if g := text(ev.Find(`[data-testid="event-type"]`)); g != "force_released" {
		t.Fatalf("newest event %q, want force_released", g)
	}
	if g := text(ev.Find(`[data-testid="event-actor"]`)); g != "dashboard@127.0.0.1" {
		t.Errorf("actor %q, want dashboard@127.0.0.1", g)
	}
	if g := text(ev.Find(`[data-testid="event-reason"]`)); g != "stuck after deploy" {
		t.Errorf("reason %q", g)
	}

	// Posting again finds nothing to break and says so.
	p = e.post("/ui/locks/fr:stuck/force-release", url.Values{"csrf": {token}, "fence": {fence}}, nil)
	if p.status != http.StatusOK || !strings.Contains(text(p.doc.Find(`[data-testid="notice"]`)), "not held") {
		t.Errorf("second post: status %d, notice %q", p.status, text(p.doc.Find(`[data-testid="notice"]`)))
	}
}

func TestForceRelease_RefusedWithoutValidToken(t *testing.T) {
	e := newEnv(t)
	l := e.acquire("fr:guarded", "worker-4", 30*time.Second)
	path := "/ui/locks/fr:guarded/force-release"
	token, fence := e.confirmForm("fr:guarded")
	other := NewDashboard(e.engine, e.dash.log) // another process: another secret
	for _, tc := range []struct {
		name   string
		token  string
		cookie bool
		header http.Header
	}{
		{name: "no token", cookie: true},
		{name: "wrong token", token: "AAAA", cookie: true},
		{name: "token signed by another process", token: other.csrf.sign("x"), cookie: true},
		{name: "token without its cookie", token: token},
		{name: "cross-site post", token: token, cookie: true, header: http.Header{"Sec-Fetch-Site": {"cross-site"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			jar := e.client.Jar
			if !tc.cookie {
				e.client.Jar = nil
				defer func() { e.client.Jar = jar }()
			}
			form := url.Values{"fence": {fence}, "reason": {"forged"}}
			if tc.token != "" {
				form.Set(csrfField, tc.token)
			}
			p := e.post(path, form, tc.header)
			if p.status != http.StatusForbidden {
				t.Errorf("status %d, want 403", p.status)
			}
			st, held := e.held(lock.Lock("fr:guarded"))
			if !held || st.Fence != l.Fence {
				t.Fatalf("the lock was broken by a refused post (held %v)", held)
			}
		})
	}
}

func TestForceRelease_ReasonTooLong(t *testing.T) {
	e := newEnv(t)
	e.acquire("fr:long", "w", 30*time.Second)
	token, fence := e.confirmForm("fr:long")
	p := e.post("/ui/locks/fr:long/force-release", url.Values{"csrf": {token}, "fence": {fence}, "reason": {strings.Repeat("é", 501)}}, nil)
	if p.status != http.StatusBadRequest || p.doc.Find(`form [data-testid="error"], [data-testid="error"]`).Length() != 1 {
		t.Errorf("status %d\n%s", p.status, p.body)
	}
	if _, held := e.held(lock.Lock("fr:long")); !held {
		t.Error("broken despite a refused reason")
	}
}

// TestForceRelease_IdentityHook shows how an auth layer plugs in: it names
// the actor, and a non-admin sees no button and is refused.
func TestForceRelease_IdentityHook(t *testing.T) {
	e := newEnv(t)
	e.acquire("fr:auth", "w", 30*time.Second)
	e.dash.setIdentify(func(*http.Request) identity { return identity{Actor: "reader", Admin: false} })
	if p := e.get("/"); p.doc.Find(`[data-testid="force-release-link"]`).Length() != 0 {
		t.Error("list offers force-release to a non-admin")
	}
	if p := e.get("/ui/locks/fr:auth"); p.doc.Find(`[data-testid="force-release-link"]`).Length() != 0 {
		t.Error("detail offers force-release to a non-admin")
	}
	if p := e.get("/ui/locks/fr:auth/force-release"); p.status != http.StatusForbidden {
		t.Errorf("confirm page for a non-admin: status %d", p.status)
	}

	e.dash.setIdentify(func(*http.Request) identity { return identity{Actor: "alice", Admin: true} })
	token, fence := e.confirmForm("fr:auth")
	e.dash.setIdentify(func(*http.Request) identity { return identity{Actor: "reader", Admin: false} })
	if p := e.post("/ui/locks/fr:auth/force-release", url.Values{"csrf": {token}, "fence": {fence}}, nil); p.status != http.StatusForbidden {
		t.Errorf("post by a non-admin: status %d", p.status)
	}
	if _, held := e.held(lock.Lock("fr:auth")); !held {
		t.Fatal("a non-admin broke the lock")
	}

	e.dash.setIdentify(func(*http.Request) identity { return identity{Actor: "alice", Admin: true} })
	p := e.post("/ui/locks/fr:auth/force-release", url.Values{"csrf": {token}, "fence": {fence}}, nil)
	if g := text(p.doc.Find(`[data-testid="event"]`).First().Find(`[data-testid="event-actor"]`)); g != "alice" {
		t.Errorf("actor %q, want alice", g)
	}
}

func TestForceRelease_NotHeldConfirmPage(t *testing.T) {
	e := newEnv(t)
	p := e.get("/ui/locks/fr:nobody/force-release")
	if p.status != http.StatusOK || p.doc.Find(`[data-testid="not-held"]`).Length() != 1 || p.doc.Find("form").Length() != 0 {
		t.Errorf("status %d\n%s", p.status, p.body)
	}
}

// TestForceRelease_StaleFenceBreaksNothing: the person confirmed breaking
// one lease; meanwhile its holder released and another worker took the
// lock. Submitting the form must not break the new holder's lease.
func TestForceRelease_StaleFenceBreaksNothing(t *testing.T) {
	e := newEnv(t)
	first := e.acquire("fr:moved", "worker-1", 30*time.Second)
	token, fence := e.confirmForm("fr:moved")
	if _, err := e.engine.Release(context.Background(), lock.Lock("fr:moved"), first.Token, "test"); err != nil {
		t.Fatal(err)
	}
	second := e.acquire("fr:moved", "worker-2", 30*time.Second)

	p := e.post("/ui/locks/fr:moved/force-release", url.Values{"csrf": {token}, "fence": {fence}, "reason": {"stuck"}}, nil)
	if p.status != http.StatusOK {
		t.Errorf("status %d, want 200 (the key's page, after the redirect)", p.status)
	}
	if g := text(p.doc.Find(`[data-testid="notice"]`)); !strings.Contains(g, "The lock changed hands; nothing was broken.") {
		t.Errorf("notice %q", g)
	}
	if p.doc.Find(`[data-testid="notice"].warn`).Length() != 1 {
		t.Error("the notice is not a warning")
	}
	// The page shows the lock as it is now.
	if g := text(p.doc.Find(`[data-testid="state"] [data-testid="owner"]`)); g != "worker-2" {
		t.Errorf("current owner shown %q, want worker-2", g)
	}
	if g := text(p.doc.Find(`[data-testid="state"] [data-testid="fence"]`)); g != itoa(second.Fence) {
		t.Errorf("current fence shown %q, want %d", g, second.Fence)
	}
	if st, held := e.held(lock.Lock("fr:moved")); !held || st.Fence != second.Fence || st.Owner != "worker-2" {
		t.Fatalf("the new holder's lease was broken (held %v, %+v)", held, st)
	}
	if types := eventTypes(p.doc); len(types) > 0 && types[0] == "force_released" {
		t.Errorf("history records a force-release: %v", types)
	}

	// A form without a fence breaks nothing either.
	p = e.post("/ui/locks/fr:moved/force-release", url.Values{"csrf": {token}}, nil)
	if p.status != http.StatusBadRequest {
		t.Errorf("no fence: status %d", p.status)
	}
	if _, held := e.held(lock.Lock("fr:moved")); !held {
		t.Fatal("a form without a fence broke the lock")
	}
}

// F8: the dashboard takes a reason only when the API would. A reason with
// control or format characters would reach `lockd history` as forged rows
// or terminal escapes; it is refused, and nothing is broken.
func TestForceRelease_ReasonValidatedLikeTheAPI(t *testing.T) {
	e := newEnv(t)
	tests := []struct {
		name, reason string
		status       int
		want         string // on the refused page
	}{
		{"escape sequence", "ok \x1b[31mRED\x1b[0m", http.StatusBadRequest, "U+001B"},
		{"newline forges a row", "line1\nFAKE\tROW", http.StatusBadRequest, "U+000A"},
		{"NUL", "a\x00b", http.StatusBadRequest, "U+0000"},
		{"bidi override", "\u202eevil", http.StatusBadRequest, "U+202E"},
		{"invalid UTF-8", "bad \xff", http.StatusBadRequest, "UTF-8"},
		{"too long", strings.Repeat("r", 501), http.StatusBadRequest, "at most 500"},
		{"printable, any script", "déployé — 部署 ✓", http.StatusOK, ""},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			key := "fr:reason" + itoa(int64(i))
			e.acquire(key, "worker", 30*time.Second)
			token, fence := e.confirmForm(key)
			p := e.post("/ui/locks/"+key+"/force-release", url.Values{"csrf": {token}, "fence": {fence}, "reason": {tc.reason}}, nil)
			if p.status != tc.status {
				t.Fatalf("status %d, want %d\n%s", p.status, tc.status, p.body)
			}
			_, held := e.held(lock.Lock(key))
			if tc.status != http.StatusOK {
				if !held {
					t.Fatal("the lease was broken despite the refused reason")
				}
				if g := text(p.doc.Find(`[data-testid="error"]`)); !strings.Contains(g, "reason") || !strings.Contains(g, tc.want) {
					t.Errorf("error %q, want one about the reason mentioning %q", g, tc.want)
				}
				return
			}
			if held {
				t.Fatal("still held after an accepted force-release")
			}
			evs, err := e.engine.History(context.Background(), lock.Lock(key), 1)
			if err != nil || len(evs) != 1 || evs[0].Reason != tc.reason {
				t.Fatalf("history %+v, %v; want the reason %q", evs, err, tc.reason)
			}
		})
	}
}

// TestForceRelease_RedirectsToTheKeysPage: the force-release POST answers
// 303 to the key's page (post/redirect/get), which shows the outcome once;
// a reload shows the key without it and resends nothing (newcomer #20).
func TestForceRelease_RedirectsToTheKeysPage(t *testing.T) {
	e := newEnv(t)
	e.client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	e.acquire("fr:prg", "worker-9", 30*time.Second)
	token, fence := e.confirmForm("fr:prg")
	p := e.post("/ui/locks/fr:prg/force-release", url.Values{"csrf": {token}, "fence": {fence}, "reason": {"stuck"}}, nil)
	if p.status != http.StatusSeeOther || p.header.Get("Location") != "/ui/locks/fr:prg" {
		t.Fatalf("POST: %d to %q, want 303 to the key's page", p.status, p.header.Get("Location"))
	}
	if _, held := e.held(lock.Lock("fr:prg")); held {
		t.Fatal("still held after force-release")
	}
	landed := e.get(p.header.Get("Location"))
	if g := text(landed.doc.Find(`[data-testid="notice"]`)); landed.status != http.StatusOK || !strings.Contains(g, "worker-9") {
		t.Fatalf("the key's page after the redirect: %d, notice %q", landed.status, g)
	}
	reload := e.get(p.header.Get("Location"))
	if n := reload.doc.Find(`[data-testid="notice"]`).Length(); reload.status != http.StatusOK || n != 0 {
		t.Fatalf("reload: %d with %d notices, want the page without the outcome", reload.status, n)
	}
}
