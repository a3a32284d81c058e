package web

import (
	"crypto/tls"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/rs/zerolog"

	"github.com/lockd/lockd/internal/auth"
	"github.com/lockd/lockd/internal/authlimit"
	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/lockdtest"
	"github.com/lockd/lockd/internal/redistest"
	"github.com/lockd/lockd/internal/server"
)

// The API keys of the auth tests. Each must be at least 16 characters.
const (
	opsKey    = "ops-admin-key-0123456789"
	viewerKey = "viewer-read-key-0123456789"
	ciKey     = "ci-write-key-0123456789"
	multiKey  = "multi-read-key-0123456789"
	secret    = "session-secret-for-tests-0123456789abcdef"
)

const keysYAML = `
keys:
  - {name: ops, key: "` + opsKey + `", scopes: [admin]}
  - {name: viewer, key: "` + viewerKey + `", scopes: [read]}
  - {name: ci, key: "` + ciKey + `", scopes: [write], prefixes: ["ci:"]}
  - {name: multi, key: "` + multiKey + `", scopes: [read], prefixes: ["ci:", "deploy:"]}
`

func mustKeys(t *testing.T, yaml string) *auth.Keyring {
	t.Helper()
	k, err := auth.Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// newAuthEnv is newEnv with API keys: the dashboard behind its sign-in.
// Its client keeps cookies but does not follow redirects, so tests see
// each 303.
func newAuthEnv(t *testing.T) (*env, *lockdtest.Buffer) {
	t.Helper()
	return newAuthEnvLimited(t, authlimit.New(authlimit.DefaultBurst, authlimit.DefaultRefill))
}

// newAuthEnvLimited is newAuthEnv whose API and sign-in share unknownKeys,
// as in lockd serve.
func newAuthEnvLimited(t *testing.T, unknownKeys *authlimit.Limiter) (*env, *lockdtest.Buffer) {
	t.Helper()
	keys := mustKeys(t, keysYAML)
	var dash *Dashboard
	ld := lockdtest.Start(t, lockdtest.Options{
		Configure: func(c *server.Config) { c.Keys, c.UnknownKeys = keys, unknownKeys },
		Dashboard: func(e *lock.Engine, log zerolog.Logger) server.Dashboard {
			dash = NewDashboard(e, log)
			if err := dash.RequireLogin(Login{Keys: keys, Secret: []byte(secret), UnknownKeys: unknownKeys}); err != nil {
				t.Fatal(err)
			}
			return dash
		},
	})
	e := newClientEnv(t, ld, dash)
	e.client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return e, ld.Logs
}

// loginForm opens the sign-in page and returns its CSRF token.
func (e *env) loginForm(next string) string {
	e.t.Helper()
	path := "/ui/login"
	if next != "" {
		path += "?next=" + url.QueryEscape(next)
	}
	p := e.get(path)
	if p.status != http.StatusOK {
		e.t.Fatalf("GET %s: %d", path, p.status)
	}
	return p.doc.Find(`form.login input[name="csrf"]`).AttrOr("value", "")
}

// login signs in with key and returns the response to the form's post.
func (e *env) login(key, next string) page {
	e.t.Helper()
	token := e.loginForm(next)
	return e.post("/ui/login", url.Values{"csrf": {token}, "key": {key}, "next": {next}}, nil)
}

// mustLogin signs in with key and fails unless it worked.
func (e *env) mustLogin(key string) {
	e.t.Helper()
	if p := e.login(key, ""); p.status != http.StatusSeeOther {
		e.t.Fatalf("sign-in: status %d\n%s", p.status, p.body)
	}
}

func (e *env) sessionCookie() *http.Cookie {
	u, _ := url.Parse(e.ts.URL + "/")
	for _, c := range e.client.Jar.Cookies(u) {
		if c.Name == sessionCookie {
			return c
		}
	}
	return nil
}

func setCookie(t *testing.T, h http.Header, name string) *http.Cookie {
	t.Helper()
	for _, c := range (&http.Response{Header: h}).Cookies() {
		if c.Name == name {
			return c
		}
	}
	return nil
}

func TestAuth_EveryPageNeedsSignIn(t *testing.T) {
	e, _ := newAuthEnv(t)
	e.acquire("ci:build", "w", 30*time.Second)
	for path, want := range map[string]string{
		"/":                                "/ui/login",
		"/?prefix=ci%3A":                   "/ui/login?next=%2F%3Fprefix%3Dci%253A",
		"/ui/locks/ci:build":               "/ui/login?next=%2Fui%2Flocks%2Fci%3Abuild",
		"/ui/locks/ci:build/force-release": "/ui/login?next=%2Fui%2Flocks%2Fci%3Abuild%2Fforce-release",
		"/ui/fragments/locks":              "/ui/login?next=%2Fui%2Ffragments%2Flocks",
		"/ui/fragments/locks/ci:build":     "/ui/login?next=%2Fui%2Ffragments%2Flocks%2Fci%3Abuild",
	} {
		p := e.get(path)
		if p.status != http.StatusSeeOther || p.header.Get("Location") != want {
			t.Errorf("GET %s: %d to %q, want 303 to %q", path, p.status, p.header.Get("Location"), want)
		}
		if strings.Contains(p.body, "ci:build</") {
			t.Errorf("GET %s shows a lock without a session", path)
		}
	}
	// A refused post changes nothing.
	if p := e.post("/ui/locks/ci:build/force-release", url.Values{"fence": {"1"}}, nil); p.status != http.StatusSeeOther {
		t.Errorf("POST force-release without a session: %d", p.status)
	}
	if _, held := e.held(lock.Lock("ci:build")); !held {
		t.Fatal("a post without a session broke the lock")
	}

	// htmx refreshes get 401 and an HX-Redirect back to the page shown.
	req, _ := http.NewRequest(http.MethodGet, e.ts.URL+"/ui/fragments/locks", nil)
	req.Header.Set("HX-Request", "true")
	req.Header.Set("HX-Current-URL", e.ts.URL+"/?prefix=ci")
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	p := e.read(resp)
	if p.status != http.StatusUnauthorized || p.header.Get("HX-Redirect") != "/ui/login?next=%2F%3Fprefix%3Dci" {
		t.Errorf("htmx fragment: %d, HX-Redirect %q", p.status, p.header.Get("HX-Redirect"))
	}
	// A live page's event stream reconnecting without a session gets a
	// 401, which ends it, not the sign-in page, which EventSource refuses
	// and retries.
	req, _ = http.NewRequest(http.MethodGet, e.ts.URL+"/ui/events?prefix=ci:", nil)
	req.Header.Set("Accept", "text/event-stream")
	resp, err = e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if p := e.read(resp); p.status != http.StatusUnauthorized {
		t.Errorf("event stream without a session: %d, want 401", p.status)
	}

	// The sign-in page and the assets need no session, and keep the
	// security headers.
	for _, path := range []string{"/ui/login", "/ui/assets/app.js"} {
		p := e.get(path)
		if p.status != http.StatusOK {
			t.Errorf("GET %s: %d", path, p.status)
		}
		if csp := p.header.Get("Content-Security-Policy"); !strings.Contains(csp, "frame-ancestors 'none'") ||
			p.header.Get("X-Content-Type-Options") != "nosniff" || p.header.Get("Referrer-Policy") == "" {
			t.Errorf("GET %s: security headers missing: %v", path, p.header)
		}
	}
}

func TestAuth_LoginSetsSessionCookie(t *testing.T) {
	e, logs := newAuthEnv(t)
	p := e.get("/ui/login?next=%2Fui%2Flocks%2Fci%3Ax")
	form := p.doc.Find("form.login")
	if form.AttrOr("method", "") != "post" || form.AttrOr("action", "") != "/ui/login" {
		t.Fatalf("form %s", outer(form))
	}
	input := form.Find("input#key")
	if input.AttrOr("type", "") != "password" || input.AttrOr("name", "") != "key" || form.Find(`label[for="key"]`).Length() != 1 {
		t.Errorf("the key field is not a labelled password input: %s", outer(form))
	}
	if form.Find(`input[name="csrf"]`).AttrOr("value", "") == "" {
		t.Error("no CSRF token in the sign-in form")
	}
	if form.Find(`input[name="next"]`).AttrOr("value", "") != "/ui/locks/ci:x" {
		t.Errorf("next not carried: %s", outer(form))
	}

	start := time.Now()
	p = e.login(opsKey, "/ui/locks/ci:x")
	if p.status != http.StatusSeeOther || p.header.Get("Location") != "/ui/locks/ci:x" {
		t.Fatalf("sign-in: %d to %q\n%s", p.status, p.header.Get("Location"), p.body)
	}
	c := setCookie(t, p.header, sessionCookie)
	if c == nil {
		t.Fatal("no session cookie")
	}
	if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Secure || c.Path != "/" {
		t.Errorf("cookie flags: %+v", c)
	}
	if c.MaxAge < int(DefaultSessionTTL/time.Second)-5 || c.MaxAge > int(DefaultSessionTTL/time.Second) {
		t.Errorf("Max-Age %d, want about 12 h", c.MaxAge)
	}
	if strings.Contains(c.Value, opsKey) || strings.Contains(c.Value, secret) {
		t.Fatal("the cookie holds the key or the secret")
	}
	if _, exp, ok := parseValue(c.Value); !ok || exp.Before(start.Add(DefaultSessionTTL-5*time.Second)) || exp.After(time.Now().Add(DefaultSessionTTL)) {
		t.Errorf("expiry in the cookie %v", exp)
	}

	p = e.get("/")
	if p.status != http.StatusOK || text(p.doc.Find(`[data-testid="signed-in"]`)) != "Signed in as ops (admin)" {
		t.Fatalf("after sign-in: %d, %q", p.status, text(p.doc.Find(`[data-testid="signed-in"]`)))
	}
	// Signed in, the sign-in page sends you on.
	if p := e.get("/ui/login?next=%2F"); p.status != http.StatusSeeOther || p.header.Get("Location") != "/" {
		t.Errorf("sign-in page while signed in: %d %q", p.status, p.header.Get("Location"))
	}
	for _, leaked := range []string{opsKey, secret} {
		if strings.Contains(logs.String(), leaked) || strings.Contains(p.body, leaked) {
			t.Fatal("a key or the session secret appears in the logs or a page")
		}
	}
	if !strings.Contains(logs.String(), `"key_name":"ops"`) {
		t.Errorf("the sign-in is not logged by key name:\n%s", logs)
	}
}

// parseValue reads a session cookie's name and expiry, for tests.
func parseValue(v string) (string, time.Time, bool) {
	parts := strings.Split(v, ".")
	if len(parts) != 3 {
		return "", time.Time{}, false
	}
	exp, err := strconv.ParseInt(parts[1], 10, 64)
	return parts[0], time.Unix(exp, 0), err == nil
}

func TestAuth_SecureCookieUnderTLS(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	engine := lock.New(rdb, lock.Options{})
	t.Cleanup(func() { _ = engine.Close() })
	dash := NewDashboard(engine, zerolog.Nop())
	if err := dash.RequireLogin(Login{Keys: mustKeys(t, keysYAML)}); err != nil {
		t.Fatal(err)
	}
	r := chi.NewRouter()
	dash.Routes(r)
	ts := httptest.NewTLSServer(r)
	t.Cleanup(ts.Close)
	jar, _ := cookiejar.New(nil)
	client := ts.Client()
	client.Jar = jar
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	e := &env{t: t, engine: engine, dash: dash, ts: ts, client: client}

	token := e.loginForm("")
	p := e.post("/ui/login", url.Values{"csrf": {token}, "key": {viewerKey}}, nil)
	c := setCookie(t, p.header, sessionCookie)
	if p.status != http.StatusSeeOther || c == nil || !c.Secure || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode {
		t.Fatalf("over TLS: %d, cookie %+v", p.status, c)
	}
	if p := e.get("/"); p.status != http.StatusOK {
		t.Fatalf("signed in over TLS: %d", p.status)
	}

	// Behind a TLS-terminating proxy that says so, the cookie is Secure too.
	req := httptest.NewRequest(http.MethodGet, "/ui/login", nil)
	req.Header.Set("X-Forwarded-Proto", "https")
	if !secureRequest(req) {
		t.Error("X-Forwarded-Proto: https is not taken as HTTPS")
	}
	req = httptest.NewRequest(http.MethodGet, "/ui/login", nil)
	req.TLS = &tls.ConnectionState{}
	if !secureRequest(req) || secureRequest(httptest.NewRequest(http.MethodGet, "/", nil)) {
		t.Error("secureRequest does not follow r.TLS")
	}
}

func TestAuth_WrongKeyRefused(t *testing.T) {
	e, logs := newAuthEnv(t)
	var first string
	for _, key := range []string{"not-a-key-0123456789", "", opsKey + "x", strings.ToUpper(opsKey)} {
		start := time.Now()
		p := e.login(key, "")
		if p.status != http.StatusUnauthorized {
			t.Fatalf("key %q: status %d", key, p.status)
		}
		if time.Since(start) < loginDelay {
			t.Errorf("a refused key was answered without the delay")
		}
		if setCookie(t, p.header, sessionCookie) != nil {
			t.Fatal("a refused key got a session cookie")
		}
		msg := text(p.doc.Find(`[data-testid="error"]`))
		if first == "" {
			first = msg
		}
		if msg == "" || msg != first {
			t.Errorf("error %q differs between wrong keys (%q): it must not hint which part was wrong", msg, first)
		}
		if p.doc.Find("form.login input#key").Length() != 1 {
			t.Error("the form is not shown again")
		}
		if key != "" && (strings.Contains(p.body, key) || strings.Contains(logs.String(), key)) {
			t.Fatal("the presented key is echoed in the page or the logs")
		}
	}
	if p := e.get("/"); p.status != http.StatusSeeOther {
		t.Errorf("after refused sign-ins: %d", p.status)
	}
}

func TestAuth_SessionCookiesRefused(t *testing.T) {
	keys := mustKeys(t, keysYAML)
	now := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	mk := func(keys *auth.Keyring, secret string) *Dashboard {
		d := NewDashboard(nil, zerolog.Nop())
		if err := d.RequireLogin(Login{Keys: keys, Secret: []byte(secret)}); err != nil {
			t.Fatal(err)
		}
		return d
	}
	d := mk(keys, secret)
	ops, _ := keys.ByName("ops")
	valid := d.sessions.issue(ops, now.Add(time.Hour))
	if k, err := d.sessions.check(valid, now); err != nil || k.Name != "ops" {
		t.Fatalf("a valid session: %v", err)
	}
	// Another replica with the same secret accepts it.
	if _, err := mk(mustKeys(t, keysYAML), secret).sessions.check(valid, now); err != nil {
		t.Fatalf("a replica with the same secret: %v", err)
	}

	viewer, _ := keys.ByName("viewer")
	viewerSession := d.sessions.issue(viewer, now.Add(time.Hour))
	vParts := strings.Split(viewerSession, ".")
	oParts := strings.Split(valid, ".")

	removed := mk(mustKeys(t, `
keys:
  - {name: viewer, key: "`+viewerKey+`", scopes: [read]}
`), secret)
	rotated := mk(mustKeys(t, `
keys:
  - {name: ops, key: "ops-new-admin-key-0123456789", scopes: [admin]}
`), secret)

	for _, tc := range []struct {
		name  string
		d     *Dashboard
		value string
		want  error
	}{
		{"expired", d, valid, errExpired},
		{"expiring now", d, d.sessions.issue(ops, now), errExpired},
		{"viewer's signature under ops's name", d, oParts[0] + "." + vParts[1] + "." + vParts[2], errBadMAC},
		{"expiry pushed out", d, oParts[0] + ".99999999999." + oParts[2], errBadMAC},
		{"signed with another secret", mk(keys, "another-secret-0123456789abcdefghijkl"), valid, errBadMAC},
		{"random secret per process", mk(keys, ""), valid, errBadMAC},
		{"key removed", removed, valid, errKeyRemoved},
		{"key's secret replaced", rotated, valid, errBadMAC},
		{"empty", d, "", errNoSession},
		{"garbage", d, "not a cookie", errMalformed},
		{"too many parts", d, valid + ".x", errMalformed},
		{"expiry not a number", d, oParts[0] + ".1e9." + oParts[2], errMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			at := now
			if tc.name == "expired" {
				at = now.Add(time.Hour)
			}
			if _, err := tc.d.sessions.check(tc.value, at); err != tc.want {
				t.Errorf("check = %v, want %v", err, tc.want)
			}
		})
	}
}

