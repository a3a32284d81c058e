package web

import (
	"context"
	"fmt"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"

	"github.com/lockd/lockd/internal/lock"
)

// campaign makes candidate the leader of election name, with value (JSON
// or "").
func (e *env) campaign(name, candidate, value string, ttl time.Duration) lock.Lease {
	e.t.Helper()
	return e.acquireReq(lock.Election(name), lock.AcquireRequest{Owner: candidate, Value: value, TTL: ttl})
}

// electRows maps each elections-list row's name to its row.
func electRows(doc *goquery.Document) map[string]*goquery.Selection {
	m := map[string]*goquery.Selection{}
	doc.Find(`[data-testid="elect-row"]`).Each(func(_ int, s *goquery.Selection) {
		m[s.AttrOr("data-name", "")] = s
	})
	return m
}

// terms is an election page's timeline: "leader term end" per term,
// newest first.
func terms(doc *goquery.Document) []string {
	var out []string
	doc.Find(`[data-testid="terms"] [data-testid="term-entry"]`).Each(func(_ int, s *goquery.Selection) {
		out = append(out, text(s.Find(`[data-testid="term-leader"]`))+" "+text(s.Find(`[data-testid="term-number"]`))+" "+text(s.Find(`[data-testid="term-end"]`)))
	})
	return out
}

