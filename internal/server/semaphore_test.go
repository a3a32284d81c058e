package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockd/lockd/api"
	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/lockdtest"
)

// semState reads a semaphore's state over HTTP and checks that it shows
// none of the tokens.
func (f *fixture) semState(t *testing.T, name string, tokens ...string) api.LockState {
	t.Helper()
	res, err := f.client.GetSemaphoreWithResponse(context.Background(), name)
	return stateOK(t, "semaphore "+name, res, err, tokens)
}

// lockState reads a lock's state over HTTP and checks that it shows none
// of the tokens.
func (f *fixture) lockState(t *testing.T, key string, tokens ...string) api.LockState {
	t.Helper()
	res, err := f.client.GetLockWithResponse(context.Background(), key)
	return stateOK(t, "lock "+key, res, err, tokens)
}

func stateOK[R interface{ GetBody() []byte }](t *testing.T, what string, res R, err error, tokens []string) api.LockState {
	t.Helper()
	var st api.LockState
	if err != nil {
		t.Fatalf("state of %s: %v", what, err)
	}
	if status := httpResponseOf(any(res)).StatusCode; status != 200 || json.Unmarshal(res.GetBody(), &st) != nil {
		t.Fatalf("state of %s: %d %s", what, status, res.GetBody())
	}
	noTokens(t, res.GetBody(), tokens...)
	return st
}

func noTokens(t *testing.T, body []byte, tokens ...string) {
	t.Helper()
	if bytes.Contains(body, []byte(`"token"`)) {
		t.Fatalf("a read shows a token field: %s", body)
	}
	for _, tok := range tokens {
		if bytes.Contains(body, []byte(tok)) {
			t.Fatalf("a read shows a token: %s", body)
		}
	}
}

// waitQueue waits until the state of key (from get) queues n requests.
func waitQueue(t *testing.T, get func() api.LockState, n int) api.LockState {
	t.Helper()
	var st api.LockState
	lockdtest.Eventually(t, func() bool { st = get(); return len(st.Queue) == n }, 5*time.Second, fmt.Sprintf("%d queued", n))
	return st
}

