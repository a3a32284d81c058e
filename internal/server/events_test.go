package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockd/lockd/api"
	"github.com/lockd/lockd/internal/auth"
	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/lockdtest"
	"github.com/lockd/lockd/internal/server"
)

// sseEvent is one message of an event stream.
type sseEvent struct {
	id, event string
	data      map[string]any
	raw       string
}

// sseStream reads an event stream; heartbeats counts its comment lines.
type sseStream struct {
	resp       *http.Response
	events     chan sseEvent
	heartbeats chan struct{}
}

func openEvents(t *testing.T, url, apiKey, lastID string) (*http.Response, *sseStream) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+apiKey)
	}
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		return resp, nil
	}
	s := &sseStream{resp: resp, events: make(chan sseEvent, 100), heartbeats: make(chan struct{}, 100)}
	go func() {
		defer close(s.events)
		sc := bufio.NewScanner(resp.Body)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if ev.event != "" {
					s.events <- ev
				}
				ev = sseEvent{}
			case strings.HasPrefix(line, ": heartbeat"):
				select {
				case s.heartbeats <- struct{}{}:
				default:
				}
			case strings.HasPrefix(line, "id: "):
				ev.id = line[4:]
			case strings.HasPrefix(line, "event: "):
				ev.event = line[7:]
			case strings.HasPrefix(line, "data: "):
				ev.raw = line[6:]
				_ = json.Unmarshal([]byte(ev.raw), &ev.data)
			}
		}
	}()
	return resp, s
}

func (s *sseStream) next(t *testing.T) sseEvent {
	t.Helper()
	select {
	case ev, ok := <-s.events:
		if !ok {
			t.Fatal("the stream ended")
		}
		return ev
	case <-time.After(5 * time.Second):
		t.Fatal("no event within 5 s")
	}
	return sseEvent{}
}

const eventsAuth = `
keys:
  - {name: ops, key: ops-key-0123456789, scopes: [admin]}
  - {name: team-a, key: a-key-0123456789ab, scopes: [read], prefixes: ["ev:a:"]}
`

// The event stream under auth: a reader limited to ev:a: asking for ev:
// sees only ev:a: events, never a token; it resumes after Last-Event-ID
// with what happened while it was away, in order; heartbeats keep a quiet
// stream open; bad requests are 4xx.
func TestEventStream(t *testing.T) {
	keys, err := auth.Parse([]byte(eventsAuth))
	if err != nil {
		t.Fatal(err)
	}
	ld := lockdtest.Start(t, lockdtest.Options{Configure: func(c *server.Config) {
		c.Keys = keys
		c.HoldHeartbeat = 200 * time.Millisecond
	}})
	f := newEvFixture(t, ld, "ops-key-0123456789")
	ctx := context.Background()

	for _, tc := range []struct {
		name, key, query, lastID string
		status                   int
	}{
		{"no key", "", "", "", http.StatusUnauthorized},
		{"prefix outside the key's", "a-key-0123456789ab", "?prefix=ev:b:", "", http.StatusForbidden},
		{"bad prefix", "a-key-0123456789ab", "?prefix=a%20b", "", http.StatusBadRequest},
		{"bad Last-Event-ID", "a-key-0123456789ab", "", "yesterday", http.StatusBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, _ := openEvents(t, ld.URL+"/v1/events"+tc.query, tc.key, tc.lastID)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, tc.status)
			}
		})
	}

	_, s := openEvents(t, ld.URL+"/v1/events?prefix=ev:", "a-key-0123456789ab", "")
	la := f.acquire(t, "ev:a:1", api.AcquireRequest{Owner: ptr("w1")})
	f.acquire(t, "ev:b:1", api.AcquireRequest{Owner: ptr("w2")})
	f.release(t, "ev:a:1", la.Token)
	first := s.next(t)
	if first.event != "acquired" || first.data["key"] != "ev:a:1" || first.data["owner"] != "w1" || first.data["id"] != first.id ||
		first.data["actor"] != "ops" || first.id == "" {
		t.Fatalf("first event %+v", first)
	}
	if ev := s.next(t); ev.event != "released" || ev.data["key"] != "ev:a:1" {
		t.Fatalf("second event %+v (ev:b:1 must not show)", ev)
	}
	for _, raw := range []string{first.raw} {
		if strings.Contains(raw, la.Token) || strings.Contains(raw, "token") {
			t.Fatalf("an event carries a token: %s", raw)
		}
	}
	select {
	case <-s.heartbeats:
	case <-time.After(2 * time.Second):
		t.Fatal("no heartbeat on a quiet stream")
	}

	// Away: what happens now is read after Last-Event-ID.
	s.resp.Body.Close()
	l2 := f.acquire(t, "ev:a:2", api.AcquireRequest{TtlMs: ptr(int64(300))})
	if _, err := ld.Engine.ForceReleaseFence(ctx, "ev:b:1", 0, "ops", "x"); err != nil {
		t.Fatal(err)
	}
	_, s2 := openEvents(t, ld.URL+"/v1/events?prefix=ev:", "a-key-0123456789ab", first.id)
	var got []string
	for range 3 {
		ev := s2.next(t)
		got = append(got, ev.event+" "+fmt.Sprint(ev.data["key"]))
	}
	// The lease of ev:a:2 lapses with nobody looking: the sweeper's
	// expired event arrives live.
	if want := "[released ev:a:1 acquired ev:a:2 expired ev:a:2]"; fmt.Sprint(got) != want {
		t.Fatalf("resumed %v, want %v", got, want)
	}
	_ = l2
}