// TestAuth_SessionEndsOverHTTP refuses an expired, a tampered and a
// removed key's cookie through the real router.
func TestAuth_SessionEndsOverHTTP(t *testing.T) {
	e, _ := newAuthEnv(t)
	e.mustLogin(opsKey)
	c := e.sessionCookie()
	if c == nil {
		t.Fatal("no session after sign-in")
	}
	u, _ := url.Parse(e.ts.URL + "/")
	use := func(value string) int {
		e.client.Jar.SetCookies(u, []*http.Cookie{{Name: sessionCookie, Value: value, Path: "/"}})
		return e.get("/").status
	}
	if got := use(c.Value); got != http.StatusOK {
		t.Fatalf("own cookie: %d", got)
	}
	parts := strings.Split(c.Value, ".")
	if got := use(parts[0] + "." + parts[1] + "." + parts[2][:len(parts[2])-2] + "AA"); got != http.StatusSeeOther {
		t.Errorf("tampered signature: %d", got)
	}
	ops, _ := e.dash.sessions.keys.ByName("ops")
	if got := use(e.dash.sessions.issue(ops, time.Now().Add(-time.Second))); got != http.StatusSeeOther {
		t.Errorf("expired: %d", got)
	}
	// The dashboard's clock moves past the cookie's expiry.
	use(c.Value)
	e.dash.now = func() time.Time { return time.Now().Add(DefaultSessionTTL + time.Minute) }
	if got := e.get("/").status; got != http.StatusSeeOther {
		t.Errorf("after 12 h: %d", got)
	}
	e.dash.now = time.Now
	// The key is removed from the keyring (a restart with a new auth file).
	e.dash.sessions.keys = mustKeys(t, `
keys:
  - {name: viewer, key: "`+viewerKey+`", scopes: [read]}
`)
	if got := use(c.Value); got != http.StatusSeeOther {
		t.Errorf("removed key's session: %d", got)
	}
}

