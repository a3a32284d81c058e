package web

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/lock"
)

// TestEscaping_UserInput puts markup in every user-controlled string the
// pages show (owners, reasons, prefixes, key-shaped paths; keys themselves
// cannot hold "<") and checks it comes out as text, never as markup.
func TestEscaping_UserInput(t *testing.T) {
	e := newEnv(t)
	owner := `<script>alert("owner")</script>`
	reason := `<img src=x onerror=alert(1)> "quoted" & done`
	e.acquire("xss:1", owner, 30*time.Second)

	list := e.get("/")
	if g := text(rows(list.doc)["xss:1"].Find(`[data-testid="owner"]`)); g != owner {
		t.Errorf("owner shown as %q, want the literal text", g)
	}
	detail := e.get("/ui/locks/xss:1")
	if g := text(detail.doc.Find(`[data-testid="state"] [data-testid="owner"]`)); g != owner {
		t.Errorf("detail owner %q", g)
	}
	token, fence := e.confirmForm("xss:1")
	broken := e.post("/ui/locks/xss:1/force-release", url.Values{"csrf": {token}, "fence": {fence}, "reason": {reason}}, nil)
	if broken.status != http.StatusOK {
		t.Fatalf("force-release: %d", broken.status)
	}
	if g := text(broken.doc.Find(`[data-testid="event-reason"]`).First()); g != reason {
		t.Errorf("reason shown as %q", g)
	}

	pages := map[string]page{
		"list":          list,
		"detail":        detail,
		"force-release": broken,
		"prefix":        e.get("/?prefix=" + url.QueryEscape(`<script>alert(1)</script>`)),
		"key":           e.get("/ui/locks/" + url.PathEscape(`<script>alert(1)</script>`)),
		"confirm":       e.get("/ui/locks/" + url.PathEscape(`"><svg onload=alert(1)>`) + "/force-release"),
	}
	for name, p := range pages {
		// The only script elements are the layout's two, loaded by src.
		if n := strings.Count(p.body, "<script"); n != 2 {
			t.Errorf("%s: %d <script elements, want 2\n%s", name, n, p.body)
		}
		for _, bad := range []string{"<img src=x", "<svg", `alert("owner")</script>`} {
			if strings.Contains(p.body, bad) {
				t.Errorf("%s: unescaped %q in the page", name, bad)
			}
		}
	}
	if !strings.Contains(list.body, "&lt;script&gt;alert(&#34;owner&#34;)&lt;/script&gt;") {
		t.Errorf("owner not HTML-escaped in the list:\n%s", list.body)
	}
}

// TestEscaping_HoldersQueueSemaphores: owners in the holders table, the
// queue and the semaphore pages come out as text too.
func TestEscaping_HoldersQueueSemaphores(t *testing.T) {
	e := newEnv(t)
	owner := `<script>alert("owner")</script>`
	waiter := `<img src=x onerror=alert(1)>`
	l := e.acquireReq(lock.Lock("xss:rw"), lock.AcquireRequest{Owner: owner, Mode: lock.Shared, TTL: 30 * time.Second})
	e.acquireReq(lock.Lock("xss:rw"), lock.AcquireRequest{Owner: "reader", Mode: lock.Shared, TTL: 30 * time.Second})
	e.enqueue(lock.Lock("xss:rw"), lock.AcquireRequest{Owner: waiter, TTL: 30 * time.Second})
	e.permit("xss:pool", owner, 1, 30*time.Second)
	e.enqueue(lock.Semaphore("xss:pool"), lock.AcquireRequest{Owner: waiter, Limit: 1, TTL: 30 * time.Second})

	detail := e.get("/ui/locks/xss:rw")
	if g := text(holderRows(detail.doc)[itoa(l.Fence)].Find(`[data-testid="holder-owner"]`)); g != owner {
		t.Errorf("holder owner shown as %q", g)
	}
	if g := queueOwners(detail.doc); len(g) != 1 || g[0] != waiter {
		t.Errorf("queued owner shown as %q", g)
	}
	pages := map[string]page{
		"list":            e.get("/"),
		"detail":          detail,
		"confirm holder":  e.get("/ui/locks/xss:rw/force-release?fence=" + itoa(l.Fence)),
		"confirm choose":  e.get("/ui/locks/xss:rw/force-release"),
		"confirm all":     e.get("/ui/locks/xss:rw/force-release?all=1"),
		"semaphores":      e.get("/ui/semaphores"),
		"semaphore":       e.get("/ui/semaphores/xss:pool"),
		"sem confirm":     e.get("/ui/semaphores/xss:pool/force-release"),
		"semaphores bad":  e.get("/ui/semaphores?prefix=" + url.QueryEscape(`<script>alert(1)</script>`)),
		"semaphore bad":   e.get("/ui/semaphores/" + url.PathEscape(`"><svg onload=alert(1)>`)),
		"sem confirm bad": e.get("/ui/semaphores/" + url.PathEscape(`"><svg onload=alert(1)>`) + "/force-release"),
	}
	for name, p := range pages {
		if n := strings.Count(p.body, "<script"); n != 2 {
			t.Errorf("%s: %d <script elements, want 2\n%s", name, n, p.body)
		}
		for _, bad := range []string{"<img src=x", "<svg", `alert("owner")</script>`} {
			if strings.Contains(p.body, bad) {
				t.Errorf("%s: unescaped %q in the page", name, bad)
			}
		}
	}
}
