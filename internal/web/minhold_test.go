package web

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/lock"
)

// The key page shows a lease's hold window, and a key that a window keeps
// after its holder's release as held by nobody until it ends; a person
// can end the window from there.
func TestKeyPageShowsTheHoldWindow(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	res := lock.Lock("mh:job")
	l, err := e.engine.Acquire(ctx, res, lock.AcquireRequest{Owner: "node-1", TTL: time.Minute, MinHold: time.Minute, Actor: "test"})
	if err != nil {
		t.Fatal(err)
	}
	p := e.get("/ui/locks/mh:job")
	if p.status != http.StatusOK || p.doc.Find(`[data-testid="min-hold-until"]`).Length() != 1 {
		t.Fatalf("page of a lease with a window: status %d\n%s", p.status, p.body)
	}

	if _, err := e.engine.Release(ctx, res, l.Token, "node-1"); err != nil {
		t.Fatal(err)
	}
	p = e.get("/ui/locks/mh:job")
	if g := text(p.doc.Find(`[data-testid="min-hold"]`)); !strings.Contains(g, "node-1") || !strings.Contains(g, "nobody holds") {
		t.Fatalf("page inside the window says %q\n%s", g, p.body)
	}
	if p.doc.Find(`[data-testid="min-hold-until"]`).Length() != 1 || p.doc.Find(`#holders-h`).Length() != 0 {
		t.Fatalf("page inside the window:\n%s", p.body)
	}
	if href := p.doc.Find(`[data-testid="force-release-link"]`).AttrOr("href", ""); !strings.Contains(href, "fence="+itoa(l.Fence)) {
		t.Fatalf("the link that ends the window: %q", href)
	}

	token, fence := e.confirmForm("mh:job")
	if fence != itoa(l.Fence) {
		t.Fatalf("form fence %s, want the released lease's %d", fence, l.Fence)
	}
	p = e.post("/ui/locks/mh:job/force-release", url.Values{"csrf": {token}, "fence": {fence}, "reason": {"rerun"}}, nil)
	if p.status != http.StatusOK {
		t.Fatalf("status %d\n%s", p.status, p.body)
	}
	if _, held := e.held(res); held {
		t.Fatal("still kept after the window was broken")
	}
}