// The elections list shows each leader with its term, value, TTL and
// candidates, apart from a lock of the same name; the election's page
// shows the leader, its value indented, the candidates in line and the
// terms, and follows a proclaim and a resignation.
func TestElections_ListAndDetail(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	a := e.campaign("svc:billing", "host-a", `{"addr":"10.0.0.7:8080","zone":"eu-1"}`, 30*time.Second)
	next := e.enqueue(lock.Election("svc:billing"), lock.AcquireRequest{Owner: "host-b", TTL: 30 * time.Second})
	e.campaign("svc:search", "host-c", "", time.Minute)
	e.acquire("svc:billing", "a lock", time.Minute)

	if got := keysOf(rows(e.get("/").doc)); strings.Join(got, ",") != "svc:billing" {
		t.Errorf("locks page lists %v, want the lock svc:billing only", got)
	}
	list := e.get("/ui/elections")
	if list.status != http.StatusOK {
		t.Fatalf("status %d\n%s", list.status, list.body)
	}
	if list.doc.Find(`[data-testid="nav-elections"]`).AttrOr("href", "") != "/ui/elections" {
		t.Error("no link to the elections in the layout")
	}
	if strings.Contains(list.body, "elect/") {
		t.Error("the elections page shows a Redis key part (elect/…)")
	}
	els := electRows(list.doc)
	if strings.Join(keysOf(els), ",") != "svc:billing,svc:search" {
		t.Fatalf("elections %v, want svc:billing and svc:search", keysOf(els))
	}
	row := els["svc:billing"]
	for id, want := range map[string]string{
		"name": "svc:billing", "owner": "host-a", "term": itoa(a.Fence),
		"value": `{"addr":"10.0.0.7:8080","zone":"eu-1"}`, "waiters": "1",
	} {
		if g := text(row.Find(`[data-testid="` + id + `"]`)); g != want {
			t.Errorf("row %s = %q, want %q", id, g, want)
		}
	}
	if g := text(row.Find(`[data-testid="left"] time`)); !strings.HasSuffix(g, " s left") {
		t.Errorf("TTL left %q", g)
	}
	if g := row.Find(`[data-testid="since"] time`).AttrOr("title", ""); !strings.HasPrefix(g, "since ") {
		t.Errorf("leading for: title %q", g)
	}
	if g := text(els["svc:search"].Find(`[data-testid="value"]`)); g != "none" {
		t.Errorf("no value shown as %q", g)
	}
	if href := row.Find(`[data-testid="name"]`).AttrOr("href", ""); href != "/ui/elections/svc:billing" {
		t.Errorf("detail link %q", href)
	}
	if g := list.doc.Find("#elections").AttrOr("hx-get", ""); g != "/ui/fragments/elections" {
		t.Errorf("hx-get %q", g)
	}
	if f := e.get("/ui/fragments/elections?prefix=svc%3As"); f.status != http.StatusOK || !strings.HasPrefix(f.body, `<section id="elections"`) ||
		strings.Join(keysOf(electRows(f.doc)), ",") != "svc:search" {
		t.Errorf("filtered fragment: %d %v", f.status, keysOf(electRows(f.doc)))
	}

	p := e.get("/ui/elections/svc:billing")
	if p.status != http.StatusOK || text(p.doc.Find("h1")) != "Election svc:billing" {
		t.Fatalf("detail: %d %q\n%s", p.status, text(p.doc.Find("h1")), p.body)
	}
	for id, want := range map[string]string{"leader": "host-a", "term": itoa(a.Fence), "waiters": "1"} {
		if g := text(p.doc.Find(`[data-testid="state"] [data-testid="` + id + `"]`)); g != want {
			t.Errorf("state %s = %q, want %q", id, g, want)
		}
	}
	if g := p.doc.Find(`pre[data-testid="value"]`).Text(); g != "{\n  \"addr\": \"10.0.0.7:8080\",\n  \"zone\": \"eu-1\"\n}" {
		t.Errorf("value shown as %q, want it indented", g)
	}
	if g := strings.Join(queueOwners(p.doc), ","); g != "host-b" {
		t.Errorf("candidates %q", g)
	}
	if g := p.doc.Find("#detail").AttrOr("hx-get", ""); g != "/ui/fragments/elections/svc:billing" {
		t.Errorf("hx-get %q", g)
	}
	if f := e.get("/ui/fragments/elections/svc:billing"); f.status != http.StatusOK || text(f.doc.Find(`[data-testid="leader"]`)) != "host-a" {
		t.Errorf("detail fragment: %d", f.status)
	}
	if g := strings.Join(terms(p.doc), ","); g != "host-a "+itoa(a.Fence)+" leading" {
		t.Errorf("terms %q", g)
	}

	// host-a proclaims a new value, then resigns: host-b leads.
	if _, err := e.engine.Renew(ctx, lock.Election("svc:billing"), lock.RenewRequest{Token: a.Token, Actor: "host-a", Value: `{"state":"draining"}`}); err != nil {
		t.Fatal(err)
	}
	if g := e.get("/ui/elections/svc:billing").doc.Find(`pre[data-testid="value"]`).Text(); g != "{\n  \"state\": \"draining\"\n}" {
		t.Errorf("value after the proclaim %q", g)
	}
	if _, err := e.engine.Release(ctx, lock.Election("svc:billing"), a.Token, "host-a"); err != nil {
		t.Fatal(err)
	}
	var b lock.Lease
	select {
	case w := <-next:
		if w.err != nil {
			t.Fatal(w.err)
		}
		b = w.lease
	case <-time.After(5 * time.Second):
		t.Fatal("host-b did not lead after host-a resigned")
	}
	p = e.get("/ui/elections/svc:billing")
	if g := text(p.doc.Find(`[data-testid="leader"]`)); g != "host-b" {
		t.Errorf("leader %q, want host-b", g)
	}
	if p.doc.Find(`[data-testid="no-value"]`).Length() != 1 || p.doc.Find(`[data-testid="queue-empty"]`).Length() != 1 {
		t.Error("host-b has no value and nobody waits, the page says otherwise")
	}
	want := []string{"host-b " + itoa(b.Fence) + " leading", "host-a " + itoa(a.Fence) + " resigned"}
	if g := terms(p.doc); strings.Join(g, ",") != strings.Join(want, ",") {
		t.Fatalf("terms %q, want %q", g, want)
	}
	old := p.doc.Find(`[data-testid="term-entry"]`).Eq(1)
	if old.Find(`[data-testid="proclaimed"]`).Length() != 1 || text(old.Find(`[data-testid="term-actor"]`)) != "host-a" ||
		old.Find(`[data-testid="term-from"] time`).Length() != 1 || old.Find(`[data-testid="term-to"] time`).Length() != 1 ||
		text(old.Find(`[data-testid="term-lasted"]`)) == "" {
		t.Errorf("host-a's term: %s", outer(old))
	}
}

