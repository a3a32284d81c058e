package web

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/a-h/templ"
	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/rs/zerolog"

	"github.com/lockd/lockd/internal/auth"
	"github.com/lockd/lockd/internal/authlimit"
	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/problem"
	"github.com/lockd/lockd/internal/server"
)

// Engine is what the dashboard needs from the lock engine.
type Engine interface {
	State(ctx context.Context, res lock.Resource) (lock.State, error)
	List(ctx context.Context, kind lock.Kind, prefix string, limit int, cursor string) (lock.Page, error)
	History(ctx context.Context, res lock.Resource, limit int) ([]lock.Event, error)
	Renewals(ctx context.Context, res lock.Resource, limit int) ([]lock.Event, error)
	Subscribe(ctx context.Context, after string) (*lock.Subscription, error)
	ForceReleaseFence(ctx context.Context, res lock.Resource, fence int64, actor, reason string) (lock.Broken, error)
}

// lock.Service offers everything the dashboard needs.
var _ Engine = lock.Service(nil)

// identity is who sends a dashboard request and what they may do.
type identity struct {
	// Actor is recorded in history when they force-release.
	Actor string
	// Admin may force-release; without it the buttons are hidden and the
	// form is refused.
	Admin bool
	// Key's prefixes limit the lock keys and semaphore names they may see
	// and break (auth.Key.MayTouch, ListScope); the zero Key may touch
	// every one.
	Key auth.Key
}

// identifyFunc tells who sends r. RequireLogin supplies one from the
// session cookie; another auth layer may supply its own with setIdentify,
// in which case requests that must sign in first are its middleware's
// business, before the dashboard sees them.
type identifyFunc func(r *http.Request) identity

// anonymous is the identity while auth is off: anyone may force-release,
// as with the rest of the API, recorded as "dashboard@<client address>".
func anonymous(r *http.Request) identity {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	return identity{Actor: "dashboard@" + host, Admin: true}
}

// Page sizes and limits.
const (
	pageSize     = 50 // rows on one list page
	historySize  = 50 // events on a detail page
	maxFormBytes = 64 << 10
)

// listFragmentPath is the list table that htmx re-fetches; a key's detail
// fragment is below it (detailFragmentPath). The semaphores' pages are
// under semaphoresPath, their fragments under semFragmentPath; the
// elections' under electionsPath and electFragmentPath.
const (
	listFragmentPath  = "/ui/fragments/locks"
	semaphoresPath    = "/ui/semaphores"
	semFragmentPath   = "/ui/fragments/semaphores"
	electionsPath     = "/ui/elections"
	electFragmentPath = "/ui/fragments/elections"
)

// Dashboard serves the web pages.
type Dashboard struct {
	engine   Engine
	log      zerolog.Logger
	identify identifyFunc
	csrf     csrf
	sessions *sessions // nil: no sign-in (auth off)
	// unknownKeys limits refused sign-ins per client address (with
	// sessions only).
	unknownKeys *authlimit.Limiter
	pageSize    int
	now         func() time.Time
	live        liveStreams // open /ui/events streams
}

// NewDashboard returns the dashboard on engine, with auth off (anonymous).
func NewDashboard(engine Engine, log zerolog.Logger) *Dashboard {
	return &Dashboard{
		engine:   engine,
		log:      log,
		identify: anonymous,
		csrf:     newCSRF(),
		pageSize: pageSize,
		now:      time.Now,
	}
}

// setIdentify replaces anonymous with an auth layer's identifyFunc. Call it
// before serving.
func (d *Dashboard) setIdentify(f identifyFunc) { d.identify = f }

// Routes adds the dashboard's pages to r: the whole surface is here. With
// RequireLogin, every page but sign-in and the assets needs a session.
func (d *Dashboard) Routes(r chi.Router) {
	r.Group(func(r chi.Router) {
		// Pages, fragments (re-fetched every 2 s) and assets compress well:
		// the list of 20 locks and htmx go from 88 KiB to about a fifth.
		r.Use(middleware.Compress(5, "text/html", "text/css", "text/javascript", "application/javascript", "image/svg+xml"))
		r.Use(secureHeaders)
		// Sec-Fetch-Site/Origin checks in front of the CSRF token: a second,
		// independent refusal of cross-site posts.
		cop := http.NewCrossOriginProtection()
		cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			d.problem(w, r, http.StatusForbidden, "Refused", "This form was posted from another site; nothing was changed.")
		}))
		r.Handle(assetsPath+"*", assets())
		if d.sessions != nil {
			r.Get(loginPath, d.loginForm)
			r.Method(http.MethodPost, loginPath, cop.Handler(http.HandlerFunc(d.signIn)))
			r.Method(http.MethodPost, logoutPath, cop.Handler(http.HandlerFunc(d.signOut)))
		}
		r.Group(func(r chi.Router) {
			r.Use(d.requireSession)
			// Locks, semaphores and elections: the same pages on each kind
			// of key.
			for _, k := range sections {
				base := k.base
				r.Get(k.list, d.list(k))
				r.Get(k.fragments, d.listFragment(k))
				r.Get(base+"/{key}", d.detail(k))
				r.Get(k.fragments+"/{key}", d.detailFragment(k))
				r.Get(base+"/{key}/force-release", d.confirm(k))
				r.Method(http.MethodPost, base+"/{key}/force-release", cop.Handler(d.forceRelease(k)))
			}
			r.Get(eventsPath, d.events)
		})
	})
}