// A semaphore's events carry its name as the key and kind semaphore; the
// stream's prefix and the API key's prefixes apply to the name.
func TestEventStreamSemaphores(t *testing.T) {
	keys, err := auth.Parse([]byte(eventsAuth))
	if err != nil {
		t.Fatal(err)
	}
	ld := lockdtest.Start(t, lockdtest.Options{Configure: func(c *server.Config) { c.Keys = keys }})
	f := newEvFixture(t, ld, "ops-key-0123456789")
	_, s := openEvents(t, ld.URL+"/v1/events?prefix=ev:", "a-key-0123456789ab", "")
	sem := func(name string) api.Lease {
		t.Helper()
		res, err := f.c.AcquireSemaphoreWithResponse(context.Background(), name, nil, api.SemaphoreAcquireRequest{Limit: 2, Owner: ptr("w")})
		if err != nil || res.JSON200 == nil {
			t.Fatalf("acquire semaphore %s: %v %s", name, err, res.Body)
		}
		return *res.JSON200
	}
	sem("ev:b:pool")  // outside team-a's prefix: not shown
	sem("other:pool") // outside the stream's prefix: not shown
	p := sem("ev:a:pool")
	f.acquire(t, "ev:a:pool", api.AcquireRequest{Owner: ptr("lock")})
	ev := s.next(t)
	if ev.event != "acquired" || ev.data["key"] != "ev:a:pool" || ev.data["kind"] != "semaphore" || ev.data["owner"] != "w" || ev.data["fence"] != float64(p.Fence) {
		t.Fatalf("semaphore event %+v", ev)
	}
	if strings.Contains(ev.raw, p.Token) || strings.Contains(ev.raw, "sem/") {
		t.Fatalf("the event shows a token or the engine key: %s", ev.raw)
	}
	if ev := s.next(t); ev.data["key"] != "ev:a:pool" || ev.data["kind"] != "lock" || ev.data["owner"] != "lock" {
		t.Fatalf("lock event %+v", ev)
	}
}

// at_risk: set when the lease has under a third of its TTL left, or its
// last renewal came that late; cleared by a timely renewal.
func TestAtRisk(t *testing.T) {
	ld := lockdtest.Start(t, lockdtest.Options{})
	f := newEvFixture(t, ld, "")
	atRisk := func(key string) (bool, int64) {
		st := f.state(t, key)
		return st.AtRisk, st.RemainingMs
	}
	l := f.acquire(t, "risk:1", api.AcquireRequest{TtlMs: ptr(int64(1500))})
	if r, _ := atRisk("risk:1"); r {
		t.Fatal("a fresh lease is at risk")
	}
	lockdtest.Eventually(t, func() bool { _, left := atRisk("risk:1"); return left < 400 }, 3*time.Second, "the lease running low")
	if r, left := atRisk("risk:1"); !r && left < 500 {
		t.Fatalf("%d ms of 1500 left, not at risk", left)
	}
	f.renew(t, "risk:1", l.Token)
	if r, left := atRisk("risk:1"); !r || left < 1000 {
		t.Fatalf("renewed late: at_risk %v with %d ms left, want true (the renewal came with < 1/3 left)", r, left)
	}
	f.renew(t, "risk:1", l.Token)
	if r, _ := atRisk("risk:1"); r {
		t.Fatal("renewed on time, still at risk")
	}
}

