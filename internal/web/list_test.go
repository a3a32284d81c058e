package web

import (
	"context"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"

	"github.com/lockd/lockd/internal/lock"
)

func TestList_ShowsEveryLiveLock(t *testing.T) {
	e := newEnv(t)
	a := e.acquire("list:a", "worker-1", 30*time.Second)
	e.acquire("list:b", "worker-2", 90*time.Second)
	// Re-enter and renew list:a so that count and renewals are not defaults.
	ctx := context.Background()
	if _, err := e.engine.Acquire(ctx, lock.Lock("list:a"), lock.AcquireRequest{Owner: "worker-1", TTL: 30 * time.Second, Token: a.Token}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.engine.Renew(ctx, lock.Lock("list:a"), lock.RenewRequest{Token: a.Token, TTL: 30 * time.Second, Actor: "test"}); err != nil {
		t.Fatal(err)
	}

	p := e.get("/")
	if p.status != http.StatusOK {
		t.Fatalf("status %d", p.status)
	}
	got := rows(p.doc)
	if len(got) != 2 {
		t.Fatalf("rows %v, want list:a and list:b", keysOf(got))
	}
	ra := got["list:a"]
	for id, want := range map[string]string{
		"key": "list:a", "owner": "worker-1", "fence": itoa(a.Fence), "count": "2", "renewals": "1", "waiters": "0",
	} {
		if g := text(ra.Find(`[data-testid="` + id + `"]`)); g != want {
			t.Errorf("list:a %s = %q, want %q", id, g, want)
		}
	}
	left := ra.Find(`[data-testid="left"] time`)
	if !regexp.MustCompile(`^(29|30) s left$`).MatchString(text(left)) {
		t.Errorf("TTL left %q, want about 30 s left", text(left))
	}
	if left.AttrOr("data-clock", "") != "left" || left.AttrOr("datetime", "") == "" || !strings.HasPrefix(left.AttrOr("title", ""), "expires ") {
		t.Errorf("TTL left is not a live <time>: %s", outer(left))
	}
	if g := text(ra.Find(`[data-testid="last-renewal"] time`)); !strings.HasSuffix(g, " s ago") {
		t.Errorf("last renewal %q", g)
	}
	if g := text(got["list:b"].Find(`[data-testid="last-renewal"]`)); g != "never" {
		t.Errorf("list:b last renewal %q, want never", g)
	}
	if href := ra.Find(`[data-testid="key"]`).AttrOr("href", ""); href != "/ui/locks/list:a" {
		t.Errorf("detail link %q", href)
	}
	if href := ra.Find(`[data-testid="force-release-link"]`).AttrOr("href", ""); href != "/ui/locks/list:a/force-release" {
		t.Errorf("force-release link %q", href)
	}
	// Semantic table: column headers, and the key heads its row.
	if n := p.doc.Find(`table thead th[scope="col"]`).Length(); n != 10 {
		t.Errorf("%d column headers, want 10", n)
	}
	if g := text(ra.Find(`[data-testid="mode"]`)); g != "exclusive" {
		t.Errorf("list:a mode %q, want exclusive", g)
	}
	if n := p.doc.Find(`table tbody th[scope="row"]`).Length(); n != 2 {
		t.Errorf("%d row headers, want 2", n)
	}
	if p.doc.Find(`label[for="prefix"]`).Length() != 1 || p.doc.Find(`form[method="get"] input#prefix`).Length() != 1 {
		t.Error("prefix filter is not a labelled GET form")
	}
	// htmx re-fetches the table from the fragment path.
	if g := p.doc.Find("#locks").AttrOr("hx-get", ""); g != "/ui/fragments/locks" {
		t.Errorf("hx-get %q", g)
	}
}

func TestList_EmptyState(t *testing.T) {
	e := newEnv(t)
	p := e.get("/")
	if p.status != http.StatusOK {
		t.Fatalf("status %d", p.status)
	}
	if p.doc.Find(`[data-testid="empty"]`).Length() != 1 || p.doc.Find("table").Length() != 0 {
		t.Fatalf("no empty state:\n%s", p.body)
	}
	if g := text(p.doc.Find(`[data-testid="empty"]`)); !strings.Contains(g, "No live locks.") {
		t.Errorf("empty state says %q", g)
	}
}

func TestList_PrefixFilter(t *testing.T) {
	e := newEnv(t)
	e.acquire("alpha:1", "a", 30*time.Second)
	e.acquire("alpha:2", "a", 30*time.Second)
	e.acquire("beta:1", "b", 30*time.Second)

	p := e.get("/?prefix=alpha:")
	if g := keysOf(rows(p.doc)); strings.Join(g, ",") != "alpha:1,alpha:2" {
		t.Errorf("prefix alpha: rows %v", g)
	}
	if v := p.doc.Find("#prefix").AttrOr("value", ""); v != "alpha:" {
		t.Errorf("filter input value %q", v)
	}
	if g := p.doc.Find("#locks").AttrOr("hx-get", ""); g != "/ui/fragments/locks?prefix=alpha%3A" {
		t.Errorf("hx-get %q keeps the prefix?", g)
	}

	p = e.get("/?prefix=gamma")
	if g := text(p.doc.Find(`[data-testid="empty"]`)); !strings.Contains(g, "No live locks with keys starting with gamma.") {
		t.Errorf("empty state with prefix: %q", g)
	}

	p = e.get("/?prefix=bad%20prefix")
	if p.status != http.StatusBadRequest || p.doc.Find(`[data-testid="error"]`).Length() != 1 {
		t.Errorf("bad prefix: status %d\n%s", p.status, p.body)
	}
}

func TestList_PagingByCursor(t *testing.T) {
	e := newEnv(t)
	e.dash.pageSize = 2
	want := []string{"page:1", "page:2", "page:3", "page:4", "page:5"}
	for _, k := range want {
		e.acquire(k, "w", 30*time.Second)
	}
	seen := map[string]int{}
	path, pages := "/", 0
	for path != "" {
		pages++
		if pages > 10 {
			t.Fatal("paging does not end")
		}
		p := e.get(path)
		if p.status != http.StatusOK {
			t.Fatalf("%s: status %d", path, p.status)
		}
		for k := range rows(p.doc) {
			seen[k]++
		}
		if pages > 1 && p.doc.Find(`[data-testid="first-page"]`).AttrOr("href", "") != "/" {
			t.Errorf("page %d has no first-page link", pages)
		}
		path = p.doc.Find(`[data-testid="next-page"]`).AttrOr("href", "")
	}
	for _, k := range want {
		if seen[k] != 1 {
			t.Errorf("%s listed %d times over %d pages", k, seen[k], pages)
		}
	}
}

func TestList_FragmentAndBadCursor(t *testing.T) {
	e := newEnv(t)
	e.acquire("frag:1", "w", 30*time.Second)
	p := e.get("/ui/fragments/locks")
	if p.status != http.StatusOK || strings.Contains(p.body, "<html") || !strings.HasPrefix(p.body, `<section id="locks"`) {
		t.Fatalf("fragment: status %d\n%s", p.status, p.body)
	}
	if len(rows(p.doc)) != 1 {
		t.Errorf("fragment rows %v", keysOf(rows(p.doc)))
	}
	p = e.get("/?cursor=not-a-cursor")
	// The API's words for it (problem.Of), which say what to do.
	if p.status != http.StatusBadRequest || !strings.Contains(text(p.doc.Find(`[data-testid="problem"]`)), "start again from the first page") {
		t.Errorf("bad cursor: %d %q", p.status, text(p.doc.Find("main")))
	}
}

func TestSecurityHeaders(t *testing.T) {
	e := newEnv(t)
	e.acquire("hdr:1", "w", 30*time.Second)
	e.permit("hdr:s", "w", 2, 30*time.Second)
	for _, path := range []string{"/", "/ui/fragments/locks", "/ui/locks/hdr:1", "/ui/locks/hdr:1/force-release", "/ui/locks/-bad", "/ui/assets/app.js",
		"/ui/semaphores", "/ui/fragments/semaphores", "/ui/semaphores/hdr:s", "/ui/fragments/semaphores/hdr:s", "/ui/semaphores/hdr:s/force-release", "/ui/semaphores/-bad"} {
		p := e.get(path)
		csp := p.header.Get("Content-Security-Policy")
		for _, want := range []string{"script-src 'self'", "frame-ancestors 'none'", "default-src 'none'"} {
			if !strings.Contains(csp, want) {
				t.Errorf("%s: CSP %q lacks %q", path, csp, want)
			}
		}
		if strings.Contains(csp, "unsafe-inline") || strings.Contains(csp, "unsafe-eval") {
			t.Errorf("%s: CSP allows inline script or eval: %q", path, csp)
		}
		if p.header.Get("X-Content-Type-Options") != "nosniff" || p.header.Get("Referrer-Policy") == "" {
			t.Errorf("%s: headers %v", path, p.header)
		}
	}
}

// TestAssets_Embedded checks that every script and stylesheet a page loads
// is served by lockd itself, and that pages have no inline script.
func TestAssets_Embedded(t *testing.T) {
	e := newEnv(t)
	p := e.get("/")
	var urls []string
	p.doc.Find("script").Each(func(_ int, s *goquery.Selection) {
		src, ok := s.Attr("src")
		if !ok || strings.TrimSpace(s.Text()) != "" {
			t.Errorf("inline script: %s", outer(s))
		}
		urls = append(urls, src)
	})
	p.doc.Find(`link[rel="stylesheet"]`).Each(func(_ int, s *goquery.Selection) { urls = append(urls, s.AttrOr("href", "")) })
	if len(urls) != 3 {
		t.Errorf("assets %v, want htmx, app.js and the stylesheet", urls)
	}
	for _, u := range urls {
		if !strings.HasPrefix(u, assetsPath) {
			t.Errorf("%s is not served by lockd", u)
			continue
		}
		a := e.get(u)
		if a.status != http.StatusOK || len(a.body) < 100 {
			t.Errorf("%s: status %d, %d bytes", u, a.status, len(a.body))
		}
	}
	if a := e.get("/ui/assets/"); a.status != http.StatusNotFound {
		t.Errorf("asset directory listing: status %d", a.status)
	}
}
