package web

import (
	"strings"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/lock"
)

// No page, fragment or outcome of the dashboard shows a lease's token:
// not an exclusive holder's, a shared holder's, a permit's, a leader's,
// nor a queued request's or candidate's once granted.
func TestNoTokenOnAnyPage(t *testing.T) {
	e := newEnv(t)
	var tokens []string
	take := func(l lock.Lease) lock.Lease {
		tokens = append(tokens, l.Token)
		return l
	}
	x := take(e.acquire("tok:x", "worker", time.Minute))
	r1 := take(e.acquireReq(lock.Lock("tok:rw"), lock.AcquireRequest{Owner: "reader-1", Mode: lock.Shared, TTL: time.Minute}))
	take(e.acquireReq(lock.Lock("tok:rw"), lock.AcquireRequest{Owner: "reader-2", Mode: lock.Shared, TTL: time.Minute}))
	writer := e.enqueue(lock.Lock("tok:rw"), lock.AcquireRequest{Owner: "writer", TTL: time.Minute})
	p1 := take(e.permit("tok:pool", "job-1", 2, time.Minute))
	take(e.permit("tok:pool", "job-2", 2, time.Minute))
	e.enqueue(lock.Semaphore("tok:pool"), lock.AcquireRequest{Owner: "job-3", Limit: 2, TTL: time.Minute})
	leader := take(e.campaign("tok:el", "host-a", `{"v":1}`, time.Minute))
	candidate := e.enqueue(lock.Election("tok:el"), lock.AcquireRequest{Owner: "host-b", TTL: time.Minute})

	paths := []string{
		"/", listFragmentPath, "/?prefix=tok:",
		"/ui/locks/tok:x", listFragmentPath + "/tok:x", "/ui/locks/tok:x/force-release",
		"/ui/locks/tok:rw", listFragmentPath + "/tok:rw", "/ui/locks/tok:rw/force-release",
		"/ui/locks/tok:rw/force-release?all=1", "/ui/locks/tok:rw/force-release?fence=" + itoa(r1.Fence),
		semaphoresPath, semFragmentPath, "/ui/semaphores/tok:pool", semFragmentPath + "/tok:pool",
		"/ui/semaphores/tok:pool/force-release", "/ui/semaphores/tok:pool/force-release?all=1",
		electionsPath, electFragmentPath, "/ui/elections/tok:el", electFragmentPath + "/tok:el", "/ui/elections/tok:el/force-release",
	}
	var bodies []string
	for _, path := range paths {
		bodies = append(bodies, e.get(path).body)
	}
	// The pages after a force-release: of one holder, of a permit, of
	// every holder (and the writer's grant that follows).
	_, form := e.confirmTarget("/ui/locks/tok:rw/force-release?fence=" + itoa(r1.Fence))
	bodies = append(bodies, e.post("/ui/locks/tok:rw/force-release", form, nil).body)
	_, form = e.confirmTarget("/ui/semaphores/tok:pool/force-release?fence=" + itoa(p1.Fence))
	bodies = append(bodies, e.post("/ui/semaphores/tok:pool/force-release", form, nil).body)
	_, form = e.confirmTarget("/ui/locks/tok:rw/force-release?all=1")
	bodies = append(bodies, e.post("/ui/locks/tok:rw/force-release", form, nil).body)
	select {
	case w := <-writer:
		if w.err != nil {
			t.Fatal(w.err)
		}
		tokens = append(tokens, w.lease.Token)
	case <-time.After(5 * time.Second):
		t.Fatal("the writer was not granted")
	}
	bodies = append(bodies, e.get("/ui/locks/tok:rw").body, e.get("/").body)
	_, form = e.confirmTarget("/ui/locks/tok:x/force-release?fence=" + itoa(x.Fence))
	bodies = append(bodies, e.post("/ui/locks/tok:x/force-release", form, nil).body)
	// The leader broken, and its successor's pages.
	_, form = e.confirmTarget("/ui/elections/tok:el/force-release?fence=" + itoa(leader.Fence))
	bodies = append(bodies, e.post("/ui/elections/tok:el/force-release", form, nil).body)
	select {
	case w := <-candidate:
		if w.err != nil {
			t.Fatal(w.err)
		}
		tokens = append(tokens, w.lease.Token)
	case <-time.After(5 * time.Second):
		t.Fatal("the candidate did not lead")
	}
	bodies = append(bodies, e.get("/ui/elections/tok:el").body, e.get(electionsPath).body)

	for _, tok := range tokens {
		if len(tok) < 16 {
			t.Fatalf("token %q is too short to search for", tok)
		}
		for i, b := range bodies {
			if strings.Contains(b, tok) || strings.Contains(b, tok[:16]) {
				t.Errorf("page %d shows a token:\n%s", i, b)
			}
		}
	}
}
