package web

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/lockd/lockd/internal/auth"
)

// sessionCookie holds a signed-in browser's session.
const sessionCookie = "lockd_session"

// DefaultSessionTTL is how long a dashboard sign-in lasts.
const DefaultSessionTTL = 12 * time.Hour

// MinSecretLen is the shortest session secret RequireLogin accepts.
const MinSecretLen = 32

// sessions issues and checks session cookies. A cookie is
//
//	base64url(key name) "." expiry (Unix seconds) "." base64url(MAC)
//
// where MAC = HMAC-SHA256(key, "lockd session v1" | name | expiry |
// fingerprint of the named key's secret). It holds the key's name and
// expiry, never the key. Nothing is stored on the server, so any replica
// with the same secret accepts it; and since the key's fingerprint is
// signed in, replacing a key's secret (or removing the key) ends its
// sessions. Logging out clears the browser's copy only: a copied cookie
// stays valid until it expires, the key changes or the secret does.
type sessions struct {
	keys *auth.Keyring
	mac  []byte
	ttl  time.Duration
}

// issue is the cookie value for k, valid until exp.
func (s *sessions) issue(k auth.Key, exp time.Time) string {
	name := base64.RawURLEncoding.EncodeToString([]byte(k.Name))
	e := strconv.FormatInt(exp.Unix(), 10)
	return name + "." + e + "." + base64.RawURLEncoding.EncodeToString(s.sign(k, e))
}

func (s *sessions) sign(k auth.Key, exp string) []byte {
	fp := k.Fingerprint()
	m := hmac.New(sha256.New, s.mac)
	m.Write([]byte("lockd session v1\x00"))
	m.Write([]byte(k.Name))
	m.Write([]byte{0})
	m.Write([]byte(exp))
	m.Write([]byte{0})
	m.Write(fp[:])
	return m.Sum(nil)
}

// Reasons a session cookie is refused; only for tests and debug logs.
var (
	errNoSession  = errors.New("no session cookie")
	errMalformed  = errors.New("malformed session cookie")
	errBadMAC     = errors.New("session cookie signature does not match")
	errExpired    = errors.New("session expired")
	errKeyRemoved = errors.New("the session's key is not configured any more")
)

// check returns the key (as configured now) of a valid session value.
func (s *sessions) check(value string, now time.Time) (auth.Key, error) {
	if value == "" {
		return auth.Key{}, errNoSession
	}
	if len(value) > 1024 {
		return auth.Key{}, errMalformed
	}
	parts := strings.Split(value, ".")
	if len(parts) != 3 {
		return auth.Key{}, errMalformed
	}
	name, err := base64.RawURLEncoding.DecodeString(parts[0])
	if err != nil || len(name) == 0 {
		return auth.Key{}, errMalformed
	}
	exp, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil || strconv.FormatInt(exp, 10) != parts[1] {
		return auth.Key{}, errMalformed
	}
	mac, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil {
		return auth.Key{}, errMalformed
	}
	k, ok := s.keys.ByName(string(name))
	if !ok {
		// Compute a MAC anyway so that a removed name costs the same time.
		s.sign(auth.Key{Name: string(name)}, parts[1])
		return auth.Key{}, errKeyRemoved
	}
	if !hmac.Equal(mac, s.sign(k, parts[1])) {
		return auth.Key{}, errBadMAC
	}
	if !now.Before(time.Unix(exp, 0)) {
		return auth.Key{}, errExpired
	}
	return k, nil
}

// fromRequest is the key of r's valid session.
func (s *sessions) fromRequest(r *http.Request, now time.Time) (auth.Key, error) {
	ck, err := r.Cookie(sessionCookie)
	if err != nil {
		return auth.Key{}, errNoSession
	}
	return s.check(ck.Value, now)
}

// set gives the browser a session for k.
func (s *sessions) set(w http.ResponseWriter, r *http.Request, k auth.Key, now time.Time) {
	exp := now.Add(s.ttl).Truncate(time.Second)
	http.SetCookie(w, &http.Cookie{
		Name:     sessionCookie,
		Value:    s.issue(k, exp),
		Path:     "/",
		MaxAge:   int(exp.Sub(now) / time.Second),
		HttpOnly: true,
		Secure:   secureRequest(r),
		SameSite: http.SameSiteStrictMode,
	})
}

// clear removes the browser's session.
func (s *sessions) clear(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{
		Name:     sessionCookie,
		Value:    "",
		Path:     "/",
		MaxAge:   -1,
		HttpOnly: true,
		Secure:   secureRequest(r),
		SameSite: http.SameSiteStrictMode,
	})
}

// secureRequest reports whether the browser reached us over HTTPS: lockd's
// own TLS, or a TLS-terminating proxy that says so. A forged
// X-Forwarded-Proto only makes the sender's own cookies stricter.
func secureRequest(r *http.Request) bool {
	return r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
}

// derive is a subkey of secret for one purpose, so that the session MAC
// and the CSRF MAC never share a key.
func derive(secret []byte, purpose string) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(purpose))
	return m.Sum(nil)
}
