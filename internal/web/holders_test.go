package web

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"

	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/lockdtest"
)

// acquireReq takes key with req through the engine.
func (e *env) acquireReq(res lock.Resource, req lock.AcquireRequest) lock.Lease {
	e.t.Helper()
	if req.Actor == "" {
		req.Actor = "test"
	}
	l, err := e.engine.Acquire(context.Background(), res, req)
	if err != nil {
		e.t.Fatalf("acquire %s for %s: %v", res, req.Owner, err)
	}
	return l
}

// waited is what a queued Acquire came back with.
type waited struct {
	lease lock.Lease
	err   error
}

// enqueue starts req waiting for key (req.Wait, 10 s if unset) and returns
// once the key's state shows it in the queue. The waiter gives up when the
// test ends, before the engine is closed.
func (e *env) enqueue(res lock.Resource, req lock.AcquireRequest) <-chan waited {
	e.t.Helper()
	if req.Wait == 0 {
		req.Wait = 10 * time.Second
	}
	ctx, cancel := context.WithCancel(context.Background())
	out, done := make(chan waited, 1), make(chan struct{})
	// The waiter is gone before the engine closes (cleanups run last
	// first): no goroutine outlives the test.
	e.t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		l, err := e.engine.Acquire(ctx, res, req)
		out <- waited{l, err}
	}()
	lockdtest.Eventually(e.t, func() bool {
		st, err := e.engine.State(context.Background(), res)
		if err != nil {
			return false
		}
		for _, q := range st.Queue {
			if q.Owner == req.Owner {
				return true
			}
		}
		return false
	}, 5*time.Second, req.Owner+" in the queue of "+res.String())
	return out
}

// holderRows maps each holders-table row's fence to its row.
func holderRows(doc *goquery.Document) map[string]*goquery.Selection {
	m := map[string]*goquery.Selection{}
	doc.Find(`[data-testid="holders"] [data-testid="holder"]`).Each(func(_ int, s *goquery.Selection) {
		m[s.AttrOr("data-fence", "")] = s
	})
	return m
}

// queueOwners is the queue table's owners, in order.
func queueOwners(doc *goquery.Document) []string {
	var owners []string
	doc.Find(`[data-testid="queue"] [data-testid="queued"]`).Each(func(_ int, s *goquery.Selection) {
		owners = append(owners, text(s.Find(`[data-testid="queued-owner"]`)))
	})
	return owners
}

// holderFences is the fences of key's live holders, per the engine.
func (e *env) holderFences(res lock.Resource) []int64 {
	e.t.Helper()
	st, held := e.held(res)
	if !held {
		return nil
	}
	var fences []int64
	for _, h := range holdersOf(st, lock.Exclusive) {
		fences = append(fences, h.Fence)
	}
	return fences
}

// confirmTarget opens a confirmation link (path with its query) and
// returns the CSRF token and the form's hidden fields.
func (e *env) confirmTarget(path string) (token string, form url.Values) {
	e.t.Helper()
	p := e.get(path)
	if p.status != http.StatusOK {
		e.t.Fatalf("GET %s: status %d\n%s", path, p.status, p.body)
	}
	f := p.doc.Find(`form.confirm[method="post"]`)
	if f.Length() != 1 {
		e.t.Fatalf("GET %s: no confirmation form\n%s", path, p.body)
	}
	form = url.Values{}
	f.Find(`input[type="hidden"]`).Each(func(_ int, s *goquery.Selection) {
		form.Set(s.AttrOr("name", ""), s.AttrOr("value", ""))
	})
	token = form.Get(csrfField)
	if token == "" {
		e.t.Fatalf("GET %s: no CSRF token in the form", path)
	}
	return token, form
}