// A semaphore's permits are leases of their own: limit permits at once,
// each with its token and fence, renewed, released, re-entered and broken
// one by one; the state lists the holders and never a token; a semaphore
// is listed apart from locks and is not the lock of the same name.
func TestSemaphoreLifecycle(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	var permits []api.Lease
	for i := range 3 {
		l := f.acquireSem(t, "pool:render", api.SemaphoreAcquireRequest{Limit: 3, Owner: ptr(fmt.Sprint("w", i)), TtlMs: ptr(int64(30000))})
		if l.Key != "pool:render" || l.Mode != api.GrantModePermit || l.Limit == nil || *l.Limit != 3 || l.Count != 1 || l.Token == "" {
			t.Fatalf("permit %d = %+v", i, l)
		}
		for _, p := range permits {
			if p.Token == l.Token || p.Fence >= l.Fence {
				t.Fatalf("permit %d shares a token or a fence with an earlier one: %+v after %+v", i, l, p)
			}
		}
		permits = append(permits, l)
	}
	tokens := []string{permits[0].Token, permits[1].Token, permits[2].Token}

	st := f.semState(t, "pool:render", tokens...)
	if st.Key != "pool:render" || st.Mode != api.GrantModePermit || st.Limit == nil || *st.Limit != 3 || len(st.Holders) != 3 || len(st.Queue) != 0 || st.Waiters != 0 {
		t.Fatalf("state = %+v", st)
	}
	for i, h := range st.Holders {
		if h.Owner != fmt.Sprint("w", i) || h.Fence != permits[i].Fence || h.Mode != api.GrantModePermit || h.Count != 1 || h.RemainingMs <= 0 || h.TtlMs != 30000 {
			t.Fatalf("holder %d = %+v (oldest first)", i, h)
		}
	}
	if st.Owner != "w2" || st.Fence != permits[2].Fence {
		t.Fatalf("top-level owner/fence %s/%d, want the newest holder's", st.Owner, st.Fence)
	}

	// Full: no_permits; a lock of the same name is another thing.
	full, err := f.client.AcquireSemaphoreWithResponse(ctx, "pool:render", nil, api.SemaphoreAcquireRequest{Limit: 3})
	if err != nil || full.StatusCode() != 409 || !bytes.Contains(full.Body, []byte(`"code":"no_permits"`)) || full.HTTPResponse.Header.Get("Retry-After") == "" {
		t.Fatalf("4th permit: %v %d %s", err, full.StatusCode(), full.Body)
	}
	lk := f.acquire(t, "pool:render", api.AcquireRequest{Owner: ptr("the-lock")})
	if lk.Mode != api.GrantModeExclusive || lk.Limit != nil {
		t.Fatalf("lock of the same name = %+v", lk)
	}

	// Listed under /v1/semaphores, not /v1/locks, and the other way round.
	sems, err := f.client.ListSemaphoresWithResponse(ctx, &api.ListSemaphoresParams{Prefix: ptr("pool:")})
	if err != nil || sems.JSON200 == nil || len(sems.JSON200.Semaphores) != 1 || sems.JSON200.Semaphores[0].Key != "pool:render" ||
		len(sems.JSON200.Semaphores[0].Holders) != 3 {
		t.Fatalf("list semaphores: %v %s", err, sems.Body)
	}
	noTokens(t, sems.Body, tokens...)
	locks, err := f.client.ListLocksWithResponse(ctx, &api.ListLocksParams{Prefix: ptr("pool:")})
	if err != nil || locks.JSON200 == nil || len(locks.JSON200.Locks) != 1 || locks.JSON200.Locks[0].Owner != "the-lock" {
		t.Fatalf("list locks: %v %s", err, locks.Body)
	}

	// Renew one permit: the others keep their expiry.
	before := f.semState(t, "pool:render")
	rn, err := f.client.RenewSemaphoreWithResponse(ctx, "pool:render", api.RenewRequest{Token: permits[1].Token, TtlMs: ptr(int64(60000))})
	if err != nil || rn.JSON200 == nil || rn.JSON200.Fence != permits[1].Fence || rn.JSON200.TtlMs != 60000 || rn.JSON200.Mode != api.GrantModePermit ||
		rn.JSON200.Limit == nil || *rn.JSON200.Limit != 3 {
		t.Fatalf("renew: %v %s", err, rn.Body)
	}
	after := f.semState(t, "pool:render")
	for i, h := range after.Holders {
		if changed := !h.ExpiresAt.Equal(before.Holders[i].ExpiresAt); changed != (i == 1) {
			t.Fatalf("holder %d expiry %v → %v after renewing holder 1", i, before.Holders[i].ExpiresAt, h.ExpiresAt)
		}
	}

	// Re-entry and release count per permit.
	re := f.acquireSem(t, "pool:render", api.SemaphoreAcquireRequest{Limit: 3, Token: &permits[0].Token})
	if re.Count != 2 || re.Fence != permits[0].Fence || re.Token != permits[0].Token {
		t.Fatalf("re-entry = %+v", re)
	}
	for _, want := range []api.ReleaseResult{{Key: "pool:render", Released: false, Count: 1}, {Key: "pool:render", Released: true, Count: 0}} {
		rel, err := f.client.ReleaseSemaphoreWithResponse(ctx, "pool:render", api.ReleaseRequest{Token: permits[0].Token})
		if err != nil || rel.JSON200 == nil || *rel.JSON200 != want {
			t.Fatalf("release: %v %s, want %+v", err, rel.Body, want)
		}
	}
	if st := f.semState(t, "pool:render"); len(st.Holders) != 2 || st.Holders[0].Fence != permits[1].Fence {
		t.Fatalf("after releasing permit 0: %+v", st.Holders)
	}

	// Force-release by fence breaks that permit only; without, every one.
	fr, err := f.client.ForceReleaseSemaphoreWithResponse(ctx, "pool:render", api.ForceReleaseRequest{Fence: &permits[2].Fence, Reason: ptr("stuck")})
	if err != nil || fr.JSON200 == nil || fr.JSON200.Owner != "w2" || fr.JSON200.Fence != permits[2].Fence || fr.JSON200.Key != "pool:render" {
		t.Fatalf("force-release by fence: %v %s", err, fr.Body)
	}
	if st := f.semState(t, "pool:render"); len(st.Holders) != 1 || st.Holders[0].Fence != permits[1].Fence {
		t.Fatalf("after breaking permit 2: %+v", st.Holders)
	}
	f.acquireSem(t, "pool:render", api.SemaphoreAcquireRequest{Limit: 3, Owner: ptr("w3")})
	if fr, err := f.client.ForceReleaseSemaphoreWithResponse(ctx, "pool:render", api.ForceReleaseRequest{}); err != nil || fr.JSON200 == nil {
		t.Fatalf("force-release all: %v %s", err, fr.Body)
	}
	if res, _ := f.client.GetSemaphoreWithResponse(ctx, "pool:render"); res.StatusCode() != 404 {
		t.Fatalf("after breaking every permit: %d %s", res.StatusCode(), res.Body)
	}
	if st := f.lockState(t, "pool:render", tokens...); st.Owner != "the-lock" {
		t.Fatalf("the lock of the same name: %+v", st)
	}

	// History of the semaphore: its own events, by name.
	hist, err := f.client.GetSemaphoreHistoryWithResponse(ctx, "pool:render", &api.GetSemaphoreHistoryParams{Limit: ptr(100)})
	if err != nil || hist.JSON200 == nil || hist.JSON200.Key != "pool:render" {
		t.Fatalf("history: %v %s", err, hist.Body)
	}
	count := map[api.EventType]int{}
	for _, e := range hist.JSON200.Events {
		count[e.Type]++
		if e.Owner == "the-lock" {
			t.Fatalf("the lock's event in the semaphore's history: %+v", e)
		}
	}
	if count["acquired"] != 4 || count["reentered"] != 1 || count["released"] != 2 || count["force_released"] < 2 {
		t.Fatalf("history counts %v:\n%s", count, hist.Body)
	}
	if e := hist.JSON200.Events[0]; e.Type != "force_released" || e.Actor != "127.0.0.1" {
		t.Fatalf("newest event %+v", e)
	}
	renewals, err := f.client.GetSemaphoreHistoryWithResponse(ctx, "pool:render", &api.GetSemaphoreHistoryParams{Type: ptr(api.Renewed)})
	if err != nil || renewals.JSON200 == nil || len(renewals.JSON200.Events) != 1 || renewals.JSON200.Events[0].Fence != permits[1].Fence {
		t.Fatalf("renewals: %v %s", err, renewals.Body)
	}
	noTokens(t, hist.Body, tokens...)
}

