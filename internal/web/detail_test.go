package web

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"

	"github.com/lockd/lockd/internal/lock"
)

// eventTypes lists the history's event types, newest first.
func eventTypes(doc *goquery.Document) []string {
	var types []string
	doc.Find(`[data-testid="event"]`).Each(func(_ int, s *goquery.Selection) {
		types = append(types, text(s.Find(`[data-testid="event-type"]`)))
	})
	return types
}

func TestDetail_StateAndHistory(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	l := e.acquire("detail:a", "worker-7", 30*time.Second)
	if _, err := e.engine.Acquire(ctx, lock.Lock("detail:a"), lock.AcquireRequest{Owner: "worker-7", TTL: 30 * time.Second, Token: l.Token}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.engine.Renew(ctx, lock.Lock("detail:a"), lock.RenewRequest{Token: l.Token, TTL: 30 * time.Second, Actor: "test"}); err != nil {
		t.Fatal(err)
	}

	p := e.get("/ui/locks/detail:a")
	if p.status != http.StatusOK {
		t.Fatalf("status %d", p.status)
	}
	st := p.doc.Find(`[data-testid="state"]`)
	for id, want := range map[string]string{"owner": "worker-7", "fence": itoa(l.Fence), "count": "2", "renewals": "1", "waiters": "0"} {
		if g := text(st.Find(`[data-testid="` + id + `"]`)); g != want {
			t.Errorf("%s = %q, want %q", id, g, want)
		}
	}
	if g := strings.Join(eventTypes(p.doc), ","); g != "reentered,acquired" {
		t.Errorf("history %s, want reentered,acquired (renewals apart)", g)
	}
	ev := p.doc.Find(`[data-testid="event"]`).Last()
	if text(ev.Find(`[data-testid="event-owner"]`)) != "worker-7" || ev.Find("time[datetime][title]").Length() != 1 {
		t.Errorf("acquired event: %s", outer(ev))
	}
	if p.doc.Find(`[data-testid="force-release-link"]`).AttrOr("href", "") != "/ui/locks/detail:a/force-release" {
		t.Error("no force-release button on a held lock")
	}
	if g := p.doc.Find("#detail").AttrOr("hx-get", ""); g != "/ui/fragments/locks/detail:a" {
		t.Errorf("hx-get %q", g)
	}
	f := e.get("/ui/fragments/locks/detail:a")
	if f.status != http.StatusOK || !strings.HasPrefix(f.body, `<div id="detail"`) {
		t.Errorf("detail fragment: %d\n%s", f.status, f.body)
	}
}

func TestDetail_NotHeldStillShowsHistory(t *testing.T) {
	e := newEnv(t)
	l := e.acquire("detail:gone", "worker-8", 30*time.Second)
	if _, err := e.engine.Release(context.Background(), lock.Lock("detail:gone"), l.Token, "test"); err != nil {
		t.Fatal(err)
	}
	e.acquire("detail:lapsed", "worker-9", 100*time.Millisecond)
	time.Sleep(200 * time.Millisecond)

	for key, want := range map[string]string{"detail:gone": "released,acquired", "detail:lapsed": "expired,acquired"} {
		p := e.get("/ui/locks/" + key)
		if p.status != http.StatusOK {
			t.Fatalf("%s: status %d", key, p.status)
		}
		if p.doc.Find(`[data-testid="not-held"]`).Length() != 1 || p.doc.Find(`[data-testid="state"]`).Length() != 0 {
			t.Errorf("%s: not shown as not held", key)
		}
		if p.doc.Find(`[data-testid="force-release-link"]`).Length() != 0 {
			t.Errorf("%s: force-release offered on a lock nobody holds", key)
		}
		if g := strings.Join(eventTypes(p.doc), ","); g != want {
			t.Errorf("%s: history %s, want %s", key, g, want)
		}
	}

	p := e.get("/ui/locks/never-used")
	if p.status != http.StatusOK || p.doc.Find(`[data-testid="no-history"]`).Length() != 1 {
		t.Errorf("unknown key: status %d, no empty-history note", p.status)
	}
}

func TestDetail_BadKey(t *testing.T) {
	e := newEnv(t)
	for _, path := range []string{"/ui/locks/-starts-with-dash", "/ui/locks/has%20space", "/ui/locks/" + strings.Repeat("k", 201)} {
		p := e.get(path)
		if p.status != http.StatusBadRequest || text(p.doc.Find("h1")) != "Not a lock key" {
			t.Errorf("%s: status %d, h1 %q", path, p.status, text(p.doc.Find("h1")))
		}
	}
}

// A pending request that the holder step aside shows on the list and the
// detail page: who asked and why.
func TestDetail_StepAside(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.acquire("detail:asked", "worker-7", 30*time.Second)
	e.acquire("detail:quiet", "worker-8", 30*time.Second)
	if _, err := e.engine.RequestRelease(ctx, lock.Lock("detail:asked"), 0, "deploy-42", "hotfix", "ops"); err != nil {
		t.Fatal(err)
	}
	p := e.get("/ui/locks/detail:asked")
	if g := text(p.doc.Find(`[data-testid="state"] [data-testid="step-aside"]`)); g != "asked to step aside by deploy-42: hotfix" {
		t.Errorf("detail: %q", g)
	}
	// The list of locks is the dashboard's front page.
	list := e.get("/")
	rows := list.doc.Find(`[data-testid="lock-row"]`)
	if list.status != 200 || rows.Length() != 2 {
		t.Fatalf("the list: status %d, %d rows, want 200 and the 2 keys", list.status, rows.Length())
	}
	rows.Each(func(_ int, row *goquery.Selection) {
		asked := row.Find(`[data-testid="step-aside"]`).Length() == 1
		if want := row.AttrOr("data-key", "") == "detail:asked"; asked != want {
			t.Errorf("%s: step-aside mark %v, want %v", row.AttrOr("data-key", ""), asked, want)
		}
	})
}
