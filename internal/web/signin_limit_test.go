package web

import (
	"net/http"
	"net/http/cookiejar"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/authlimit"
)

// N2 of the second audit, on the dashboard: the sign-in shares the API's
// limit on unknown keys per address, and a valid key signs in while the
// address is limited; only wrong keys get 429.
func TestAuth_SignInWhileAddressLimited(t *testing.T) {
	const burst = 2
	// No refill while the test runs: the counts depend on no clock.
	e, logs := newAuthEnvLimited(t, authlimit.New(burst, time.Hour))
	api := func(key string) int {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, e.ts.URL+"/v1/locks", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+key)
		res, err := e.ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	const wrong = "wrong-key-0123456789"
	steps := []struct {
		name   string
		signIn bool // else an API request
		key    string
		status int
	}{
		{"sign-in with a wrong key", true, wrong, http.StatusUnauthorized},
		{"API with a wrong key: the burst is shared", false, wrong, http.StatusUnauthorized},
		{"API with a wrong key, limited", false, wrong, http.StatusTooManyRequests},
		{"sign-in with a wrong key, limited", true, wrong, http.StatusTooManyRequests},
		{"sign-in with no key, limited", true, "", http.StatusTooManyRequests},
		{"sign-in with a valid key while limited", true, viewerKey, http.StatusSeeOther},
		{"API with a valid key while limited", false, opsKey, http.StatusOK},
		{"sign-in with another valid key while limited", true, opsKey, http.StatusSeeOther},
		{"sign-in with a wrong key, still limited", true, wrong, http.StatusTooManyRequests},
	}
	for _, s := range steps {
		if !s.signIn {
			if status := api(s.key); status != s.status {
				t.Fatalf("%s: %d, want %d", s.name, status, s.status)
			}
			continue
		}
		p := e.login(s.key, "")
		if p.status != s.status {
			t.Fatalf("%s: %d, want %d\n%s", s.name, p.status, s.status, p.body)
		}
		cookie := setCookie(t, p.header, sessionCookie)
		switch s.status {
		case http.StatusSeeOther:
			if cookie == nil {
				t.Fatalf("%s: no session cookie", s.name)
			}
			if p := e.get("/"); p.status != http.StatusOK {
				t.Fatalf("%s: then GET /: %d", s.name, p.status)
			}
			// The next step is another browser, with no session.
			jar, err := cookiejar.New(nil)
			if err != nil {
				t.Fatal(err)
			}
			e.client.Jar = jar
		case http.StatusTooManyRequests:
			if cookie != nil {
				t.Fatalf("%s: a session cookie", s.name)
			}
			if ra, _ := strconv.Atoi(p.header.Get("Retry-After")); ra < 3000 {
				t.Fatalf("%s: Retry-After %q", s.name, p.header.Get("Retry-After"))
			}
			if msg := text(p.doc.Find(`[data-testid="error"]`)); !strings.Contains(msg, "too many wrong keys") {
				t.Fatalf("%s: error %q", s.name, msg)
			}
			if p.doc.Find("form.login input#key").Length() != 1 {
				t.Fatalf("%s: the form is not shown again", s.name)
			}
		}
	}
	if strings.Contains(logs.String(), wrong) {
		t.Fatal("a presented key is in the logs")
	}
}