// A semaphore's limit is set by its first holder; another limit while
// permits are held is limit_mismatch, and a free semaphore takes a new one.
func TestSemaphoreLimitMismatch(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	l := f.acquireSem(t, "lm", api.SemaphoreAcquireRequest{Limit: 2})
	for _, limit := range []int{1, 3, 10000} {
		res, err := f.client.AcquireSemaphoreWithResponse(ctx, "lm", nil, api.SemaphoreAcquireRequest{Limit: limit, WaitMs: ptr(int64(100))})
		if err != nil {
			t.Fatal(err)
		}
		if p := problemOf(t, res.HTTPResponse, res.Body); res.StatusCode() != 409 || p.Code != "limit_mismatch" {
			t.Fatalf("limit %d: %d %s", limit, res.StatusCode(), res.Body)
		}
	}
	if st := f.semState(t, "lm", l.Token); len(st.Holders) != 1 || st.Limit == nil || *st.Limit != 2 {
		t.Fatalf("state after mismatches: %+v", st)
	}
	f.acquireSem(t, "lm", api.SemaphoreAcquireRequest{Limit: 2})
	if _, err := f.client.ForceReleaseSemaphoreWithResponse(ctx, "lm", api.ForceReleaseRequest{}); err != nil {
		t.Fatal(err)
	}
	if l := f.acquireSem(t, "lm", api.SemaphoreAcquireRequest{Limit: 5}); l.Limit == nil || *l.Limit != 5 {
		t.Fatalf("a free semaphore with a new limit: %+v", l)
	}
}

