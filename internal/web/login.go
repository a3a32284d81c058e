package web

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/lockd/lockd/internal/auth"
	"github.com/lockd/lockd/internal/authlimit"
)

// Sign-in pages; only routed when RequireLogin was called.
const (
	loginPath  = "/ui/login"
	logoutPath = "/ui/logout"
)

// loginDelay slows down each refused sign-in a little (a person does not
// notice; a script sending keys one after another does), within the limit
// on unknown keys and past it alike.
const loginDelay = 400 * time.Millisecond

// Login configures the dashboard's sign-in (RequireLogin).
type Login struct {
	// Keys are the API keys that may sign in: any key, since every scope
	// includes read.
	Keys *auth.Keyring
	// Secret signs session cookies and CSRF tokens. Replicas behind one
	// load balancer need the same secret (LOCKD_SESSION_SECRET), at least
	// MinSecretLen bytes. Empty: a random secret per process, so sessions
	// and open forms end when lockd restarts.
	Secret []byte
	// TTL is how long a sign-in lasts; 0 means DefaultSessionTTL.
	TTL time.Duration
	// UnknownKeys limits the refused sign-ins per client address; beyond
	// it, a wrong key gets 429 and a valid key still signs in. lockd serve
	// passes the API's limiter (server.Config.UnknownKeys), so that an
	// address has one limit on the API and here. Nil: a limiter of the
	// dashboard's own, at authlimit's defaults.
	UnknownKeys *authlimit.Limiter
}

// RequireLogin puts every page behind a sign-in with an API key: the
// session remembers the key's name, and each request uses that key's scope
// and prefixes as configured now. Read scope may look, admin scope may
// force-release, and a key with prefixes sees only its locks. Call it
// before Routes; it replaces any identifyFunc.
func (d *Dashboard) RequireLogin(l Login) error {
	if !l.Keys.Enabled() {
		return errors.New("web: RequireLogin needs at least one API key")
	}
	secret := l.Secret
	switch {
	case len(secret) == 0:
		secret = random(32)
	case len(secret) < MinSecretLen:
		return fmt.Errorf("web: the session secret must be at least %d bytes", MinSecretLen)
	}
	d.sessions = &sessions{
		keys: l.Keys,
		mac:  derive(secret, "lockd dashboard session v1"),
		ttl:  cmp.Or(l.TTL, DefaultSessionTTL),
	}
	d.csrf = csrf{secret: derive(secret, "lockd dashboard csrf v1")}
	d.identify = sessionIdentity
	d.unknownKeys = l.UnknownKeys
	if d.unknownKeys == nil {
		d.unknownKeys = authlimit.New(authlimit.DefaultBurst, authlimit.DefaultRefill)
	}
	return nil
}

type signedInKey struct{}

// signedIn is the session a request carries, put in its context by
// requireSession.
type signedIn struct {
	key  auth.Key
	csrf string // the sign-out form's token
}

func signedInFrom(ctx context.Context) *signedIn {
	s, _ := ctx.Value(signedInKey{}).(*signedIn)
	return s
}

// noKey is a prefix no lock key has (keys start with a letter or digit).
const noKey = "\x00"

// sessionIdentity is the identifyFunc with auth on: the signed-in key's
// name, admin scope and prefixes. Without a session (which requireSession
// does not let through) it may do and see nothing.
func sessionIdentity(r *http.Request) identity {
	s := signedInFrom(r.Context())
	if s == nil {
		return identity{Actor: "anonymous", Key: auth.Key{Prefixes: []string{noKey}}}
	}
	return identity{Actor: s.key.Name, Admin: s.key.Can(auth.Admin), Key: s.key}
}

// viewer is who the page header says is signed in; nil with auth off.
type viewer struct {
	Name  string
	Scope string
	CSRF  string
}

func viewerOf(ctx context.Context) *viewer {
	s := signedInFrom(ctx)
	if s == nil {
		return nil
	}
	return &viewer{Name: s.key.Name, Scope: s.key.Scope.String(), CSRF: s.csrf}
}

// requireSession lets through requests with a valid session, naming its
// key in the context. Others go to the sign-in page: pages by a 303 that
// comes back to them, htmx fragments by a 401 whose HX-Redirect sends the
// whole page there.
func (d *Dashboard) requireSession(next http.Handler) http.Handler {
	if d.sessions == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k, err := d.sessions.fromRequest(r, d.now())
		if err != nil {
			if !errors.Is(err, errNoSession) {
				d.logger(r).Debug().Str("why", err.Error()).Msg("dashboard session refused")
			}
			d.toLogin(w, r)
			return
		}
		s := &signedIn{key: k, csrf: d.csrf.token(w, r)}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), signedInKey{}, s)))
	})
}