// A value's markup is text on every election page, and so are a
// candidate's and a leader's names.
func TestElections_Escaping(t *testing.T) {
	e := newEnv(t)
	value := `{"note":"<script>alert(1)</script>","img":"<img src=x onerror=alert(2)>"}`
	leader := `<b>"leader"</b>`
	waiter := `<img src=x onerror=alert(3)>`
	e.campaign("xss:el", leader, value, 30*time.Second)
	e.enqueue(lock.Election("xss:el"), lock.AcquireRequest{Owner: waiter, TTL: 30 * time.Second})

	detail := e.get("/ui/elections/xss:el")
	if g := detail.doc.Find(`pre[data-testid="value"]`).Text(); !strings.Contains(g, `"note": "<script>alert(1)</script>"`) {
		t.Errorf("value shown as %q", g)
	}
	if g := text(detail.doc.Find(`[data-testid="leader"]`)); g != leader {
		t.Errorf("leader shown as %q", g)
	}
	if g := queueOwners(detail.doc); len(g) != 1 || g[0] != waiter {
		t.Errorf("candidate shown as %q", g)
	}
	list := e.get("/ui/elections")
	if g := text(electRows(list.doc)["xss:el"].Find(`[data-testid="value"]`)); !strings.HasPrefix(g, `{"note":"<script>alert(1)</script>"`) || !strings.HasSuffix(g, "…") {
		t.Errorf("short value %q, want it cut and as text", g)
	}
	pages := map[string]page{
		"list":         list,
		"detail":       detail,
		"fragment":     e.get("/ui/fragments/elections/xss:el"),
		"confirm":      e.get("/ui/elections/xss:el/force-release"),
		"bad prefix":   e.get("/ui/elections?prefix=" + url.QueryEscape(`<script>alert(1)</script>`)),
		"bad name":     e.get("/ui/elections/" + url.PathEscape(`"><svg onload=alert(1)>`)),
		"bad confirm":  e.get("/ui/elections/" + url.PathEscape(`"><svg onload=alert(1)>`) + "/force-release"),
		"list escaped": e.get("/ui/fragments/elections"),
	}
	for name, p := range pages {
		want := 2 // the layout's two, loaded by src
		if strings.HasPrefix(p.body, "<section") || strings.HasPrefix(p.body, "<div") {
			want = 0 // a fragment has no layout
		}
		if n := strings.Count(p.body, "<script"); n != want {
			t.Errorf("%s: %d <script elements, want %d\n%s", name, n, want, p.body)
		}
		for _, bad := range []string{"<img src=x", "<svg", "<b>", "alert(1)</script>"} {
			if strings.Contains(p.body, bad) {
				t.Errorf("%s: unescaped %q in the page", name, bad)
			}
		}
	}
}

