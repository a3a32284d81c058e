package web

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
)

// csrfCookie holds the browser's random CSRF value.
const csrfCookie = "lockd_csrf"

// csrfField is the form field that carries the token.
const csrfField = "csrf"

// csrf issues and checks the token of every form (force-release, and with
// auth on sign-in and sign-out): a double submit cookie whose form half is
// signed. The browser keeps a random value in an HttpOnly, SameSite=Strict
// cookie; the form carries HMAC-SHA256(secret, value), the secret being
// random per process unless RequireLogin is given one (replicas must agree
// on it). A forged cross-site POST has neither half: the browser withholds
// a Strict cookie from other sites and their pages cannot read ours or our
// forms. Signing (rather than copying the cookie into the form) means a
// cookie planted by a sibling subdomain is useless without our secret.
// Nothing is stored on the server.
type csrf struct {
	secret []byte
}

func newCSRF() csrf {
	return csrf{secret: random(32)}
}

// token returns the form token for r's browser, setting the cookie first
// when r has none.
func (c csrf) token(w http.ResponseWriter, r *http.Request) string {
	value := ""
	if ck, err := r.Cookie(csrfCookie); err == nil && ck.Value != "" {
		value = ck.Value
	} else {
		value = base64.RawURLEncoding.EncodeToString(random(32))
		http.SetCookie(w, &http.Cookie{
			Name:  csrfCookie,
			Value: value,
			// "/" rather than "/ui/": the list page at "/" carries the
			// sign-out form, and a narrower cookie would be re-issued there,
			// invalidating forms open in other tabs.
			Path:     "/",
			HttpOnly: true,
			Secure:   secureRequest(r),
			SameSite: http.SameSiteStrictMode,
		})
	}
	return c.sign(value)
}

// valid reports whether r (a parsed form post) carries the token that
// matches its cookie.
func (c csrf) valid(r *http.Request) bool {
	ck, err := r.Cookie(csrfCookie)
	if err != nil || ck.Value == "" {
		return false
	}
	got := r.PostFormValue(csrfField)
	return got != "" && hmac.Equal([]byte(got), []byte(c.sign(ck.Value)))
}

func (c csrf) sign(value string) string {
	m := hmac.New(sha256.New, c.secret)
	m.Write([]byte("lockd force-release\x00"))
	m.Write([]byte(value))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

func random(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return b
}