func (d *Dashboard) toLogin(w http.ResponseWriter, r *http.Request) {
	// A live page's EventSource reconnecting after the session went: a
	// redirect would hand it the sign-in page, which it refuses noisily
	// (not text/event-stream) and retries; a 401 ends it. The page's next
	// htmx refresh goes to sign in.
	if strings.Contains(r.Header.Get("Accept"), "text/event-stream") {
		d.problem(w, r, http.StatusUnauthorized, "Signed out", "Your dashboard session has ended. Sign in again.")
		return
	}
	if r.Header.Get("HX-Request") == "true" {
		back := "/"
		if u, err := url.Parse(r.Header.Get("HX-Current-URL")); err == nil {
			back = u.RequestURI()
		}
		w.Header().Set("HX-Redirect", loginURL(back))
		d.problem(w, r, http.StatusUnauthorized, "Signed out", "Your dashboard session has ended. Sign in again.")
		return
	}
	http.Redirect(w, r, loginURL(r.URL.RequestURI()), http.StatusSeeOther)
}

// loginURL is the sign-in page that returns to next afterwards.
func loginURL(next string) string {
	next = safeNext(next)
	if next == "/" {
		return loginPath
	}
	return loginPath + "?" + url.Values{"next": {next}}.Encode()
}

// safeNext is next if it is a path on this site, else "/": after sign-in
// we never redirect anywhere else (no "//evil.example", no "https://…",
// no backslashes or control characters that browsers bend into hosts).
func safeNext(next string) string {
	if len(next) == 0 || len(next) > 2048 || next[0] != '/' || strings.HasPrefix(next, "//") {
		return "/"
	}
	for i := 0; i < len(next); i++ {
		if c := next[i]; c < 0x20 || c == 0x7f || c == '\\' {
			return "/"
		}
	}
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || u.Opaque != "" {
		return "/"
	}
	if u.Path == loginPath || u.Path == logoutPath {
		return "/"
	}
	return next
}

func (d *Dashboard) loginForm(w http.ResponseWriter, r *http.Request) {
	next := safeNext(r.URL.Query().Get("next"))
	if _, err := d.sessions.fromRequest(r, d.now()); err == nil {
		http.Redirect(w, r, next, http.StatusSeeOther)
		return
	}
	d.render(w, r, http.StatusOK, loginPage(loginView{CSRF: d.csrf.token(w, r), Next: next}))
}

func (d *Dashboard) signIn(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		d.problem(w, r, http.StatusBadRequest, "Bad form", "The sign-in form could not be read.")
		return
	}
	next := safeNext(r.PostFormValue("next"))
	if !d.csrf.valid(r) {
		d.render(w, r, http.StatusForbidden, loginPage(loginView{CSRF: d.csrf.token(w, r), Next: next,
			Error: "This sign-in form has expired (lockd may have restarted). Nothing was checked: enter the key again."}))
		return
	}
	// The key is looked up before the limit is consulted: a valid key signs
	// in whatever others at the same address have sent.
	k, ok := d.sessions.keys.Lookup(strings.TrimSpace(r.PostFormValue("key")))
	if !ok || !k.Can(auth.Read) {
		addr := authlimit.ClientAddr(r)
		wait, allowed := d.unknownKeys.Take(addr)
		// Limited or not, a refused key waits the same: past the limit,
		// answers must not come faster than before it.
		pause(r.Context(), loginDelay)
		if !allowed {
			secs := authlimit.RetryAfter(wait)
			d.logger(r).Warn().Str("remote", addr).Msg("too many refused keys from this address")
			w.Header().Set("Retry-After", strconv.Itoa(secs))
			d.render(w, r, http.StatusTooManyRequests, loginPage(loginView{CSRF: d.csrf.token(w, r), Next: next,
				Error: fmt.Sprintf("Sign-in failed: too many wrong keys were sent from your address. Try again in %d s.", secs)}))
			return
		}
		d.logger(r).Info().Str("remote", remoteHost(r)).Msg("dashboard sign-in refused")
		d.render(w, r, http.StatusUnauthorized, loginPage(loginView{CSRF: d.csrf.token(w, r), Next: next,
			Error: "Sign-in failed: that API key was not accepted."}))
		return
	}
	d.sessions.set(w, r, *k, d.now())
	d.logger(r).Info().Str("key_name", k.Name).Str("remote", remoteHost(r)).Msg("dashboard sign-in")
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (d *Dashboard) signOut(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		d.problem(w, r, http.StatusBadRequest, "Bad form", "The sign-out form could not be read.")
		return
	}
	if !d.csrf.valid(r) {
		d.problem(w, r, http.StatusForbidden, "Form expired",
			"This sign-out form's security token is missing or no longer valid. You are still signed in: reload the page and sign out again.")
		return
	}
	if k, err := d.sessions.fromRequest(r, d.now()); err == nil {
		d.logger(r).Info().Str("key_name", k.Name).Msg("dashboard sign-out")
	}
	d.sessions.clear(w, r)
	http.Redirect(w, r, loginPath, http.StatusSeeOther)
}

// pause waits d or until ctx ends.
func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

func remoteHost(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}
