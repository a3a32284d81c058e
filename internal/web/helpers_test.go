package web

import (
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"
	"github.com/rs/zerolog"

	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/lockdtest"
	"github.com/lockd/lockd/internal/server"
)

// env is lockd's real router (API and dashboard) on a real Redis.
type env struct {
	t      *testing.T
	engine *lock.Engine
	dash   *Dashboard
	ts     *httptest.Server
	client *http.Client // keeps cookies, like a browser
}

func newEnv(t *testing.T) *env {
	t.Helper()
	var dash *Dashboard
	ld := lockdtest.Start(t, lockdtest.Options{Dashboard: func(e *lock.Engine, _ zerolog.Logger) server.Dashboard {
		dash = NewDashboard(e, zerolog.Nop())
		return dash
	}})
	return newClientEnv(t, ld, dash)
}

// newClientEnv wraps a running lockd with a client that keeps cookies,
// like a browser.
func newClientEnv(t *testing.T, ld *lockdtest.Lockd, dash *Dashboard) *env {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	client := ld.HTTP.Client()
	client.Jar = jar
	return &env{t: t, engine: ld.Engine, dash: dash, ts: ld.HTTP, client: client}
}

// acquire takes key for owner through the engine.
func (e *env) acquire(key, owner string, ttl time.Duration) lock.Lease {
	e.t.Helper()
	l, err := e.engine.Acquire(context.Background(), lock.Lock(key), lock.AcquireRequest{Owner: owner, TTL: ttl, Actor: "test"})
	if err != nil {
		e.t.Fatalf("acquire %s: %v", key, err)
	}
	return l
}

// page is one fetched response.
type page struct {
	status int
	header http.Header
	body   string
	doc    *goquery.Document
}

func (e *env) get(path string) page {
	e.t.Helper()
	resp, err := e.client.Get(e.ts.URL + path)
	if err != nil {
		e.t.Fatalf("GET %s: %v", path, err)
	}
	return e.read(resp)
}

// follow opens the page that p redirects to (a client that does not
// follow redirects by itself), or returns p.
func (e *env) follow(p page) page {
	e.t.Helper()
	if p.status != http.StatusSeeOther {
		return p
	}
	return e.get(p.header.Get("Location"))
}

func (e *env) post(path string, form url.Values, header http.Header) page {
	e.t.Helper()
	req, err := http.NewRequest(http.MethodPost, e.ts.URL+path, strings.NewReader(form.Encode()))
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := e.client.Do(req)
	if err != nil {
		e.t.Fatalf("POST %s: %v", path, err)
	}
	return e.read(resp)
}

func (e *env) read(resp *http.Response) page {
	e.t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	doc, err := goquery.NewDocumentFromReader(strings.NewReader(string(b)))
	if err != nil {
		e.t.Fatal(err)
	}
	return page{status: resp.StatusCode, header: resp.Header, body: string(b), doc: doc}
}

// held reports whether key has a live lease, failing on other errors.
func (e *env) held(res lock.Resource) (lock.State, bool) {
	e.t.Helper()
	st, err := e.engine.State(context.Background(), res)
	if err == lock.ErrNotFound {
		return st, false
	}
	if err != nil {
		e.t.Fatal(err)
	}
	return st, true
}

// text is the trimmed, space-collapsed text of sel.
func text(sel *goquery.Selection) string {
	return strings.Join(strings.Fields(sel.Text()), " ")
}

// rows maps each list row's key to its row.
func rows(doc *goquery.Document) map[string]*goquery.Selection {
	m := map[string]*goquery.Selection{}
	doc.Find(`[data-testid="lock-row"]`).Each(func(_ int, s *goquery.Selection) {
		m[s.AttrOr("data-key", "")] = s
	})
	return m
}

func keysOf(m map[string]*goquery.Selection) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func outer(s *goquery.Selection) string {
	h, _ := goquery.OuterHtml(s)
	return h
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