// Waiting for a permit is FIFO and visible: the queue lists the waiting
// requests in order, with owner, mode and waiting_since, never a token; a
// freed permit goes to the head of the queue.
func TestSemaphoreQueue(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	holder := f.acquireSem(t, "q:sem", api.SemaphoreAcquireRequest{Limit: 1, Owner: ptr("holder")})
	type result struct {
		owner string
		res   *api.AcquireSemaphoreResponse
	}
	got := make(chan result, 2)
	for _, owner := range []string{"first", "second"} {
		go func() {
			r, err := f.client.AcquireSemaphoreWithResponse(ctx, "q:sem", nil, api.SemaphoreAcquireRequest{Limit: 1, Owner: ptr(owner), WaitMs: ptr(int64(10000))})
			if err != nil {
				t.Error(err)
			}
			got <- result{owner, r}
		}()
		// One after the other, so that their order is known.
		waitQueue(t, func() api.LockState { return f.semState(t, "q:sem") }, map[string]int{"first": 1, "second": 2}[owner])
	}
	st := f.semState(t, "q:sem", holder.Token)
	if st.Waiters != 2 || st.Queue[0].Owner != "first" || st.Queue[1].Owner != "second" ||
		st.Queue[0].Mode != api.GrantModePermit || st.Queue[0].WaitingSince.IsZero() || st.Queue[1].WaitingSince.Before(st.Queue[0].WaitingSince) {
		t.Fatalf("queue = %+v, waiters %d", st.Queue, st.Waiters)
	}
	if _, err := f.client.ReleaseSemaphoreWithResponse(ctx, "q:sem", api.ReleaseRequest{Token: holder.Token}); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.owner != "first" || r.res.JSON200 == nil || r.res.JSON200.Owner != "first" {
		t.Fatalf("granted %s first: %d %s", r.owner, r.res.StatusCode(), r.res.Body)
	}
	if st := waitQueue(t, func() api.LockState { return f.semState(t, "q:sem") }, 1); st.Queue[0].Owner != "second" {
		t.Fatalf("queue after the grant: %+v", st.Queue)
	}
	if _, err := f.client.ReleaseSemaphoreWithResponse(ctx, "q:sem", api.ReleaseRequest{Token: r.res.JSON200.Token}); err != nil {
		t.Fatal(err)
	}
	if r := <-got; r.res.JSON200 == nil || r.res.JSON200.Owner != "second" {
		t.Fatalf("second waiter: %d %s", r.res.StatusCode(), r.res.Body)
	}
}