func TestAuth_Logout(t *testing.T) {
	e, _ := newAuthEnv(t)
	e.mustLogin(viewerKey)
	p := e.get("/")
	form := p.doc.Find(`form.signout`)
	token := form.Find(`input[name="csrf"]`).AttrOr("value", "")
	if form.AttrOr("action", "") != "/ui/logout" || form.AttrOr("method", "") != "post" || token == "" {
		t.Fatalf("sign-out form: %s", outer(form))
	}

	// Refused without the token, or from another site: still signed in.
	if p := e.post("/ui/logout", url.Values{}, nil); p.status != http.StatusForbidden {
		t.Errorf("sign-out without a token: %d", p.status)
	}
	if p := e.post("/ui/logout", url.Values{"csrf": {"AAAA"}}, nil); p.status != http.StatusForbidden {
		t.Errorf("sign-out with a wrong token: %d", p.status)
	}
	if p := e.post("/ui/logout", url.Values{"csrf": {token}}, http.Header{"Sec-Fetch-Site": {"cross-site"}}); p.status != http.StatusForbidden {
		t.Errorf("cross-site sign-out: %d", p.status)
	}
	if p := e.get("/"); p.status != http.StatusOK {
		t.Fatalf("a refused sign-out signed out: %d", p.status)
	}

	p = e.post("/ui/logout", url.Values{"csrf": {token}}, nil)
	if p.status != http.StatusSeeOther || p.header.Get("Location") != "/ui/login" {
		t.Fatalf("sign-out: %d %q", p.status, p.header.Get("Location"))
	}
	if c := setCookie(t, p.header, sessionCookie); c == nil || c.MaxAge >= 0 || c.Value != "" {
		t.Errorf("sign-out does not clear the cookie: %+v", c)
	}
	if p := e.get("/"); p.status != http.StatusSeeOther {
		t.Errorf("after sign-out: %d", p.status)
	}
}

