package web

import (
	"bufio"
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"

	"github.com/lockd/lockd/internal/lock"
)

// semRows maps each semaphores-list row's name to its row.
func semRows(doc *goquery.Document) map[string]*goquery.Selection {
	m := map[string]*goquery.Selection{}
	doc.Find(`[data-testid="sem-row"]`).Each(func(_ int, s *goquery.Selection) {
		m[s.AttrOr("data-name", "")] = s
	})
	return m
}

// permit takes a permit of semaphore name (limit) for owner.
func (e *env) permit(name, owner string, limit int, ttl time.Duration) lock.Lease {
	e.t.Helper()
	return e.acquireReq(lock.Semaphore(name), lock.AcquireRequest{Owner: owner, Limit: limit, TTL: ttl})
}

// A semaphore and a lock of the same name are apart: each on its own
// page. The semaphore's row has used/limit, its page every permit; one
// permit is force-released by fence, and the lock is untouched.
func TestSemaphores_ListDetailAndForceRelease(t *testing.T) {
	e := newEnv(t)
	p1 := e.permit("pool:a", "job-1", 3, 20*time.Second)
	p2 := e.permit("pool:a", "job-2", 3, time.Minute)
	e.acquire("pool:a", "locker", time.Minute)

	locksPage := e.get("/")
	if got := keysOf(rows(locksPage.doc)); strings.Join(got, ",") != "pool:a" {
		t.Errorf("locks page lists %v, want the lock pool:a only", got)
	}
	if text(rows(locksPage.doc)["pool:a"].Find(`[data-testid="owner"]`)) != "locker" {
		t.Error("the locks page shows the semaphore's holder")
	}
	if locksPage.doc.Find(`[data-testid="nav-semaphores"]`).AttrOr("href", "") != "/ui/semaphores" {
		t.Error("no link to the semaphores from the layout")
	}

	list := e.get("/ui/semaphores")
	if list.status != http.StatusOK {
		t.Fatalf("status %d\n%s", list.status, list.body)
	}
	sems := semRows(list.doc)
	row := sems["pool:a"]
	if len(sems) != 1 || row == nil {
		t.Fatalf("semaphores %v, want pool:a", keysOf(sems))
	}
	if strings.Contains(list.body, "sem/") {
		t.Error("the semaphores page shows a Redis key part (sem/…)")
	}
	for id, want := range map[string]string{"name": "pool:a", "used": "2 / 3", "waiters": "0"} {
		if g := text(row.Find(`[data-testid="` + id + `"]`)); g != want {
			t.Errorf("row %s = %q, want %q", id, g, want)
		}
	}
	// The soonest expiry is job-1's (20 s), not job-2's (1 min).
	if g := text(row.Find(`[data-testid="soonest"] time`)); !strings.HasSuffix(g, " s left") {
		t.Errorf("soonest expiry %q, want job-1's seconds", g)
	}
	if href := row.Find(`[data-testid="name"]`).AttrOr("href", ""); href != "/ui/semaphores/pool:a" {
		t.Errorf("detail link %q", href)
	}
	if g := list.doc.Find("#semaphores").AttrOr("hx-get", ""); g != "/ui/fragments/semaphores" {
		t.Errorf("hx-get %q", g)
	}
	if f := e.get("/ui/fragments/semaphores"); f.status != http.StatusOK || !strings.HasPrefix(f.body, `<section id="semaphores"`) || len(semRows(f.doc)) != 1 {
		t.Errorf("list fragment: %d\n%s", f.status, f.body)
	}

	p := e.get("/ui/semaphores/pool:a")
	if p.status != http.StatusOK || text(p.doc.Find(`h1 [data-testid="key"]`)) != "pool:a" {
		t.Fatalf("detail: %d\n%s", p.status, p.body)
	}
	if g := text(p.doc.Find(`[data-testid="state"] [data-testid="used"]`)); g != "2 of 3" {
		t.Errorf("used %q, want 2 of 3", g)
	}
	hs := holderRows(p.doc)
	if len(hs) != 2 || text(hs[itoa(p1.Fence)].Find(`[data-testid="holder-owner"]`)) != "job-1" ||
		text(hs[itoa(p2.Fence)].Find(`[data-testid="holder-mode"]`)) != "permit" {
		t.Fatalf("permits %v", keysOf(hs))
	}
	if g := p.doc.Find("#detail").AttrOr("hx-get", ""); g != "/ui/fragments/semaphores/pool:a" {
		t.Errorf("hx-get %q", g)
	}
	if f := e.get("/ui/fragments/semaphores/pool:a"); f.status != http.StatusOK || len(holderRows(f.doc)) != 2 {
		t.Errorf("detail fragment: %d", f.status)
	}
	if g := strings.Join(eventTypes(p.doc), ","); g != "acquired,acquired" {
		t.Errorf("history %s, want the semaphore's two grants", g)
	}

	// Force-release job-1's permit.
	_, form := e.confirmTarget("/ui/semaphores/pool:a/force-release?fence=" + itoa(p1.Fence))
	form.Set("reason", "stuck job")
	b := e.post("/ui/semaphores/pool:a/force-release", form, nil)
	if b.status != http.StatusOK || !strings.Contains(text(b.doc.Find(`[data-testid="notice"]`)), "job-1") {
		t.Fatalf("force-release: %d %q\n%s", b.status, text(b.doc.Find(`[data-testid="notice"]`)), b.body)
	}
	if g := e.holderFences(lock.Semaphore("pool:a")); len(g) != 1 || g[0] != p2.Fence {
		t.Fatalf("permits after: %v, want only job-2's %d", g, p2.Fence)
	}
	ev := b.doc.Find(`[data-testid="event"]`).First()
	if text(ev.Find(`[data-testid="event-type"]`)) != "force_released" || text(ev.Find(`[data-testid="event-reason"]`)) != "stuck job" {
		t.Errorf("newest event %s", outer(ev))
	}
	if st, held := e.held(lock.Lock("pool:a")); !held || st.Owner != "locker" {
		t.Error("breaking a permit touched the lock of the same name")
	}
}