// secureHeaders forbids inline script, framing and MIME sniffing on every
// dashboard response. htmx runs without eval or inline styles (see the
// htmx-config meta tag in layout.templ), so 'self' is enough.
func secureHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "+
			"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "same-origin")
		h.Set("X-Frame-Options", "DENY")
		next.ServeHTTP(w, r)
	})
}

func (d *Dashboard) list(k section) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		v, status := d.listView(w, r, k)
		if v == nil {
			return
		}
		switch k.kind {
		case lock.KindSemaphore:
			d.render(w, r, status, semListPage(*v))
		case lock.KindElection:
			d.render(w, r, status, electListPage(*v))
		default:
			d.render(w, r, status, listPage(*v))
		}
	}
}

func (d *Dashboard) listFragment(k section) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		v, status := d.listView(w, r, k)
		if v == nil {
			return
		}
		switch k.kind {
		case lock.KindSemaphore:
			d.render(w, r, status, semTable(*v))
		case lock.KindElection:
			d.render(w, r, status, electTable(*v))
		default:
			d.render(w, r, status, lockTable(*v))
		}
	}
}

// listView reads one page of locks, semaphores or elections; nil means an
// error page was written. A key's prefixes apply to lock keys, semaphore
// and election names alike.
func (d *Dashboard) listView(w http.ResponseWriter, r *http.Request, k section) (*listView, int) {
	prefix, cursor := r.URL.Query().Get("prefix"), r.URL.Query().Get("cursor")
	id := d.identify(r)
	empty := func() *listView {
		v := newPageView(k, lock.Page{}, prefix, "", d.now(), id.Admin)
		return &v
	}
	if prefix != "" && !lock.ValidPrefix(prefix) {
		v := empty()
		v.Error = "A prefix is the start of a " + k.noun() + " name: at most 200 letters, digits and . _ : @ -."
		if k.kind == lock.KindLock {
			v.Error = "A prefix is the start of a lock key: at most 200 letters, digits and . _ : @ -."
		}
		return v, http.StatusBadRequest
	}
	scan, filter, err := id.Key.ListScope(prefix)
	if err != nil {
		v := empty()
		v.Error = "Your key may only see keys starting with " + strings.Join(id.Key.Prefixes, ", ") + "."
		v.Limited = id.Key.Prefixes
		return v, http.StatusForbidden
	}
	page, err := d.engine.List(r.Context(), k.kind, scan, d.pageSize, cursor)
	if err != nil {
		d.fail(w, r, err)
		return nil, 0
	}
	if filter {
		// A page may come out short, even empty, with a next page: the
		// pager still leads on.
		page.Locks = slices.DeleteFunc(page.Locks, func(s lock.State) bool {
			return !id.Key.MayTouch(s.Resource.Name)
		})
	}
	var v listView
	switch k.kind {
	case lock.KindSemaphore:
		v = newSemListView(page, prefix, cursor, d.now(), id.Admin)
	case lock.KindElection:
		v = newElectListView(page, prefix, cursor, d.now(), id.Admin)
	default:
		v = newListView(page, prefix, cursor, d.now(), id.Admin)
	}
	v.Limited = id.Key.Prefixes
	return &v, http.StatusOK
}

func (d *Dashboard) detail(k section) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		notice := takeFlash(w, r)
		if v, ok := d.detailView(w, r, k); ok {
			v.Notice = notice
			d.render(w, r, http.StatusOK, detailPage(v))
		}
	}
}

func (d *Dashboard) detailFragment(k section) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if v, ok := d.detailView(w, r, k); ok {
			d.render(w, r, http.StatusOK, detailBodyOf(v))
		}
	}
}