// Names follow the key rules; an election nobody ever led has a page that
// says it is vacant and has no terms; a prefix nothing matches shows the
// empty state; paging and a bad prefix work as on the other lists.
func TestElections_EmptyNamesAndPaging(t *testing.T) {
	e := newEnv(t)
	if p := e.get("/ui/elections"); p.status != http.StatusOK || p.doc.Find(`[data-testid="empty"]`).Length() != 1 ||
		!strings.Contains(text(p.doc.Find(`[data-testid="empty"]`)), "No election has a leader.") {
		t.Errorf("empty list: %d\n%s", p.status, p.body)
	}
	p := e.get("/ui/elections/never:led")
	if p.status != http.StatusOK || p.doc.Find(`[data-testid="not-held"]`).Length() != 1 || p.doc.Find(`[data-testid="no-history"]`).Length() != 1 {
		t.Errorf("unknown election: %d\n%s", p.status, p.body)
	}
	if p.doc.Find(`[data-testid="force-release-link"]`).Length() != 0 {
		t.Error("a vacant election offers force-release")
	}
	if p := e.get("/ui/elections/never:led/force-release"); p.status != http.StatusOK || p.doc.Find(`[data-testid="not-held"]`).Length() != 1 || p.doc.Find("form.confirm").Length() != 0 {
		t.Errorf("confirm on a vacant election: %d", p.status)
	}
	for _, tc := range []struct {
		path   string
		status int
		h1     string
	}{
		{"/ui/elections/-starts-with-dash", 400, "Not an election name"},
		{"/ui/elections/elect%2Fx", 400, "Not an election name"},
		{"/ui/fragments/elections/-bad", 400, "Not an election name"},
		{"/ui/elections?prefix=bad%20prefix", 400, "Elections"},
		{"/ui/elections/a/b", 404, ""},
	} {
		p := e.get(tc.path)
		if p.status != tc.status || text(p.doc.Find("h1")) != tc.h1 {
			t.Errorf("%s: %d %q, want %d %q", tc.path, p.status, text(p.doc.Find("h1")), tc.status, tc.h1)
		}
	}

	e.dash.pageSize = 2
	want := []string{"page:1", "page:2", "page:3", "page:4", "page:5"}
	for _, n := range want {
		e.campaign(n, "w", "", 30*time.Second)
	}
	if p := e.get("/ui/elections?prefix=zzz"); !strings.Contains(text(p.doc.Find(`[data-testid="empty"]`)), "No election with a name starting with zzz has a leader.") {
		t.Errorf("empty state with a prefix: %s", text(p.doc.Find(`[data-testid="empty"]`)))
	}
	seen := map[string]int{}
	path, pages := "/ui/elections?prefix=page%3A", 0
	for path != "" {
		if pages++; pages > 10 {
			t.Fatal("paging does not end")
		}
		p := e.get(path)
		for n := range electRows(p.doc) {
			seen[n]++
		}
		path = p.doc.Find(`[data-testid="next-page"]`).AttrOr("href", "")
	}
	for _, n := range want {
		if seen[n] != 1 {
			t.Errorf("%s listed %d times over %d pages", n, seen[n], pages)
		}
	}
}