func TestAuth_LoginCSRF(t *testing.T) {
	e, _ := newAuthEnv(t)
	token := e.loginForm("")
	for _, tc := range []struct {
		name   string
		form   url.Values
		header http.Header
	}{
		{"no token", url.Values{"key": {opsKey}}, nil},
		{"wrong token", url.Values{"key": {opsKey}, "csrf": {"AAAA"}}, nil},
		{"cross-site", url.Values{"key": {opsKey}, "csrf": {token}}, http.Header{"Sec-Fetch-Site": {"cross-site"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := e.post("/ui/login", tc.form, tc.header)
			if p.status != http.StatusForbidden || setCookie(t, p.header, sessionCookie) != nil {
				t.Errorf("status %d, cookie %v", p.status, setCookie(t, p.header, sessionCookie))
			}
		})
	}
	// Without its cookie the token is worthless.
	e.client.Jar, _ = cookiejar.New(nil)
	if p := e.post("/ui/login", url.Values{"key": {opsKey}, "csrf": {token}}, nil); p.status != http.StatusForbidden {
		t.Errorf("token without its cookie: %d", p.status)
	}
}

func TestAuth_NextIsLocalOnly(t *testing.T) {
	for next, want := range map[string]string{
		"":                              "/",
		"/":                             "/",
		"/ui/locks/ci:a":                "/ui/locks/ci:a",
		"/?prefix=ci%3A&cursor=x":       "/?prefix=ci%3A&cursor=x",
		"//evil.example/":               "/",
		"///evil.example/":              "/",
		"/\\evil.example":               "/",
		"\\\\evil.example":              "/",
		"https://evil.example/":         "/",
		"http:/evil.example":            "/",
		"javascript:alert(1)":           "/",
		"evil.example":                  "/",
		"/\t/evil.example":              "/",
		"/x\r\nSet-Cookie: a=b":         "/",
		"/ui/login?next=//evil":         "/",
		"/ui/logout":                    "/",
		"/" + strings.Repeat("a", 3000): "/",
	} {
		if got := safeNext(next); got != want {
			t.Errorf("safeNext(%q) = %q, want %q", next, got, want)
		}
	}

	e, _ := newAuthEnv(t)
	for _, next := range []string{"//evil.example/", "https://evil.example/x", "/\\evil.example"} {
		e.client.Jar, _ = cookiejar.New(nil)
		p := e.login(viewerKey, next)
		if p.status != http.StatusSeeOther || p.header.Get("Location") != "/" {
			t.Errorf("next %q: %d to %q, want 303 to /", next, p.status, p.header.Get("Location"))
		}
	}
	// The sign-in page never offers a foreign next either.
	e.client.Jar, _ = cookiejar.New(nil)
	p := e.get("/ui/login?next=" + url.QueryEscape("//evil.example/"))
	if v := p.doc.Find(`input[name="next"]`).AttrOr("value", ""); v != "/" {
		t.Errorf("sign-in form carries next %q", v)
	}
}

func TestAuth_ReadScopeCannotForceRelease(t *testing.T) {
	e, _ := newAuthEnv(t)
	l := e.acquire("deploy:prod", "ci-runner-7", 30*time.Second)
	e.mustLogin(viewerKey)

	p := e.get("/")
	if rows(p.doc)["deploy:prod"] == nil {
		t.Fatal("a read key does not see the lock")
	}
	if n := p.doc.Find(`[data-testid="force-release-link"]`).Length(); n != 0 {
		t.Error("a read key is offered force-release on the list")
	}
	if p := e.get("/ui/locks/deploy:prod"); p.status != http.StatusOK || p.doc.Find(`[data-testid="force-release-link"]`).Length() != 0 {
		t.Errorf("detail for a read key: %d, or it offers force-release", p.status)
	}
	if p := e.get("/ui/locks/deploy:prod/force-release"); p.status != http.StatusForbidden {
		t.Errorf("confirm page for a read key: %d", p.status)
	}
	// A valid CSRF token (from the sign-out form) does not help.
	token := p.doc.Find(`form.signout input[name="csrf"]`).AttrOr("value", "")
	p = e.post("/ui/locks/deploy:prod/force-release", url.Values{"csrf": {token}, "fence": {itoa(l.Fence)}}, nil)
	if p.status != http.StatusForbidden {
		t.Errorf("force-release by a read key: %d", p.status)
	}
	if st, held := e.held(lock.Lock("deploy:prod")); !held || st.Fence != l.Fence {
		t.Fatal("a read key broke the lock")
	}
}

func TestAuth_AdminForceReleasesAsItsName(t *testing.T) {
	e, _ := newAuthEnv(t)
	e.acquire("deploy:prod", "ci-runner-7", 30*time.Second)
	e.mustLogin(opsKey)
	if p := e.get("/"); p.doc.Find(`[data-testid="force-release-link"]`).Length() != 1 {
		t.Error("an admin key is not offered force-release")
	}
	token, fence := e.confirmForm("deploy:prod")
	// The force-release form's CSRF is still checked for an admin.
	if p := e.post("/ui/locks/deploy:prod/force-release", url.Values{"csrf": {"AAAA"}, "fence": {fence}}, nil); p.status != http.StatusForbidden {
		t.Errorf("admin post with a wrong token: %d", p.status)
	}
	p := e.post("/ui/locks/deploy:prod/force-release", url.Values{"csrf": {token}, "fence": {fence}, "reason": {"stuck"}}, nil)
	if p.status != http.StatusSeeOther || p.header.Get("Location") != "/ui/locks/deploy:prod" {
		t.Fatalf("force-release: %d to %q\n%s", p.status, p.header.Get("Location"), p.body)
	}
	p = e.get(p.header.Get("Location"))
	if _, held := e.held(lock.Lock("deploy:prod")); held {
		t.Fatal("still held")
	}
	if g := text(p.doc.Find(`[data-testid="event"]`).First().Find(`[data-testid="event-actor"]`)); g != "ops" {
		t.Errorf("actor %q, want the key's name ops", g)
	}
}

func TestAuth_PrefixLimitedKey(t *testing.T) {
	e, _ := newAuthEnv(t)
	e.acquire("ci:build", "w1", 30*time.Second)
	e.acquire("ci:test", "w2", 30*time.Second)
	e.acquire("deploy:prod", "w3", 30*time.Second)
	e.acquire("other:x", "w4", 30*time.Second)

	e.mustLogin(ciKey)
	p := e.get("/")
	if got := keysOf(rows(p.doc)); strings.Join(got, ",") != "ci:build,ci:test" {
		t.Errorf("ci key lists %v", got)
	}
	if !strings.Contains(text(p.doc.Find(`[data-testid="limited"]`)), "ci:") {
		t.Error("the page does not say the list is limited")
	}
	if p := e.get("/ui/fragments/locks"); strings.Join(keysOf(rows(p.doc)), ",") != "ci:build,ci:test" {
		t.Errorf("fragment lists %v", keysOf(rows(p.doc)))
	}
	if p := e.get("/?prefix=ci%3Ab"); strings.Join(keysOf(rows(p.doc)), ",") != "ci:build" {
		t.Errorf("prefix inside the key's: %v", keysOf(rows(p.doc)))
	}
	if p := e.get("/?prefix=deploy%3A"); p.status != http.StatusForbidden || len(rows(p.doc)) != 0 {
		t.Errorf("prefix outside the key's: %d, %v", p.status, keysOf(rows(p.doc)))
	}
	for _, path := range []string{"/ui/locks/deploy:prod", "/ui/fragments/locks/deploy:prod", "/ui/locks/deploy:prod/force-release"} {
		// ">w3<": the owner as a page shows it; a bare "w3" may occur in
		// the page's random CSRF token.
		if p := e.get(path); p.status != http.StatusForbidden || strings.Contains(p.body, ">w3<") {
			t.Errorf("GET %s by the ci key: %d", path, p.status)
		}
	}
	if p := e.get("/ui/locks/ci:build"); p.status != http.StatusOK || text(p.doc.Find(`[data-testid="owner"]`)) != "w1" {
		t.Errorf("own lock's detail: %d", p.status)
	}

	// A key with two prefixes: the list is filtered row by row.
	e.client.Jar, _ = cookiejar.New(nil)
	e.mustLogin(multiKey)
	if got := keysOf(rows(e.get("/").doc)); strings.Join(got, ",") != "ci:build,ci:test,deploy:prod" {
		t.Errorf("multi key lists %v", got)
	}
	if p := e.get("/ui/locks/other:x"); p.status != http.StatusForbidden {
		t.Errorf("multi key, other lock: %d", p.status)
	}
}

func TestRequireLogin_Config(t *testing.T) {
	d := NewDashboard(nil, zerolog.Nop())
	if err := d.RequireLogin(Login{}); err == nil {
		t.Error("RequireLogin without keys")
	}
	err := d.RequireLogin(Login{Keys: mustKeys(t, keysYAML), Secret: []byte("short-secret")})
	if err == nil || strings.Contains(err.Error(), "short-secret") {
		t.Errorf("short secret: %v", err)
	}
}

// Semaphore pages keep the lock pages' rules: a session to see them,
// admin scope to break a permit, and a key's prefixes apply to names.
func TestAuth_Semaphores(t *testing.T) {
	e, _ := newAuthEnv(t)
	ci := e.permit("ci:pool", "w1", 2, 30*time.Second)
	dep := e.permit("deploy:pool", "w2", 2, 30*time.Second)

	for path, want := range map[string]string{
		"/ui/semaphores":                        "/ui/login?next=%2Fui%2Fsemaphores",
		"/ui/semaphores/ci:pool":                "/ui/login?next=%2Fui%2Fsemaphores%2Fci%3Apool",
		"/ui/semaphores/ci:pool/force-release":  "/ui/login?next=%2Fui%2Fsemaphores%2Fci%3Apool%2Fforce-release",
		"/ui/fragments/semaphores":              "/ui/login?next=%2Fui%2Ffragments%2Fsemaphores",
		"/ui/fragments/semaphores/ci:pool":      "/ui/login?next=%2Fui%2Ffragments%2Fsemaphores%2Fci%3Apool",
		"/ui/events?kind=semaphores&prefix=ci:": "/ui/login?next=%2Fui%2Fevents%3Fkind%3Dsemaphores%26prefix%3Dci%3A",
	} {
		p := e.get(path)
		if p.status != http.StatusSeeOther || p.header.Get("Location") != want {
			t.Errorf("GET %s: %d to %q, want 303 to %q", path, p.status, p.header.Get("Location"), want)
		}
	}
	if p := e.post("/ui/semaphores/ci:pool/force-release", url.Values{"fence": {itoa(ci.Fence)}}, nil); p.status != http.StatusSeeOther {
		t.Errorf("POST without a session: %d", p.status)
	}

	// The ci key sees ci:pool only.
	e.mustLogin(ciKey)
	if got := keysOf(semRows(e.get("/ui/semaphores").doc)); strings.Join(got, ",") != "ci:pool" {
		t.Errorf("ci key lists semaphores %v", got)
	}
	if p := e.get("/ui/semaphores?prefix=deploy%3A"); p.status != http.StatusForbidden || len(semRows(p.doc)) != 0 {
		t.Errorf("prefix outside the key's: %d", p.status)
	}
	for _, path := range []string{"/ui/semaphores/deploy:pool", "/ui/fragments/semaphores/deploy:pool", "/ui/semaphores/deploy:pool/force-release"} {
		if p := e.get(path); p.status != http.StatusForbidden || strings.Contains(p.body, "w2") {
			t.Errorf("GET %s by the ci key: %d", path, p.status)
		}
	}
	if p := e.get("/ui/semaphores/ci:pool"); p.status != http.StatusOK || len(holderRows(p.doc)) != 1 {
		t.Errorf("own semaphore: %d", p.status)
	}

	// A read key sees, and may not break.
	e.client.Jar, _ = cookiejar.New(nil)
	e.mustLogin(viewerKey)
	p := e.get("/ui/semaphores")
	if len(semRows(p.doc)) != 2 || p.doc.Find(`[data-testid="force-release-link"]`).Length() != 0 {
		t.Errorf("read key: %v, force links %d", keysOf(semRows(p.doc)), p.doc.Find(`[data-testid="force-release-link"]`).Length())
	}
	if d := e.get("/ui/semaphores/deploy:pool"); d.doc.Find(`[data-testid="force-holder"], [data-testid="force-release-all"]`).Length() != 0 {
		t.Error("a read key is offered force-release on a semaphore's page")
	}
	token := p.doc.Find(`form.signout input[name="csrf"]`).AttrOr("value", "")
	if p := e.post("/ui/semaphores/deploy:pool/force-release", url.Values{"csrf": {token}, "fence": {itoa(dep.Fence)}}, nil); p.status != http.StatusForbidden {
		t.Errorf("force-release by a read key: %d", p.status)
	}

	// An admin breaks a permit as its name.
	e.client.Jar, _ = cookiejar.New(nil)
	e.mustLogin(opsKey)
	_, form := e.confirmTarget("/ui/semaphores/deploy:pool/force-release?fence=" + itoa(dep.Fence))
	b := e.follow(e.post("/ui/semaphores/deploy:pool/force-release", form, nil))
	if b.status != http.StatusOK || text(b.doc.Find(`[data-testid="event"]`).First().Find(`[data-testid="event-actor"]`)) != "ops" {
		t.Errorf("admin force-release: %d\n%s", b.status, b.body)
	}
	if g := e.holderFences(lock.Semaphore("deploy:pool")); len(g) != 0 {
		t.Errorf("permits left %v", g)
	}
}