func (d *Dashboard) detailView(w http.ResponseWriter, r *http.Request, k section) (detailView, bool) {
	name, ok := d.key(w, r, k)
	if !ok || !d.mayTouch(w, r, k, name) {
		return detailView{}, false
	}
	res := k.resource(name)
	st, held, err := d.state(r.Context(), res)
	if err != nil {
		d.fail(w, r, err)
		return detailView{}, false
	}
	events, err := d.engine.History(r.Context(), res, historySize)
	if err != nil {
		d.fail(w, r, err)
		return detailView{}, false
	}
	v := newKindDetailView(k, name, st, held, events, d.now(), d.identify(r).Admin)
	// The renewals of several holders interleave: the chart is of one
	// lease's rhythm, so only a lock's single holder has one.
	if v.Single {
		renewals, err := d.engine.Renewals(r.Context(), res, rhythmSize)
		if err != nil {
			d.fail(w, r, err)
			return detailView{}, false
		}
		v.Rhythm = newRhythm(renewals)
	}
	return v, true
}

// targetOf reads which holders a confirmation or force-release is for:
// fence=N (one holder), all=1 (every holder) or neither. ok is false for
// anything else, with a 400 page written.
func (d *Dashboard) targetOf(w http.ResponseWriter, r *http.Request, fence, all string) (target, bool) {
	var t target
	bad := func() (target, bool) {
		d.badTarget(w, r)
		return target{}, false
	}
	switch all {
	case "":
	case "1":
		t.All = true
	default:
		return bad()
	}
	if fence != "" {
		n, err := strconv.ParseInt(fence, 10, 64)
		if err != nil || n <= 0 || t.All {
			return bad()
		}
		t.Fence = n
	}
	return t, true
}

// badTarget answers a form or link that names no holder to break.
func (d *Dashboard) badTarget(w http.ResponseWriter, r *http.Request) {
	d.problem(w, r, http.StatusBadRequest, "Bad form",
		"This form does not say which lease to break. Nothing was changed: open the lock again and retry.")
}

func (d *Dashboard) confirm(k section) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		name, ok := d.key(w, r, k)
		if !ok || !d.mayTouch(w, r, k, name) || !d.admin(w, r) {
			return
		}
		q := r.URL.Query()
		t, ok := d.targetOf(w, r, q.Get("fence"), q.Get("all"))
		if !ok {
			return
		}
		st, held, err := d.state(r.Context(), k.resource(name))
		if err != nil {
			d.fail(w, r, err)
			return
		}
		d.render(w, r, http.StatusOK, confirmPage(newConfirmView(k, name, st, held, t, d.csrf.token(w, r), "", "")))
	}
}

func (d *Dashboard) forceRelease(k section) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		name, ok := d.key(w, r, k)
		if !ok || !d.mayTouch(w, r, k, name) || !d.admin(w, r) {
			return
		}
		res := k.resource(name)
		r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
		if err := r.ParseForm(); err != nil {
			d.problem(w, r, http.StatusBadRequest, "Bad form", "The form could not be read; nothing was changed.")
			return
		}
		if !d.csrf.valid(r) {
			d.problem(w, r, http.StatusForbidden, "Form expired",
				"This form's security token is missing or no longer valid (lockd may have restarted). Nothing was changed: open the "+k.noun()+" again and retry.")
			return
		}
		// The fence of the lease the person saw and confirmed: if the key
		// has changed hands since, the new holder's lease is not broken.
		// Only all=1, a separate button that says so, breaks every holder,
		// whoever they are by then.
		t, ok := d.targetOf(w, r, r.PostFormValue("fence"), r.PostFormValue("all"))
		if !ok {
			return
		}
		if !t.All && t.Fence == 0 {
			d.badTarget(w, r)
			return
		}
		// The API's rule (lock.CheckText): a reason is shown in history and
		// printed by `lockd history`, so no control characters (F8).
		reason := strings.TrimSpace(r.PostFormValue("reason"))
		if err := lock.CheckText(reason, lock.MaxReason); err != nil {
			st, held, serr := d.state(r.Context(), res)
			if serr != nil {
				d.fail(w, r, serr)
				return
			}
			v := newConfirmView(k, name, st, held, t, d.csrf.token(w, r), strings.ToValidUTF8(reason, "\uFFFD"), "The reason "+err.Error()+"; nothing was changed.")
			d.render(w, r, http.StatusBadRequest, confirmPage(v))
			return
		}
		broken, err := d.engine.ForceReleaseFence(r.Context(), res, t.Fence, d.identify(r).Actor, reason)
		var outcome *notice
		// Two failures are news about the key, shown on its page with what
		// happened, as a success is.
		switch {
		case errors.Is(err, lock.ErrNotFound):
			outcome = notHeldNotice(k, name)
		case errors.Is(err, lock.ErrLeaseLost):
			outcome = changedHandsNotice(k, name, t.Fence)
		case err != nil:
			d.fail(w, r, err)
			return
		case t.All:
			outcome = brokenAllNotice(k, name)
		default:
			outcome = brokenNotice(k, name, broken)
		}
		// To the key's page, with the outcome on top: a reload there shows
		// the key again rather than resending the form.
		setFlash(w, r, outcome)
		http.Redirect(w, r, k.detailURL(name), http.StatusSeeOther)
	}
}