// A full semaphore with a request waiting: the list marks it full with
// one waiting, its page shows the queue; releasing every permit lets the
// waiter in.
func TestSemaphores_QueueAndReleaseAll(t *testing.T) {
	e := newEnv(t)
	e.permit("full:a", "job-1", 1, time.Minute)
	waiter := e.enqueue(lock.Semaphore("full:a"), lock.AcquireRequest{Owner: "job-2", Limit: 1, TTL: time.Minute})

	row := semRows(e.get("/ui/semaphores").doc)["full:a"]
	if row == nil || !row.Is(".full") || text(row.Find(`[data-testid="used"]`)) != "1 / 1" || text(row.Find(`[data-testid="waiters"]`)) != "1" {
		t.Fatalf("row %s", outer(row))
	}
	p := e.get("/ui/semaphores/full:a")
	if g := strings.Join(queueOwners(p.doc), ","); g != "job-2" {
		t.Errorf("queue %q", g)
	}
	if g := text(p.doc.Find(`[data-testid="queued-mode"]`)); g != "permit" {
		t.Errorf("queued mode %q", g)
	}
	_, form := e.confirmTarget("/ui/semaphores/full:a/force-release?all=1")
	b := e.post("/ui/semaphores/full:a/force-release", form, nil)
	if b.status != http.StatusOK || !strings.Contains(text(b.doc.Find(`[data-testid="notice"]`)), "every permit") {
		t.Fatalf("release all: %d %q", b.status, text(b.doc.Find(`[data-testid="notice"]`)))
	}
	select {
	case w := <-waiter:
		if w.err != nil {
			t.Fatal(w.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter did not get the permit")
	}
}

// Semaphore names follow the key rules; an escaped name is decoded once,
// as for locks.
func TestSemaphores_Names(t *testing.T) {
	e := newEnv(t)
	e.permit("order:pool", "worker", 2, time.Minute)
	tests := []struct {
		path   string
		status int
		h1     string
	}{
		{"/ui/semaphores/order%3Apool", 200, "Semaphore order:pool"},
		{"/ui/semaphores/order%3apool/force-release", 200, "Force-release order:pool?"},
		{"/ui/semaphores/-starts-with-dash", 400, "Not a semaphore name"},
		{"/ui/semaphores/has%20space", 400, "Not a semaphore name"},
		{"/ui/semaphores/sem%2Forder:pool", 400, "Not a semaphore name"},
		{"/ui/semaphores/order%253Apool", 400, "Not a semaphore name"},
		{"/ui/fragments/semaphores/-bad", 400, "Not a semaphore name"},
		{"/ui/semaphores?prefix=bad%20prefix", 400, "Semaphores"},
	}
	for _, tc := range tests {
		p := e.get(tc.path)
		if p.status != tc.status || text(p.doc.Find("h1")) != tc.h1 {
			t.Errorf("%s: %d %q, want %d %q", tc.path, p.status, text(p.doc.Find("h1")), tc.status, tc.h1)
		}
	}
	if p := e.get("/ui/semaphores/never-used"); p.status != http.StatusOK || p.doc.Find(`[data-testid="not-held"]`).Length() != 1 {
		t.Errorf("unknown semaphore: %d", p.status)
	}
	if p := e.get("/ui/semaphores"); len(semRows(p.doc)) != 1 {
		t.Errorf("list %v", keysOf(semRows(p.doc)))
	}
	if p := e.get("/ui/semaphores?prefix=zzz"); p.doc.Find(`[data-testid="empty"]`).Length() != 1 {
		t.Error("no empty state")
	}
}

// The semaphore force-release form is guarded as the lock's is.
func TestSemaphores_ForceReleaseRefusedWithoutValidToken(t *testing.T) {
	e := newEnv(t)
	l := e.permit("guard:a", "worker", 2, time.Minute)
	path := "/ui/semaphores/guard:a/force-release"
	token, form := e.confirmTarget(path)
	if form.Get("fence") != itoa(l.Fence) {
		t.Fatalf("form %v, want the only permit's fence %d", form, l.Fence)
	}
	for _, tc := range []struct {
		name   string
		token  string
		header http.Header
	}{
		{name: "no token"},
		{name: "wrong token", token: "AAAA"},
		{name: "cross-site post", token: token, header: http.Header{"Sec-Fetch-Site": {"cross-site"}}},
		{name: "foreign origin", token: token, header: http.Header{"Origin": {"https://evil.example"}}},
	} {
		f := url.Values{"fence": {itoa(l.Fence)}}
		if tc.token != "" {
			f.Set(csrfField, tc.token)
		}
		if p := e.post(path, f, tc.header); p.status != http.StatusForbidden {
			t.Errorf("%s: status %d, want 403", tc.name, p.status)
		}
	}
	if g := e.holderFences(lock.Semaphore("guard:a")); len(g) != 1 {
		t.Fatal("a refused post broke the permit")
	}
}

// The semaphores page follows its own event stream: semaphore changes
// under its prefix, never a lock's; the locks' stream never a semaphore's.
func TestLiveEvents_Semaphores(t *testing.T) {
	e := newEnv(t)
	p := e.get("/ui/semaphores?prefix=live:")
	src := p.doc.Find("[data-live]").AttrOr("data-live", "")
	if src != "/ui/events?kind=semaphores&prefix=live%3A" {
		t.Fatalf("data-live = %q", src)
	}
	if d := e.get("/ui/semaphores/live:s").doc.Find("[data-live]").AttrOr("data-live", ""); d != "/ui/events?kind=semaphores&prefix=live%3As" {
		t.Errorf("detail data-live = %q", d)
	}
	if p := e.get("/ui/events?kind=bogus"); p.status != http.StatusBadRequest {
		t.Errorf("kind=bogus: %d", p.status)
	}

	first := func(src string, acquire func()) string {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.ts.URL+src, nil)
		resp, err := e.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		lines := make(chan string, 100)
		go func() {
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		}()
		for l := range lines {
			if strings.HasPrefix(l, ": lockd") {
				break
			}
		}
		acquire()
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
	got := first(src, func() {
		e.acquire("live:x", "w", time.Minute)
		e.permit("live:s", "w", 2, time.Minute)
	})
	if want := `data: {"key":"live:s","kind":"semaphore","type":"acquired"}`; got != want {
		t.Errorf("semaphores stream: first change %s, want %s", got, want)
	}
	got = first("/ui/events?prefix=live2:", func() {
		e.permit("live2:s", "w", 2, time.Minute)
		e.acquire("live2:x", "w", time.Minute)
	})
	if want := `data: {"key":"live2:x","kind":"lock","type":"acquired"}`; got != want {
		t.Errorf("locks stream: first change %s, want %s", got, want)
	}
}