// Force-releasing the leader: a confirmation that names the leader and
// its term, a fence-guarded form with a CSRF token; the next candidate
// leads and the terms say how the old one ended. A form for a term that
// has ended breaks nothing, and a post without a token is refused.
func TestElections_ForceRelease(t *testing.T) {
	e := newEnv(t)
	a := e.campaign("el:stuck", "host-a", `{"v":1}`, 30*time.Second)
	next := e.enqueue(lock.Election("el:stuck"), lock.AcquireRequest{Owner: "host-b", TTL: 30 * time.Second})

	p := e.get("/ui/elections/el:stuck")
	if href := p.doc.Find(`[data-testid="force-release-link"]`).AttrOr("href", ""); href != "/ui/elections/el:stuck/force-release" {
		t.Fatalf("force-release link %q", href)
	}
	c := e.get("/ui/elections/el:stuck/force-release")
	if g := text(c.doc.Find("h1")); g != "Force-release the leader of el:stuck?" {
		t.Errorf("confirm h1 %q", g)
	}
	if g := text(c.doc.Find("main")); !strings.Contains(g, "This ends the leadership of host-a (term "+itoa(a.Fence)+",") {
		t.Errorf("confirm text %q", g)
	}
	path := "/ui/elections/el:stuck/force-release"
	_, form := e.confirmTarget(path)
	if form.Get("fence") != itoa(a.Fence) {
		t.Fatalf("form %v, want the term %d", form, a.Fence)
	}
	for _, tc := range []struct {
		name   string
		form   url.Values
		header http.Header
	}{
		{"no token", url.Values{"fence": {itoa(a.Fence)}}, nil},
		{"cross-site post", form, http.Header{"Sec-Fetch-Site": {"cross-site"}}},
	} {
		if p := e.post(path, tc.form, tc.header); p.status != http.StatusForbidden {
			t.Errorf("%s: status %d, want 403", tc.name, p.status)
		}
	}
	if st, held := e.held(lock.Election("el:stuck")); !held || st.Owner != "host-a" {
		t.Fatal("a refused post ended the leadership")
	}

	form.Set("reason", "host-a hangs")
	b := e.post(path, form, nil)
	if b.status != http.StatusOK {
		t.Fatalf("force-release: %d\n%s", b.status, b.body)
	}
	if g := text(b.doc.Find(`[data-testid="notice"]`)); !strings.Contains(g, "host-a") || !strings.Contains(g, "term "+itoa(a.Fence)) {
		t.Errorf("notice %q", g)
	}
	var succ lock.Lease
	select {
	case w := <-next:
		if w.err != nil {
			t.Fatal(w.err)
		}
		succ = w.lease
	case <-time.After(5 * time.Second):
		t.Fatal("host-b did not lead after the force-release")
	}
	p = e.get("/ui/elections/el:stuck")
	want := []string{"host-b " + itoa(succ.Fence) + " leading", "host-a " + itoa(a.Fence) + " force-released"}
	if g := terms(p.doc); strings.Join(g, ",") != strings.Join(want, ",") {
		t.Fatalf("terms %q, want %q", g, want)
	}
	old := p.doc.Find(`[data-testid="term-entry"]`).Eq(1)
	if text(old.Find(`[data-testid="term-actor"]`)) != "dashboard@127.0.0.1" || text(old.Find(`[data-testid="term-reason"]`)) != "host-a hangs" {
		t.Errorf("the broken term: %s", outer(old))
	}

	// The same form again: its term has ended and host-b leads; nothing
	// is broken.
	again := e.post(path, form, nil)
	if again.status != http.StatusOK || !strings.Contains(text(again.doc.Find(`[data-testid="notice"]`)), "The leadership changed hands; nothing was broken.") {
		t.Errorf("stale form: %d %q", again.status, text(again.doc.Find(`[data-testid="notice"]`)))
	}
	if st, held := e.held(lock.Election("el:stuck")); !held || st.Fence != succ.Fence {
		t.Fatal("a stale form broke the new leader")
	}
}

// The election pages follow their own event stream: election changes
// under the prefix, never a lock's or a semaphore's of the same name; the
// locks' stream never an election's.
func TestLiveEvents_Elections(t *testing.T) {
	e := newEnv(t)
	if src := e.get("/ui/elections?prefix=live:").doc.Find("[data-live]").AttrOr("data-live", ""); src != "/ui/events?kind=elections&prefix=live%3A" {
		t.Errorf("list data-live = %q", src)
	}
	src := e.get("/ui/elections/live:e").doc.Find("[data-live]").AttrOr("data-live", "")
	if src != "/ui/events?kind=elections&prefix=live%3Ae" {
		t.Fatalf("detail data-live = %q", src)
	}
	first := func(lines <-chan string) string {
		t.Helper()
		deadline := time.After(5 * time.Second)
		for {
			select {
			case l := <-lines:
				if strings.HasPrefix(l, "data: ") {
					return l
				}
			case <-deadline:
				t.Fatal("no change event in 5 s")
			}
		}
	}
	lines := e.live(src, "")
	e.acquire("live:e", "w", time.Minute)
	e.permit("live:e", "w", 2, time.Minute)
	e.campaign("live:e", "host-a", "", time.Minute)
	if got, want := first(lines), `data: {"key":"live:e","kind":"election","type":"acquired"}`; got != want {
		t.Errorf("elections stream: first change %s, want %s", got, want)
	}
	lines = e.live("/ui/events?prefix=live2:", "")
	e.campaign("live2:x", "host-a", "", time.Minute)
	e.acquire("live2:x", "w", time.Minute)
	if got, want := first(lines), `data: {"key":"live2:x","kind":"lock","type":"acquired"}`; got != want {
		t.Errorf("locks stream: first change %s, want %s", got, want)
	}
}

