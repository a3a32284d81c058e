package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

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
	if _, err := ld.Engine.ForceReleaseFence(ctx, lock.Lock("ev:b:1"), 0, "ops", "x"); err != nil {
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
		t.Fatalf("the event shows a token or a Redis key part (sem/): %s", ev.raw)
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
	// A semaphore has its name's prefix and its own kind: apart from the
	// locks of that prefix, in a label of its own, not in the prefix
	// (newcomer #23).
	for _, want := range []string{`lockd_acquires_total{kind="lock",outcome="granted",prefix="order:pay:"} 1`, `lockd_acquires_total{kind="semaphore",outcome="granted",prefix="order:pay:"} 1`} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	c := server.NewContentionForTest(reg, server.ContentionConfig{MaxPrefixes: 100})
	for i := range 10_000 {
		c.Acquired(lock.Lock(fmt.Sprintf("p%d:k", i)), time.Millisecond)
		c.Ended(lock.Lock(fmt.Sprintf("p%d:k", i)), time.Second)
		// Semaphores count in the same bound; one without a ':' is its
		// own prefix, as a lock key is.
		c.Acquired(lock.Semaphore(fmt.Sprintf("s%d", i)), time.Millisecond)
		c.Ended(lock.Semaphore(fmt.Sprintf("s%d", i)), time.Second)
	}
	for _, name := range []string{"lockd_acquires_total", "lockd_acquire_wait_seconds", "lockd_hold_seconds"} {
		// Two kinds of 100 labels and other each.
		if n := seriesOf(t, reg, name); n == 0 || n > 2*101 {
			t.Errorf("%s has %d series after 10,000 prefixes, want at most 2×101", name, n)
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

// fillEvents appends n events of keys bulk:<i> to the event stream, as
// the scripts write them; with keep > 0 the stream is capped at about keep
// entries (MAXLEN ~), as --events-max caps it.
func fillEvents(t *testing.T, ld *lockdtest.Lockd, n, keep int) {
	t.Helper()
	ctx := context.Background()
	rdb := ld.Redis.Client(t)
	at := strconv.FormatInt(time.Now().UnixMilli(), 10)
	for done := 0; done < n; {
		_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i := 0; i < 1000 && done < n; i, done = i+1, done+1 {
				p.XAdd(ctx, &redis.XAddArgs{Stream: ld.Engine.EventStream(), MaxLen: int64(keep), Approx: keep > 0, Values: []any{
					"type", "acquired", "key", "bulk:" + strconv.Itoa(done), "at", at, "owner", "worker-" + strconv.Itoa(done%97),
					"fence", strconv.Itoa(1_763_000_000_000 + done), "ttl_ms", "30000", "count", "1", "actor", "ci", "reason", ""}})
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// redisCommand is what INFO commandstats says of one command since the
// last CONFIG RESETSTAT: its calls and its Redis CPU time.
func redisCommand(t *testing.T, rdb *redis.Client, name string) (calls int, cpu time.Duration) {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+name+":")
		if !ok {
			continue
		}
		for _, f := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(f, "=")
			n, _ := strconv.Atoi(v)
			switch k {
			case "calls":
				calls = n
			case "usec":
				cpu = time.Duration(n) * time.Microsecond
			}
		}
	}
	return calls, cpu
}

// redisOutput is how many bytes Redis has sent to its clients.
func redisOutput(t *testing.T, rdb *redis.Client) int64 {
	t.Helper()
	info, err := rdb.Info(context.Background(), "stats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "total_net_output_bytes:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

// N6 of the second audit: a resume from far back reads a bounded part of
// the stream, however narrow the prefix. With 100,000 events kept, a
// reader of one quiet prefix that resumes from 0-0 used to make lockd read
// all of them (201 XRANGE calls). Now it reads at most the resume window
// (lock.DefaultEventsResumeMax events) and is told with a reset event that
// it missed some; from a trimmed ID it is told at once, reading nothing.
func TestEventResumeBounded(t *testing.T) {
	for _, tc := range []struct {
		name      string
		n, keep   int
		maxXRANGE int
	}{
		// Never trimmed: the window ends the catch-up.
		{"100000 kept, none trimmed", 100_000, 0, 10_000/500 + 2},
		// Trimmed: 0-0 is older than the oldest kept event.
		{"100000 kept, older ones trimmed", 110_000, 100_000, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ld := lockdtest.Start(t, lockdtest.Options{})
			rdb := ld.Redis.Client(t)
			ctx := context.Background()
			fillEvents(t, ld, tc.n, tc.keep)
			kept, _ := rdb.XLen(ctx, ld.Engine.EventStream()).Result()
			if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			out := redisOutput(t, rdb)
			start := time.Now()
			_, s := openEvents(t, ld.URL+"/v1/events?prefix=narrow:", "", "0-0")
			// An event of the prefix that comes after the catch-up (or
			// before the reset's id: the reset covers it).
			acquire := func(key string) {
				if _, err := ld.Engine.Acquire(ctx, lock.Lock(key), lock.AcquireRequest{Owner: "w", TTL: time.Minute}); err != nil {
					t.Fatal(err)
				}
			}
			acquire("narrow:1")
			first := s.next(t)
			took := time.Since(start)
			calls, cpu := redisCommand(t, rdb, "xrange")
			t.Logf("resume from 0-0 of prefix narrow: with %d events kept: %d XRANGE calls, %v of Redis CPU in them, %.1f MB from Redis, %v to the end of the catch-up",
				kept, calls, cpu, float64(redisOutput(t, rdb)-out)/1e6, took.Round(time.Millisecond))
			if calls > tc.maxXRANGE {
				t.Errorf("%d XRANGE calls for one resume, want at most %d", calls, tc.maxXRANGE)
			}
			if first.event != "reset" || first.data["id"] != first.id || first.id == "" {
				t.Fatalf("first message %+v, want a reset", first)
			}
			// The stream goes on live after the reset.
			acquire("narrow:2")
			for ev := s.next(t); ev.data["key"] != "narrow:2"; ev = s.next(t) {
				if ev.data["key"] != "narrow:1" {
					t.Fatalf("after the reset: %+v", ev)
				}
			}
		})
	}
}

// N26 of the third audit: a key's resumes read at most its budget of
// events a minute (max_event_reads here, 3,000); beyond, its next resume
// is answered 429 with a Retry-After before it reads anything, while
// another key (the default budget) resumes from the same event.
func TestEventResumeBudgetPerAPIKey(t *testing.T) {
	keys, err := auth.Parse([]byte(`
keys:
  - {name: tenant-a, key: ta-key-0123456789ab, scopes: [read], prefixes: ["a:"], max_event_reads: 3000}
  - {name: tenant-b, key: tb-key-0123456789ab, scopes: [read], prefixes: ["b:"]}
`))
	if err != nil {
		t.Fatal(err)
	}
	ld := lockdtest.Start(t, lockdtest.Options{Configure: func(c *server.Config) { c.Keys = keys }})
	ctx := context.Background()
	rdb := ld.Redis.Client(t)
	// 5,249 events after the first, and a:1: no page boundary (500)
	// falls after a:1, so the catch-up is over when a:1 is handed out.
	fillEvents(t, ld, 5250, 0)
	first, err := rdb.XRangeN(ctx, ld.Engine.EventStream(), "-", "+", 1).Result()
	if err != nil || len(first) != 1 {
		t.Fatal(first, err)
	}
	url := ld.URL + "/v1/events"
	// tenant-a's first resume reads the 5,249 events, none of them its
	// own, and is served; it goes on live once it has caught up.
	resp, s := openEvents(t, url, "ta-key-0123456789ab", first[0].ID)
	if resp.StatusCode != 200 {
		t.Fatalf("tenant-a's first resume: %d", resp.StatusCode)
	}
	if _, err := ld.Engine.Acquire(ctx, lock.Lock("a:1"), lock.AcquireRequest{Owner: "w", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if ev := s.next(t); ev.data["key"] != "a:1" {
		t.Fatalf("tenant-a's stream: %+v", ev)
	}
	// Its budget is spent (reserved before the catch-up, charged as read):
	// the next resume is refused before it costs Redis anything.
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	resp, _ = openEvents(t, url, "ta-key-0123456789ab", first[0].ID)
	if resp.StatusCode == 200 {
		t.Fatal("tenant-a's second resume, over its budget: 200")
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(body), "3000 events") {
		t.Fatalf("tenant-a's second resume: %d Retry-After %q %s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	// Not even the stream's end was looked up (XINFO STREAM, which every
	// subscription starts with; the sweeper's XRANGE runs meanwhile).
	if calls, _ := redisCommand(t, rdb, "xinfo|stream"); calls != 0 {
		t.Errorf("the refused resume made %d XINFO STREAM calls", calls)
	}
	// A stream from now on costs no reads: still served.
	if resp, _ := openEvents(t, url, "ta-key-0123456789ab", ""); resp.StatusCode != 200 {
		t.Fatalf("tenant-a's stream without Last-Event-ID: %d", resp.StatusCode)
	}
	// Another key resumes from the same event, and follows on live.
	resp, s = openEvents(t, url+"?prefix=b:", "tb-key-0123456789ab", first[0].ID)
	if resp.StatusCode != 200 {
		t.Fatalf("tenant-b's resume: %d", resp.StatusCode)
	}
	if _, err := ld.Engine.Acquire(ctx, lock.Lock("b:1"), lock.AcquireRequest{Owner: "w", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if ev := s.next(t); ev.data["key"] != "b:1" {
		t.Fatalf("tenant-b's stream: %+v", ev)
	}
}

// GET /v1/events?key=K (repeatable) follows exactly those keys: ev:a:1
// does not bring ev:a:10, unlike prefix=ev:a:1; a key the API key may
// not read is 403, a bad or a 101st key 400 naming key.
func TestEventStreamExactKeys(t *testing.T) {
	keys, err := auth.Parse([]byte(eventsAuth))
	if err != nil {
		t.Fatal(err)
	}
	ld := lockdtest.Start(t, lockdtest.Options{Configure: func(c *server.Config) { c.Keys = keys }})
	f := newEvFixture(t, ld, "ops-key-0123456789")

	many := strings.Repeat("&key=ev:a:1", 101)[1:]
	for _, tc := range []struct {
		name, query string
		status      int
	}{
		{"a key outside the API key's prefixes", "?key=ev:b:1", http.StatusForbidden},
		{"one of them outside", "?key=ev:a:1&key=ev:b:1", http.StatusForbidden},
		{"bad key", "?key=-a", http.StatusBadRequest},
		{"empty key", "?key=", http.StatusBadRequest},
		{"too many keys", "?" + many, http.StatusBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, _ := openEvents(t, ld.URL+"/v1/events"+tc.query, "a-key-0123456789ab", "")
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, tc.status)
			}
			if tc.status == http.StatusBadRequest {
				b, _ := io.ReadAll(resp.Body)
				if !strings.Contains(string(b), `"key"`) {
					t.Fatalf("the problem does not name key: %s", b)
				}
			}
		})
	}

	_, s := openEvents(t, ld.URL+"/v1/events?key=ev:a:1&key=ev:a:3", "a-key-0123456789ab", "")
	for _, k := range []string{"ev:a:10", "ev:a:2", "ev:a:1", "ev:a:3"} {
		f.acquire(t, k, api.AcquireRequest{Owner: ptr("w")})
	}
	for _, want := range []string{"ev:a:1", "ev:a:3"} {
		if ev := s.next(t); ev.event != "acquired" || ev.data["key"] != want {
			t.Fatalf("event %+v, want acquired %s (ev:a:10 and ev:a:2 must not show)", ev, want)
		}
	}
}