// Many clients contend for a semaphore of 3 permits over HTTP for a few
// seconds: at no grant do more than 3 hold it, by the clients' own count
// and by the state's holders, and every grant has a fence of its own.
func TestSemaphoreNeverOverLimit(t *testing.T) {
	f := newFixture(t)
	const (
		limit   = 3
		workers = 20
		run     = 3 * time.Second
	)
	ctx, cancel := context.WithTimeout(context.Background(), run)
	defer cancel()
	var (
		inside, grants, most atomic.Int64
		fences               sync.Map
		wg                   sync.WaitGroup
	)
	fail := func(format string, args ...any) {
		t.Errorf(format, args...)
		cancel()
	}
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			owner := fmt.Sprint("w", w)
			for ctx.Err() == nil {
				res, err := f.client.AcquireSemaphoreWithResponse(context.Background(), "cap:3", nil,
					api.SemaphoreAcquireRequest{Limit: limit, Owner: &owner, WaitMs: ptr(int64(2000)), TtlMs: ptr(int64(10000))})
				if err != nil {
					fail("acquire: %v", err)
					return
				}
				if res.StatusCode() == 409 && bytes.Contains(res.Body, []byte(`"no_permits"`)) {
					continue
				}
				if res.JSON200 == nil {
					fail("acquire: %d %s", res.StatusCode(), res.Body)
					return
				}
				l := res.JSON200
				// Counted after the grant and uncounted before the release:
				// the count is never above the real number of holders.
				n := inside.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				if n > limit {
					fail("%d holders at once, limit %d", n, limit)
				}
				if _, dup := fences.LoadOrStore(l.Fence, owner); dup {
					fail("fence %d granted twice", l.Fence)
				}
				grants.Add(1)
				time.Sleep(time.Duration(w%3) * time.Millisecond)
				inside.Add(-1)
				rel, err := f.client.ReleaseSemaphoreWithResponse(context.Background(), "cap:3", api.ReleaseRequest{Token: l.Token})
				if err != nil || rel.JSON200 == nil || !rel.JSON200.Released {
					fail("release: %v %s", err, rel.Body)
					return
				}
			}
		}()
	}
	// The state agrees, read while the contention runs.
	states := 0
	for ctx.Err() == nil {
		res, err := f.client.GetSemaphoreWithResponse(context.Background(), "cap:3")
		if err != nil {
			t.Fatal(err)
		}
		if res.JSON200 != nil {
			states++
			if n := len(res.JSON200.Holders); n > limit || res.JSON200.Limit == nil || *res.JSON200.Limit != limit {
				fail("state shows %d holders, limit %v", n, res.JSON200.Limit)
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	wg.Wait()
	t.Logf("%d grants to %d clients in %v, at most %d at once, %d states read", grants.Load(), workers, run, most.Load(), states)
	if grants.Load() < 100 || most.Load() != limit {
		t.Fatalf("%d grants, at most %d at once: the test did not contend", grants.Load(), most.Load())
	}
}

// Shared holds: many shared holders at once, each with its own token and
// fence; an exclusive request waits for them all; a shared request that
// comes after a waiting exclusive one waits behind it (no writer
// starvation); renew, release and force-release work per holder.
func TestSharedMode(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	shared := api.LockModeShared
	r1 := f.acquire(t, "rw:1", api.AcquireRequest{Owner: ptr("reader-1"), Mode: &shared})
	r2 := f.acquire(t, "rw:1", api.AcquireRequest{Owner: ptr("reader-2"), Mode: &shared})
	if r1.Mode != api.GrantModeShared || r2.Mode != api.GrantModeShared || r1.Token == r2.Token || r2.Fence <= r1.Fence || r1.Limit != nil {
		t.Fatalf("shared grants %+v %+v", r1, r2)
	}
	tokens := []string{r1.Token, r2.Token}
	st := f.lockState(t, "rw:1", tokens...)
	if st.Mode != api.GrantModeShared || len(st.Holders) != 2 || st.Holders[0].Owner != "reader-1" || st.Holders[1].Owner != "reader-2" ||
		st.Holders[0].Mode != api.GrantModeShared || st.Limit != nil {
		t.Fatalf("state with two readers: %+v", st)
	}

	// An exclusive request without waiting is refused.
	res, err := f.client.AcquireLockWithResponse(ctx, "rw:1", nil, api.AcquireRequest{Owner: ptr("writer")})
	if err != nil || res.StatusCode() != 409 || !bytes.Contains(res.Body, []byte(`"lock_held"`)) {
		t.Fatalf("exclusive while shared: %v %d %s", err, res.StatusCode(), res.Body)
	}
	// It waits; a reader that comes later queues behind it.
	writer := make(chan *api.AcquireLockResponse, 1)
	go func() {
		r, err := f.client.AcquireLockWithResponse(ctx, "rw:1", nil, api.AcquireRequest{Owner: ptr("writer"), WaitMs: ptr(int64(10000))})
		if err != nil {
			t.Error(err)
		}
		writer <- r
	}()
	waitQueue(t, func() api.LockState { return f.lockState(t, "rw:1") }, 1)
	reader3 := make(chan *api.AcquireLockResponse, 1)
	go func() {
		r, err := f.client.AcquireLockWithResponse(ctx, "rw:1", nil, api.AcquireRequest{Owner: ptr("reader-3"), Mode: &shared, WaitMs: ptr(int64(10000))})
		if err != nil {
			t.Error(err)
		}
		reader3 <- r
	}()
	st = waitQueue(t, func() api.LockState { return f.lockState(t, "rw:1", tokens...) }, 2)
	if q := st.Queue; q[0].Owner != "writer" || q[0].Mode != api.GrantModeExclusive || q[1].Owner != "reader-3" || q[1].Mode != api.GrantModeShared ||
		st.Waiters != 2 || q[0].WaitingSince.IsZero() {
		t.Fatalf("queue = %+v (waiters %d)", q, st.Waiters)
	}
	if len(st.Holders) != 2 {
		t.Fatalf("a reader that came after a waiting writer got in: %+v", st.Holders)
	}

	// Per holder: renew reader-1 only, release reader-1, break reader-2 by
	// its fence; then the writer has the key alone.
	before := f.lockState(t, "rw:1")
	if rn, err := f.client.RenewLockWithResponse(ctx, "rw:1", api.RenewRequest{Token: r1.Token, TtlMs: ptr(int64(45000))}); err != nil || rn.JSON200 == nil || rn.JSON200.Fence != r1.Fence {
		t.Fatalf("renew reader-1: %v %s", err, rn.Body)
	}
	after := f.lockState(t, "rw:1")
	if after.Holders[0].ExpiresAt.Equal(before.Holders[0].ExpiresAt) || !after.Holders[1].ExpiresAt.Equal(before.Holders[1].ExpiresAt) {
		t.Fatalf("renewing reader-1 changed %+v → %+v", before.Holders, after.Holders)
	}
	if rel, err := f.client.ReleaseLockWithResponse(ctx, "rw:1", api.ReleaseRequest{Token: r1.Token}); err != nil || rel.JSON200 == nil || !rel.JSON200.Released {
		t.Fatalf("release reader-1: %v %s", err, rel.Body)
	}
	if st := f.lockState(t, "rw:1"); len(st.Holders) != 1 || st.Holders[0].Owner != "reader-2" {
		t.Fatalf("after releasing reader-1: %+v", st.Holders)
	}
	select {
	case r := <-writer:
		t.Fatalf("the writer got in beside reader-2: %d %s", r.StatusCode(), r.Body)
	case <-time.After(50 * time.Millisecond):
	}
	fr, err := f.client.ForceReleaseLockWithResponse(ctx, "rw:1", api.ForceReleaseRequest{Fence: &r2.Fence})
	if err != nil || fr.JSON200 == nil || fr.JSON200.Owner != "reader-2" || fr.JSON200.Fence != r2.Fence {
		t.Fatalf("force-release reader-2 by fence: %v %s", err, fr.Body)
	}
	w := <-writer
	if w.JSON200 == nil || w.JSON200.Mode != api.GrantModeExclusive || w.JSON200.Fence <= r2.Fence {
		t.Fatalf("writer: %d %s", w.StatusCode(), w.Body)
	}
	if st := f.lockState(t, "rw:1", w.JSON200.Token); st.Mode != api.GrantModeExclusive || len(st.Holders) != 1 || len(st.Queue) != 1 {
		t.Fatalf("with the writer in: %+v", st)
	}
	if _, err := f.client.ReleaseLockWithResponse(ctx, "rw:1", api.ReleaseRequest{Token: w.JSON200.Token}); err != nil {
		t.Fatal(err)
	}
	r3 := <-reader3
	if r3.JSON200 == nil || r3.JSON200.Mode != api.GrantModeShared || r3.JSON200.Owner != "reader-3" {
		t.Fatalf("reader-3: %d %s", r3.StatusCode(), r3.Body)
	}

	// Force-release without a fence breaks every shared holder.
	f.acquire(t, "rw:1", api.AcquireRequest{Owner: ptr("reader-4"), Mode: &shared})
	if fr, err := f.client.ForceReleaseLockWithResponse(ctx, "rw:1", api.ForceReleaseRequest{}); err != nil || fr.JSON200 == nil {
		t.Fatalf("force-release all: %v %s", err, fr.Body)
	}
	if res, _ := f.client.GetLockWithResponse(ctx, "rw:1"); res.StatusCode() != 404 {
		t.Fatalf("after breaking every reader: %d %s", res.StatusCode(), res.Body)
	}
}

// Hold streams keep a semaphore's permit and a shared hold renewed, and
// release them when the client leaves.
func TestHoldPermitAndShared(t *testing.T) {
	f := newFixture(t)
	open := func(t *testing.T, ctx context.Context, path, body string) chan sse {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, f.url+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if res.StatusCode != 200 {
			b, _ := io.ReadAll(res.Body)
			t.Fatalf("hold %s: %d %s", path, res.StatusCode, b)
		}
		events := make(chan sse, 16)
		go readEvents(res.Body, events)
		return events
	}
	lease := func(t *testing.T, events chan sse, want string) api.Lease {
		t.Helper()
		select {
		case ev := <-events:
			var l api.Lease
			if ev.event != want || json.Unmarshal([]byte(ev.data), &l) != nil {
				t.Fatalf("event %+v, want %s", ev, want)
			}
			return l
		case <-time.After(3 * time.Second):
			t.Fatalf("no %s event", want)
		}
		return api.Lease{}
	}
	for _, tc := range []struct {
		name, path, body string
		mode             api.GrantMode
		res              lock.Resource
	}{
		{"permit", "/v1/semaphores/hold:sem/hold", `{"limit":2,"ttl_ms":300}`, api.GrantModePermit, lock.Semaphore("hold:sem")},
		{"shared", "/v1/locks/hold:rw/hold", `{"mode":"shared","ttl_ms":300}`, api.GrantModeShared, lock.Lock("hold:rw")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			// Two holds at once: two permits, two shared holders.
			a, b := open(t, ctx, tc.path, tc.body), open(t, ctx, tc.path, tc.body)
			la, lb := lease(t, a, "acquired"), lease(t, b, "acquired")
			if la.Mode != tc.mode || lb.Mode != tc.mode || la.Fence == lb.Fence || la.Key != strings.Split(tc.path, "/")[3] {
				t.Fatalf("holds %+v %+v", la, lb)
			}
			for range 3 {
				if l := lease(t, a, "renewed"); l.Fence != la.Fence || l.Mode != tc.mode || (l.Limit == nil) != (la.Limit == nil) ||
					(l.Limit != nil && *l.Limit != *la.Limit) {
					t.Fatalf("renewed %+v after %+v", l, la)
				}
			}
			st, err := f.engine.State(context.Background(), tc.res)
			if err != nil || len(st.Holders) != 2 {
				t.Fatalf("state with two holds: %+v %v", st, err)
			}
			cancel()
			lockdtest.Eventually(t, func() bool {
				_, err := f.engine.State(context.Background(), tc.res)
				return err == lock.ErrNotFound
			}, 5*time.Second, "both holds released")
		})
	}
}