// Election pages keep the other pages' rules: a session to see them,
// admin scope to break a leadership, and a key's prefixes apply to names.
func TestAuth_Elections(t *testing.T) {
	e, _ := newAuthEnv(t)
	e.campaign("ci:leader", "host-ci", "", 30*time.Second)
	dep := e.campaign("deploy:leader", "host-dep", `{"secret-ish":"only for deploy"}`, 30*time.Second)

	for path, want := range map[string]string{
		"/ui/elections":                         "/ui/login?next=%2Fui%2Felections",
		"/ui/elections/ci:leader":               "/ui/login?next=%2Fui%2Felections%2Fci%3Aleader",
		"/ui/elections/ci:leader/force-release": "/ui/login?next=%2Fui%2Felections%2Fci%3Aleader%2Fforce-release",
		"/ui/fragments/elections/ci:leader":     "/ui/login?next=%2Fui%2Ffragments%2Felections%2Fci%3Aleader",
		"/ui/events?kind=elections&prefix=ci:":  "/ui/login?next=%2Fui%2Fevents%3Fkind%3Delections%26prefix%3Dci%3A",
	} {
		p := e.get(path)
		if p.status != http.StatusSeeOther || p.header.Get("Location") != want {
			t.Errorf("GET %s: %d to %q, want 303 to %q", path, p.status, p.header.Get("Location"), want)
		}
	}

	// The ci key sees ci:leader only.
	e.mustLogin(ciKey)
	if got := keysOf(electRows(e.get("/ui/elections").doc)); strings.Join(got, ",") != "ci:leader" {
		t.Errorf("ci key lists elections %v", got)
	}
	if p := e.get("/ui/elections?prefix=deploy%3A"); p.status != http.StatusForbidden || len(electRows(p.doc)) != 0 {
		t.Errorf("prefix outside the key's: %d", p.status)
	}
	for _, path := range []string{"/ui/elections/deploy:leader", "/ui/fragments/elections/deploy:leader", "/ui/elections/deploy:leader/force-release"} {
		if p := e.get(path); p.status != http.StatusForbidden || strings.Contains(p.body, "host-dep") || strings.Contains(p.body, "only for deploy") {
			t.Errorf("GET %s by the ci key: %d", path, p.status)
		}
	}
	if p := e.get("/ui/elections/ci:leader"); p.status != http.StatusOK || text(p.doc.Find(`[data-testid="leader"]`)) != "host-ci" {
		t.Errorf("own election: %d", p.status)
	}
	// Its event stream carries no election outside its prefixes.
	lines := e.live("/ui/events?kind=elections", "")
	e.campaign("deploy:other", "host-x", "", 30*time.Second)
	e.campaign("ci:other", "host-y", "", 30*time.Second)
	deadline := time.After(5 * time.Second)
	for got := ""; got == ""; {
		select {
		case l := <-lines:
			if strings.HasPrefix(l, "data: ") {
				got = l
				if want := `data: {"key":"ci:other","kind":"election","type":"acquired"}`; got != want {
					t.Errorf("ci key's stream: %s, want %s", got, want)
				}
			}
		case <-deadline:
			t.Fatal("no change event in 5 s")
		}
	}

	// A read key sees, and may not break.
	e.client.Jar, _ = cookiejar.New(nil)
	e.mustLogin(viewerKey)
	p := e.get("/ui/elections")
	if len(electRows(p.doc)) != 4 || p.doc.Find(`[data-testid="force-release-link"]`).Length() != 0 {
		t.Errorf("read key: %v, force links %d", keysOf(electRows(p.doc)), p.doc.Find(`[data-testid="force-release-link"]`).Length())
	}
	if d := e.get("/ui/elections/deploy:leader"); d.doc.Find(`[data-testid="force-release-link"]`).Length() != 0 {
		t.Error("a read key is offered force-release on an election's page")
	}
	token := p.doc.Find(`form.signout input[name="csrf"]`).AttrOr("value", "")
	if p := e.post("/ui/elections/deploy:leader/force-release", url.Values{"csrf": {token}, "fence": {itoa(dep.Fence)}}, nil); p.status != http.StatusForbidden {
		t.Errorf("force-release by a read key: %d", p.status)
	}

	// An admin breaks a leadership as its key's name.
	e.client.Jar, _ = cookiejar.New(nil)
	e.mustLogin(opsKey)
	_, form := e.confirmTarget("/ui/elections/deploy:leader/force-release")
	b := e.follow(e.post("/ui/elections/deploy:leader/force-release", form, nil))
	if b.status != http.StatusOK {
		t.Fatalf("admin force-release: %d\n%s", b.status, b.body)
	}
	if g := text(b.doc.Find(`[data-testid="term-entry"]`).First().Find(`[data-testid="term-actor"]`)); g != "ops" {
		t.Errorf("actor %q, want ops", g)
	}
	if _, held := e.held(lock.Election("deploy:leader")); held {
		t.Error("the leadership outlived the admin's force-release")
	}
}