// The contention metrics' prefix label stays bounded: 10,000 prefixes
// make at most --metrics-max-prefixes labels and "other".
func TestContentionLabelsBounded(t *testing.T) {
	reg := prometheus.NewRegistry()
	ld := lockdtest.Start(t, lockdtest.Options{Configure: func(c *server.Config) {
		c.Contention = server.ContentionConfig{PrefixDepth: 2, MaxPrefixes: 50}
	}})
	f := newEvFixture(t, ld, "")
	f.acquire(t, "order:pay:1", api.AcquireRequest{})
	if res, err := f.c.AcquireSemaphoreWithResponse(context.Background(), "order:pay:pool", nil, api.SemaphoreAcquireRequest{Limit: 1}); err != nil || res.JSON200 == nil {
		t.Fatalf("acquire semaphore: %v", err)
	}
	body := f.metrics(t)
	// A semaphore's label is sem/ and its name's prefix: apart from the
	// locks of that prefix.
	for _, want := range []string{`lockd_lock_acquires_total{outcome="granted",prefix="order:pay:"} 1`, `lockd_lock_acquires_total{outcome="granted",prefix="sem/order:pay:"} 1`} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	c := server.NewContentionForTest(reg, server.ContentionConfig{MaxPrefixes: 100})
	for i := range 10_000 {
		c.Acquired(fmt.Sprintf("p%d:k", i), time.Millisecond)
		c.Ended(fmt.Sprintf("p%d:k", i), time.Second)
		// Semaphores count in the same bound; one without a ':' is its
		// own prefix, as a lock key is.
		c.Acquired(lock.SemaphoreKey(fmt.Sprintf("s%d", i)), time.Millisecond)
		c.Ended(lock.SemaphoreKey(fmt.Sprintf("s%d", i)), time.Second)
	}
	for _, name := range []string{"lockd_lock_acquires_total", "lockd_lock_wait_seconds", "lockd_lock_hold_seconds"} {
		if n := seriesOf(t, reg, name); n == 0 || n > 101 {
			t.Errorf("%s has %d series after 10,000 prefixes, want at most 101", name, n)
		}
	}
	if !strings.Contains(gatherText(t, reg), `"other"`) {
		t.Error("no other label")
	}
}

// seriesOf counts the series of one metric family.
func seriesOf(t *testing.T, reg *prometheus.Registry, name string) int {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return len(mf.GetMetric())
		}
	}
	return 0
}

func gatherText(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, mf := range mfs {
		fmt.Fprintln(&b, mf.String())
	}
	return b.String()
}

// evFixture talks to a test lockd with one API key (or none).
type evFixture struct {
	url string
	c   *api.ClientWithResponses
}

func newEvFixture(t *testing.T, ld *lockdtest.Lockd, apiKey string) *evFixture {
	t.Helper()
	c, err := api.NewClientWithResponses(ld.URL, api.WithRequestEditorFn(func(_ context.Context, r *http.Request) error {
		if apiKey != "" {
			r.Header.Set("Authorization", "Bearer "+apiKey)
		}
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	return &evFixture{url: ld.URL, c: c}
}

func (f *evFixture) acquire(t *testing.T, key string, body api.AcquireRequest) api.Lease {
	t.Helper()
	res, err := f.c.AcquireLockWithResponse(context.Background(), key, nil, body)
	if err != nil || res.JSON200 == nil {
		t.Fatalf("acquire %s: %v %s", key, err, res.Body)
	}
	return *res.JSON200
}

func (f *evFixture) release(t *testing.T, key, token string) {
	t.Helper()
	res, err := f.c.ReleaseLockWithResponse(context.Background(), key, api.ReleaseRequest{Token: token})
	if err != nil || res.JSON200 == nil {
		t.Fatalf("release %s: %v %s", key, err, res.Body)
	}
}

func (f *evFixture) renew(t *testing.T, key, token string) {
	t.Helper()
	res, err := f.c.RenewLockWithResponse(context.Background(), key, api.RenewRequest{Token: token})
	if err != nil || res.JSON200 == nil {
		t.Fatalf("renew %s: %v %s", key, err, res.Body)
	}
}

func (f *evFixture) state(t *testing.T, key string) api.LockState {
	t.Helper()
	res, err := f.c.GetLockWithResponse(context.Background(), key)
	if err != nil || res.JSON200 == nil {
		t.Fatalf("state %s: %v %s", key, err, res.Body)
	}
	return *res.JSON200
}

func (f *evFixture) metrics(t *testing.T) string {
	t.Helper()
	resp, err := http.Get(f.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}
