package client_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/lockd/lockd/client"
	"github.com/lockd/lockd/internal/lockdtest"
)

// grantAfterWait is the scenario "grant-after-wait" of clients/scenarios.json.
type grantAfterWait struct {
	HolderTTLMs int64 `json:"holder_ttl_ms"`
	TTLMs       int64 `json:"ttl_ms"`
	WaitMs      int64 `json:"wait_ms"`
	HoldMs      int64 `json:"hold_ms"`
	KeepMs      int64 `json:"keep_ms"`
	MinRenewals int   `json:"min_renewals"`
}

// readScenario decodes the entry id of clients/scenarios.json into v: the
// scenarios every client passes, the Go client too.
func readScenario(t *testing.T, id string, v any) {
	t.Helper()
	b, err := os.ReadFile("../clients/scenarios.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Scenarios []json.RawMessage `json:"scenarios"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	for _, raw := range doc.Scenarios {
		var s struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(raw, &s); err != nil {
			t.Fatal(err)
		}
		if s.ID == id {
			if err := json.Unmarshal(raw, v); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatalf("scenarios.json has no scenario %q", id)
}

// slowProxy serves target's API, each request 25 ms late (as
// LOCKD_SLOW_URL does for the other clients), until the test ends.
func slowProxy(t *testing.T, target string) string {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	p := httputil.NewSingleHostReverseProxy(u)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(25 * time.Millisecond)
		p.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// A lease granted after a wait longer than its TTL lasts its TTL from the
// grant and renews, for a lock, a semaphore's permit and a leadership
// (issue 35: the client counted the TTL from when it sent the
// acquire, and lost the lease at once).
func TestGrantAfterWaitKeepsLease(t *testing.T) {
	var spec grantAfterWait
	readScenario(t, "grant-after-wait", &spec)
	ms := func(n int64) time.Duration { return time.Duration(n) * time.Millisecond }
	ld := startLockd(t)
	c := newClient(t, ld.URL)
	slow := newClient(t, slowProxy(t, ld.URL)) // the waiter's, as over a network
	ctx := context.Background()

	kinds := []struct {
		name    string
		acquire func(c *client.Client, key string, opts client.AcquireOptions) (*client.Lease, error)
		waiting func(key string) (int, error) // how many wait for key
		holder  func(key string) (int64, error)
	}{
		{
			name: "lock",
			acquire: func(c *client.Client, key string, o client.AcquireOptions) (*client.Lease, error) {
				return c.Acquire(ctx, key, o)
			},
			waiting: func(key string) (int, error) {
				st, err := c.State(ctx, key)
				return st.Waiters, err
			},
			holder: func(key string) (int64, error) {
				st, err := c.State(ctx, key)
				return st.Fence, err
			},
		},
		{
			name: "permit",
			acquire: func(c *client.Client, key string, o client.AcquireOptions) (*client.Lease, error) {
				return c.Semaphore(key, 1).Acquire(ctx, o)
			},
			waiting: func(key string) (int, error) {
				st, err := c.Semaphore(key, 1).State(ctx)
				return st.Waiters, err
			},
			holder: func(key string) (int64, error) {
				st, err := c.Semaphore(key, 1).State(ctx)
				return st.Fence, err
			},
		},
		{
			name: "leadership",
			acquire: func(c *client.Client, key string, o client.AcquireOptions) (*client.Lease, error) {
				return c.Campaign(ctx, key, o)
			},
			waiting: func(key string) (int, error) {
				st, err := c.Leader(ctx, key)
				return len(st.Candidates), err
			},
			holder: func(key string) (int64, error) {
				st, err := c.Leader(ctx, key)
				if st.Term == nil {
					return 0, err
				}
				return *st.Term, err
			},
		},
	}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			key := uniqueKey(t)
			holder, err := k.acquire(c, key, client.AcquireOptions{Owner: "holder", TTL: ms(spec.HolderTTLMs)})
			if err != nil {
				t.Fatal(err)
			}
			type result struct {
				l      *client.Lease
				err    error
				waited time.Duration
			}
			got := make(chan result, 1)
			go func() {
				start := time.Now()
				l, err := k.acquire(slow, key, client.AcquireOptions{Owner: "waiter", TTL: ms(spec.TTLMs), Wait: ms(spec.WaitMs)})
				got <- result{l, err, time.Since(start)}
			}()
			lockdtest.Eventually(t, func() bool { n, err := k.waiting(key); return err == nil && n == 1 }, 5*time.Second, "the waiter queues")
			time.Sleep(ms(spec.HoldMs)) // the wait to outlast: longer than the waiter's TTL
			if err := holder.Release(ctx); err != nil {
				t.Fatal(err)
			}
			r := <-got
			granted := time.Now()
			if r.err != nil {
				t.Fatalf("the waiter: %v", r.err)
			}
			l := r.l
			defer l.Release(ctx)
			if r.waited <= l.TTL() {
				t.Fatalf("granted after %v, not longer than the TTL %v: the test proves nothing", r.waited, l.TTL())
			}
			select {
			case <-l.Lost():
				t.Fatalf("lost %v after a grant that waited %v: %v", time.Since(granted), r.waited, l.Err())
			case <-time.After(ms(spec.KeepMs)):
			}
			if n := l.Renewals(); n < spec.MinRenewals {
				t.Errorf("%d renewals in %v, want at least %d", n, ms(spec.KeepMs), spec.MinRenewals)
			}
			if f, err := k.holder(key); err != nil || f != l.Fence() {
				t.Errorf("after %v the holder's fence is %d (%v), want the waiter's %d", ms(spec.KeepMs), f, err, l.Fence())
			}
			if err := l.Release(ctx); err != nil {
				t.Errorf("release: %v", err)
			}
		})
	}
}