// newTerms reads the terms from the history alone: a release that gave
// back one re-entry level does not end a term, a leader whose start the
// history no longer holds still leads, and a term with no end that is not
// the current one says so.
func TestNewTerms(t *testing.T) {
	at := func(d time.Duration) time.Time { return goldenNow.Add(-d) }
	events := []lock.Event{ // newest first, as History returns them
		{Type: "released", At: at(time.Second), Owner: "c", Fence: 30, Count: 1, Actor: "c"},
		{Type: "reentered", At: at(2 * time.Second), Owner: "c", Fence: 30, Count: 2},
		{Type: "acquired", At: at(3 * time.Second), Owner: "b", Fence: 20, Count: 1},
		{Type: "proclaimed", At: at(4 * time.Second), Owner: "a", Fence: 10, Count: 1},
		{Type: "proclaimed", At: at(5 * time.Second), Owner: "a", Fence: 10, Count: 1},
	}
	leader := lock.State{Owner: "c", Fence: 30, AcquiredAt: at(time.Minute)}
	got := newTerms(events, leader, goldenNow)
	var summary []string
	for _, r := range got {
		summary = append(summary, fmt.Sprintf("%s %d %q %s known=%v proclaims=%d", r.Leader, r.Term, r.End, r.Badge, r.BeganKnown, len(r.Proclaimed)))
	}
	want := []string{
		`c 30 "leading" acquired known=true proclaims=0`,
		`b 20 "" unknown known=true proclaims=0`,
		`a 10 "" unknown known=false proclaims=2`,
	}
	if strings.Join(summary, "\n") != strings.Join(want, "\n") {
		t.Errorf("terms:\n%s\nwant:\n%s", strings.Join(summary, "\n"), strings.Join(want, "\n"))
	}
	if got[0].Began.ISO != iso(leader.AcquiredAt) || got[2].Proclaimed[0].ISO != iso(at(4*time.Second)) {
		t.Errorf("the leader's start %s, the newest proclaim %s", got[0].Began.ISO, got[2].Proclaimed[0].ISO)
	}
	if len(newTerms(nil, lock.State{}, goldenNow)) != 0 {
		t.Error("terms without a history or a leader")
	}
}