// An exclusive holder is one row of the holders table, with its own
// force-release link by fence; nobody waits.
func TestHolders_ExclusiveIsOneRow(t *testing.T) {
	e := newEnv(t)
	l := e.acquire("hold:x", "worker-1", 30*time.Second)

	p := e.get("/ui/locks/hold:x")
	if p.status != http.StatusOK {
		t.Fatalf("status %d", p.status)
	}
	rows := holderRows(p.doc)
	row := rows[itoa(l.Fence)]
	if len(rows) != 1 || row == nil {
		t.Fatalf("holders %v, want one row with fence %d", keysOf(rows), l.Fence)
	}
	for id, want := range map[string]string{"holder-owner": "worker-1", "holder-mode": "exclusive", "holder-fence": itoa(l.Fence)} {
		if g := text(row.Find(`[data-testid="` + id + `"]`)); g != want {
			t.Errorf("%s = %q, want %q", id, g, want)
		}
	}
	// A count of 1 on every row says nothing: the column appears once a
	// holder re-enters (newcomer #19).
	if n := p.doc.Find(`[data-testid="holder-count"]`).Length(); n != 0 {
		t.Errorf("a Count column (%d cells) with nobody re-entered", n)
	}
	if g := text(row.Find(`[data-testid="holder-left"] time`)); !strings.HasSuffix(g, " s left") {
		t.Errorf("holder TTL %q", g)
	}
	href := row.Find(`[data-testid="force-holder"]`).AttrOr("href", "")
	if href != "/ui/locks/hold:x/force-release?fence="+itoa(l.Fence) {
		t.Errorf("holder's force-release link %q", href)
	}
	if g := text(p.doc.Find(`[data-testid="state"] [data-testid="mode"]`)); g != "exclusive" {
		t.Errorf("mode %q", g)
	}
	if p.doc.Find(`[data-testid="queue-empty"]`).Length() != 1 || p.doc.Find(`[data-testid="queue"]`).Length() != 0 {
		t.Error("an empty queue is not shown as empty")
	}

	// The holder's link leads to the usual form, for that fence.
	token, form := e.confirmTarget(href)
	if form.Get("fence") != itoa(l.Fence) || form.Has("all") {
		t.Fatalf("form %v, want fence %d only", form, l.Fence)
	}
	form.Set("reason", "stuck")
	if p := e.post("/ui/locks/hold:x/force-release", form, nil); p.status != http.StatusOK || token == "" {
		t.Fatalf("force-release: %d\n%s", p.status, p.body)
	}
	if _, held := e.held(lock.Lock("hold:x")); held {
		t.Fatal("still held")
	}
}