// key is the request's lock key, semaphore or election name; false means
// a 400 page was written.
func (d *Dashboard) key(w http.ResponseWriter, r *http.Request, k section) (string, bool) {
	key := routeKey(r)
	if !lock.ValidKey(key) {
		switch k.kind {
		case lock.KindSemaphore:
			d.problem(w, r, http.StatusBadRequest, "Not a semaphore name",
				"A semaphore name is 1 to 200 letters, digits and . _ : @ -, starting with a letter or digit.")
		case lock.KindElection:
			d.problem(w, r, http.StatusBadRequest, "Not an election name",
				"An election name is 1 to 200 letters, digits and . _ : @ -, starting with a letter or digit.")
		default:
			d.problem(w, r, http.StatusBadRequest, "Not a lock key",
				"A lock key is 1 to 200 letters, digits and . _ : @ -, starting with a letter or digit.")
		}
		return "", false
	}
	return key, true
}

// routeKey is the {key} of r's route, unescaped. chi matches the escaped
// path (RawPath) when the browser escaped more than it must
// (order%3Apay%3A1), and the decoded Path otherwise: only the former needs
// unescaping, once, as the API does it.
func routeKey(r *http.Request) string {
	key := chi.URLParam(r, "key")
	if r.URL.RawPath != "" {
		if u, err := url.PathUnescape(key); err == nil {
			key = u
		}
	}
	return key
}

// mayTouch reports whether r may see the lock key, semaphore or election
// name, writing a 403 page if not.
func (d *Dashboard) mayTouch(w http.ResponseWriter, r *http.Request, k section, name string) bool {
	if d.identify(r).Key.MayTouch(name) {
		return true
	}
	d.problem(w, r, http.StatusForbidden, "Not allowed", "Your API key may not see this "+k.noun()+": it is outside the key's prefixes.")
	return false
}

// admin reports whether r may force-release, writing a 403 page if not.
func (d *Dashboard) admin(w http.ResponseWriter, r *http.Request) bool {
	if d.identify(r).Admin {
		return true
	}
	d.problem(w, r, http.StatusForbidden, "Not allowed", "Force-release needs an admin key.")
	return false
}

// state is the key's live lease; held is false when there is none.
func (d *Dashboard) state(ctx context.Context, res lock.Resource) (st lock.State, held bool, err error) {
	st, err = d.engine.State(ctx, res)
	if errors.Is(err, lock.ErrNotFound) {
		return lock.State{}, false, nil
	}
	return st, err == nil, err
}

// fail answers an engine error with problem.Of, the table the API's
// problem+json comes from: the same status, title and detail on both. Only
// unexpected errors are logged, with their text kept off the page.
func (d *Dashboard) fail(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, context.Canceled) {
		return // the browser went away; nobody reads an answer
	}
	var res lock.Resource
	if name := routeKey(r); name != "" {
		res = sectionOf(r).resource(name)
	}
	p := problem.Of(err, res)
	if p.Internal {
		d.logger(r).Error().Err(err).Str("path", r.URL.Path).Msg("dashboard")
	}
	if p.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(p.RetryAfter))
	}
	d.problem(w, r, p.Status, p.Title, p.Detail)
}

func (d *Dashboard) problem(w http.ResponseWriter, r *http.Request, status int, title, detail string) {
	d.render(w, r, status, problemPage(problemView{Status: status, Title: title, Detail: detail}))
}

// render writes c whole or not at all: it renders into a buffer first so a
// template error becomes a clean 500, not half a page.
func (d *Dashboard) render(w http.ResponseWriter, r *http.Request, status int, c templ.Component) {
	var buf bytes.Buffer
	if err := c.Render(r.Context(), &buf); err != nil {
		d.logger(r).Error().Err(err).Str("path", r.URL.Path).Msg("dashboard render")
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	// Live data: never show a cached copy.
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// logger is the request's logger (with its request ID) when lockd's
// middleware serves the page, else the dashboard's.
func (d *Dashboard) logger(r *http.Request) *zerolog.Logger {
	if l := server.RequestLog(r); l.GetLevel() != zerolog.Disabled {
		return l
	}
	return &d.log
}