// Two shared holders and an exclusive request queued behind them: the
// list says shared, one waiting and one more holder; the page shows both
// holders and the queue. Breaking one holder by fence leaves the other
// (and the writer waiting); breaking every holder lets the writer in.
func TestHolders_SharedHoldersAndQueue(t *testing.T) {
	e := newEnv(t)
	r1 := e.acquireReq(lock.Lock("hold:rw"), lock.AcquireRequest{Owner: "reader-1", Mode: lock.Shared, TTL: 30 * time.Second})
	r2 := e.acquireReq(lock.Lock("hold:rw"), lock.AcquireRequest{Owner: "reader-2", Mode: lock.Shared, TTL: 45 * time.Second})
	writer := e.enqueue(lock.Lock("hold:rw"), lock.AcquireRequest{Owner: "writer", TTL: 30 * time.Second})

	row := rows(e.get("/").doc)["hold:rw"]
	if row == nil {
		t.Fatal("hold:rw is not listed")
	}
	for id, want := range map[string]string{"mode": "shared", "waiters": "1", "more-holders": "+1 more"} {
		if g := text(row.Find(`[data-testid="` + id + `"]`)); g != want {
			t.Errorf("list %s = %q, want %q", id, g, want)
		}
	}

	p := e.get("/ui/locks/hold:rw")
	st := p.doc.Find(`[data-testid="state"]`)
	for id, want := range map[string]string{"mode": "shared", "holder-total": "2", "waiters": "1"} {
		if g := text(st.Find(`[data-testid="` + id + `"]`)); g != want {
			t.Errorf("state %s = %q, want %q", id, g, want)
		}
	}
	hs := holderRows(p.doc)
	if len(hs) != 2 || hs[itoa(r1.Fence)] == nil || hs[itoa(r2.Fence)] == nil {
		t.Fatalf("holders %v, want fences %d and %d", keysOf(hs), r1.Fence, r2.Fence)
	}
	for fence, owner := range map[int64]string{r1.Fence: "reader-1", r2.Fence: "reader-2"} {
		h := hs[itoa(fence)]
		if text(h.Find(`[data-testid="holder-owner"]`)) != owner || text(h.Find(`[data-testid="holder-mode"]`)) != "shared" {
			t.Errorf("holder %d: %s", fence, outer(h))
		}
	}
	if g := strings.Join(queueOwners(p.doc), ","); g != "writer" {
		t.Fatalf("queue %q, want writer", g)
	}
	q := p.doc.Find(`[data-testid="queued"]`).First()
	if text(q.Find(`[data-testid="queued-position"]`)) != "1" || text(q.Find(`[data-testid="queued-mode"]`)) != "exclusive" ||
		q.Find(`[data-testid="queued-since"] time[data-clock="ago"]`).Length() != 1 {
		t.Errorf("queued row %s", outer(q))
	}
	if href := p.doc.Find(`[data-testid="force-release-all"]`).AttrOr("href", ""); href != "/ui/locks/hold:rw/force-release?all=1" {
		t.Errorf("break-every-holder link %q", href)
	}
	// Without a choice, the confirmation page asks which.
	c := e.get("/ui/locks/hold:rw/force-release")
	if c.doc.Find(`[data-testid="choose"]`).Length() != 1 || c.doc.Find("form.confirm").Length() != 0 || c.doc.Find(`[data-testid="targets"] a`).Length() != 2 {
		t.Errorf("confirm page without a choice:\n%s", c.body)
	}

	// One holder, by fence.
	_, form := e.confirmTarget("/ui/locks/hold:rw/force-release?fence=" + itoa(r1.Fence))
	b := e.post("/ui/locks/hold:rw/force-release", form, nil)
	if b.status != http.StatusOK || !strings.Contains(text(b.doc.Find(`[data-testid="notice"]`)), "reader-1") {
		t.Fatalf("force-release reader-1: %d %q", b.status, text(b.doc.Find(`[data-testid="notice"]`)))
	}
	if g := e.holderFences(lock.Lock("hold:rw")); len(g) != 1 || g[0] != r2.Fence {
		t.Fatalf("holders after breaking reader-1: %v, want only %d", g, r2.Fence)
	}
	if hs := holderRows(b.doc); len(hs) != 1 || hs[itoa(r2.Fence)] == nil {
		t.Errorf("the page after: holders %v", keysOf(hs))
	}
	select {
	case w := <-writer:
		t.Fatalf("the writer got in beside a shared holder: %+v", w)
	case <-time.After(200 * time.Millisecond):
	}

	// Every holder.
	_, form = e.confirmTarget("/ui/locks/hold:rw/force-release?all=1")
	if form.Get("all") != "1" || form.Has("fence") {
		t.Fatalf("form %v, want all=1 and no fence", form)
	}
	b = e.post("/ui/locks/hold:rw/force-release", form, nil)
	if b.status != http.StatusOK || !strings.Contains(text(b.doc.Find(`[data-testid="notice"]`)), "every holder") {
		t.Fatalf("force-release all: %d %q", b.status, text(b.doc.Find(`[data-testid="notice"]`)))
	}
	select {
	case w := <-writer:
		if w.err != nil || w.lease.Fence <= r2.Fence {
			t.Fatalf("writer: %+v", w)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the queued writer did not get the lock after every holder was broken")
	}
}

// Bad links and forms name no holder: 400, and nothing is broken.
func TestForceRelease_TargetValidation(t *testing.T) {
	e := newEnv(t)
	l := e.acquire("tv:x", "worker", 30*time.Second)
	token, fence := e.confirmForm("tv:x")
	base := "/ui/locks/tv:x/force-release"
	for _, q := range []string{"?fence=abc", "?fence=0", "?fence=-3", "?all=yes", "?all=1&fence=" + fence} {
		if p := e.get(base + q); p.status != http.StatusBadRequest || p.doc.Find("form.confirm").Length() != 0 {
			t.Errorf("GET %s: status %d", q, p.status)
		}
	}
	for name, form := range map[string]url.Values{
		"fence and all": {"csrf": {token}, "fence": {fence}, "all": {"1"}},
		"all=2":         {"csrf": {token}, "all": {"2"}},
		"fence abc":     {"csrf": {token}, "fence": {"abc"}},
		"neither":       {"csrf": {token}},
	} {
		if p := e.post(base, form, nil); p.status != http.StatusBadRequest {
			t.Errorf("POST %s: status %d", name, p.status)
		}
	}
	if st, held := e.held(lock.Lock("tv:x")); !held || st.Fence != l.Fence {
		t.Fatal("a bad form broke the lock")
	}
	// A fence that is not a holder's: nothing to confirm.
	p := e.get(base + "?fence=" + itoa(l.Fence+1000))
	if p.status != http.StatusOK || p.doc.Find(`[data-testid="gone"]`).Length() != 1 || p.doc.Find("form.confirm").Length() != 0 {
		t.Errorf("unknown fence: %d\n%s", p.status, p.body)
	}
}

// TestHolders_CountColumnOnlyForReentries: permits that were never
// re-entered show no Count column (it said 1 on every row); a re-entered
// permit brings it back, with its count.
func TestHolders_CountColumnOnlyForReentries(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	sem := lock.Semaphore("hold:pool")
	var first lock.Lease
	for i, owner := range []string{"render-1", "render-2"} {
		l, err := e.engine.Acquire(ctx, sem, lock.AcquireRequest{Owner: owner, TTL: 30 * time.Second, Limit: 3, Actor: "test"})
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = l
		}
	}
	p := e.get("/ui/semaphores/hold:pool")
	if p.doc.Find(`[data-testid="holder"]`).Length() != 2 || p.doc.Find(`[data-testid="holder-count"]`).Length() != 0 ||
		strings.Contains(text(p.doc.Find(`[data-testid="holders"] thead`)), "Count") {
		t.Fatalf("permits never re-entered: want 2 rows and no Count column\n%s", outer(p.doc.Find(`[data-testid="holders"]`)))
	}
	if _, err := e.engine.Acquire(ctx, sem, lock.AcquireRequest{Token: first.Token, TTL: 30 * time.Second, Limit: 3, Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	p = e.get("/ui/semaphores/hold:pool")
	row := holderRows(p.doc)[itoa(first.Fence)]
	if row == nil || text(row.Find(`[data-testid="holder-count"]`)) != "2" || p.doc.Find(`[data-testid="holder-count"]`).Length() != 2 {
		t.Fatalf("after a re-entry: want a Count column, 2 for the re-entered permit\n%s", outer(p.doc.Find(`[data-testid="holders"]`)))
	}
}
