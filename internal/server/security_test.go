package server_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockd/lockd/api"
	"github.com/lockd/lockd/internal/auth"
	"github.com/lockd/lockd/internal/authlimit"
	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/lockdtest"
	"github.com/lockd/lockd/internal/redistest"
	"github.com/lockd/lockd/internal/server"
)

// F1: no request can create a metrics series. Made-up methods and paths
// are labelled from fixed sets.
func TestMetricsLabelsAreBounded(t *testing.T) {
	f := newFixture(t)
	series := func() []string {
		t.Helper()
		_, body, err := do(http.MethodGet, f.url+"/metrics", "", "")
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, l := range strings.Split(string(body), "\n") {
			if strings.HasPrefix(l, "lockd_http_requests_total{") || strings.HasPrefix(l, "lockd_http_request_duration_seconds_count{") {
				out = append(out, l[:strings.LastIndexByte(l, ' ')])
			}
		}
		return out
	}
	send := func(round int) {
		t.Helper()
		for i := range 20 {
			method := fmt.Sprintf("M%dX%04d", round, i)
			for _, path := range []string{"/v1/locks/k/acquire", "/v1/locks/k", fmt.Sprintf("/nope/%d/%d", round, i), "/ui/assets/x", "/"} {
				if _, _, err := do(method, f.url+path, "", ""); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	series() // the scrape itself is counted from the second on
	send(1)
	before := series()
	send(2)
	after := series()
	if len(after) != len(before) {
		t.Fatalf("a second round of made-up methods and paths added series: %d → %d\n%s", len(before), len(after), strings.Join(after, "\n"))
	}
	label := regexp.MustCompile(`(method|route)="([^"]*)"`)
	for _, s := range after {
		for _, m := range label.FindAllStringSubmatch(s, -1) {
			if strings.Contains(m[2], "M1X") || strings.Contains(m[2], "M2X") || strings.Contains(m[2], "/nope") {
				t.Fatalf("a request's own text became a label: %s", s)
			}
		}
	}
	if !strings.Contains(strings.Join(after, "\n"), `method="other"`) {
		t.Fatalf("made-up methods are not counted as other:\n%s", strings.Join(after, "\n"))
	}
}

// F3: no web page can take or break a lock. Cross-site browser requests
// are refused with 403, browsers must send JSON (415), and programs that
// send no browser headers keep working as before.
func TestBrowserSafety(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	victim := f.acquire(t, "victim:browser", api.AcquireRequest{Owner: ptr("real-holder"), TtlMs: ptr(int64(60000))})
	victimSem := f.acquireSem(t, "victim:browser", api.SemaphoreAcquireRequest{Limit: 1, Owner: ptr("real-holder"), TtlMs: ptr(int64(60000))})
	host := strings.TrimPrefix(f.url, "http://")
	tests := []struct {
		name, method, path, ct, body string
		header                       map[string]string
		status                       int
	}{
		{"cross-site force-release", "POST", "/v1/locks/victim:browser/force-release", "", "",
			map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "http://evil.example"}, 403},
		{"same-site force-release", "POST", "/v1/locks/victim:browser/force-release", "application/json", "{}",
			map[string]string{"Sec-Fetch-Site": "same-site"}, 403},
		{"foreign Origin, no Sec-Fetch-Site", "POST", "/v1/locks/victim:browser/force-release", "application/json", "{}",
			map[string]string{"Origin": "http://localhost:18999"}, 403},
		{"cross-site acquire as a form", "POST", "/v1/locks/evil:1/acquire", "application/x-www-form-urlencoded", `{"owner":"evil"}`,
			map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "http://evil.example"}, 403},
		{"cross-site hold", "POST", "/v1/locks/evil:2/hold", "text/plain", `{}`,
			map[string]string{"Origin": "http://evil.example"}, 403},
		{"cross-site semaphore force-release", "POST", "/v1/semaphores/victim:browser/force-release", "", "",
			map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "http://evil.example"}, 403},
		{"cross-site semaphore acquire as a form", "POST", "/v1/semaphores/evil:1/acquire", "application/x-www-form-urlencoded", `{"limit":1}`,
			map[string]string{"Sec-Fetch-Site": "cross-site"}, 403},
		{"same-origin semaphore text body", "POST", "/v1/semaphores/evil:2/hold", "text/plain", `{"limit":1}`,
			map[string]string{"Sec-Fetch-Site": "same-origin"}, 415},
		{"same-origin form body", "POST", "/v1/locks/evil:3/acquire", "application/x-www-form-urlencoded", `{"owner":"x"}`,
			map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": "http://" + host}, 415},
		{"same-origin text body", "POST", "/v1/locks/evil:4/acquire", "text/plain", `{}`,
			map[string]string{"Sec-Fetch-Site": "same-origin"}, 415},
		{"browser empty body without a type", "POST", "/v1/locks/evil:5/acquire", "", "",
			map[string]string{"Sec-Fetch-Mode": "no-cors"}, 415},
		{"same-origin JSON", "POST", "/v1/locks/ok:1/acquire", "application/json", `{"owner":"page"}`,
			map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": "http://" + host}, 200},
		{"cross-site GET is a read", "GET", "/v1/locks/victim:browser", "", "",
			map[string]string{"Sec-Fetch-Site": "cross-site"}, 200},
		{"curl -d without browser headers", "POST", "/v1/locks/ok:2/acquire", "application/x-www-form-urlencoded", `{"owner":"curl"}`, nil, 200},
		{"curl with an empty body", "POST", "/v1/locks/ok:3/acquire", "", "", nil, 200},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, f.url+tc.path, strings.NewReader(tc.body))
			if tc.ct != "" {
				req.Header.Set("Content-Type", tc.ct)
			}
			for k, v := range tc.header {
				req.Header.Set(k, v)
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", res.StatusCode, tc.status, body)
			}
			if tc.status >= 400 {
				problemOf(t, res, body)
			}
		})
	}
	st, err := f.engine.State(ctx, lock.Lock("victim:browser"))
	if err != nil || st.Fence != victim.Fence || st.Owner != "real-holder" {
		t.Fatalf("the victim's lease after the attacks: %+v %v", st, err)
	}
	for _, k := range []lock.Resource{lock.Lock("evil:1"), lock.Lock("evil:2"), lock.Lock("evil:3"), lock.Lock("evil:4"), lock.Lock("evil:5"), lock.Semaphore("evil:1"), lock.Semaphore("evil:2")} {
		if _, err := f.engine.State(ctx, k); !errors.Is(err, lock.ErrNotFound) {
			t.Fatalf("%s was taken: %v", k, err)
		}
	}
	if st, err := f.engine.State(ctx, lock.Semaphore("victim:browser")); err != nil || st.Fence != victimSem.Fence {
		t.Fatalf("the victim's permit after the attacks: %+v %v", st, err)
	}
}

// F3: with CheckHost (auth off on loopback), only loopback and configured
// Host names are served: a DNS-rebinding page's own name is refused.
func TestHostCheck(t *testing.T) {
	f := newFixtureWith(t, redistest.Start(t), func(c *server.Config) {
		c.CheckHost = true
		c.AllowedHosts = []string{"lockd.internal"}
	})
	tests := []struct {
		host, path string
		status     int
	}{
		{"localhost:8080", "/v1/locks", 200},
		{"LOCALHOST", "/v1/locks", 200},
		{"127.0.0.1:1", "/v1/locks", 200},
		{"[::1]:8080", "/v1/locks", 200},
		{"lockd.internal:8080", "/v1/locks", 200},
		{"rebind.evil.example:8080", "/v1/locks", 403},
		{"rebind.evil.example", "/metrics", 403},
		{"localhost.evil.example", "/v1/locks/k/acquire", 403},
		{"10.0.0.1:8080", "/v1/locks", 403},
		{"rebind.evil.example", "/healthz", 200},
		{"rebind.evil.example", "/livez", 200},
	}
	for _, tc := range tests {
		t.Run(tc.host+tc.path, func(t *testing.T) {
			method := http.MethodGet
			if strings.HasSuffix(tc.path, "/acquire") {
				method = http.MethodPost
			}
			req, _ := http.NewRequest(method, f.url+tc.path, nil)
			req.Host = tc.host
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", res.StatusCode, tc.status, body)
			}
			if tc.status == 403 {
				if p := problemOf(t, res, body); p.Field == nil || *p.Field != "Host" {
					t.Fatalf("problem does not name Host: %s", body)
				}
			}
		})
	}
}

// F7, F18: a Redis that answers but cannot take writes (a read-only
// replica, out of memory with noeviction) gives 503 backend_unavailable on
// every granting operation, never 500, and /readyz says 503 until it can
// write again.
func TestRedisCannotWrite(t *testing.T) {
	tests := []struct {
		name         string
		break_, mend [][]any
	}{
		{"read-only replica",
			[][]any{{"replicaof", "127.0.0.1", "1"}},
			[][]any{{"replicaof", "no", "one"}}},
		{"out of memory",
			[][]any{{"config", "set", "maxmemory-policy", "noeviction"}, {"config", "set", "maxmemory", "1"}},
			[][]any{{"config", "set", "maxmemory", "0"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			ctx := context.Background()
			rdb := f.redis.Client(t)
			run := func(cmds [][]any) {
				t.Helper()
				for _, c := range cmds {
					if err := rdb.Do(ctx, c...).Err(); err != nil {
						t.Fatalf("%v: %v", c, err)
					}
				}
			}
			live := f.acquire(t, "cw:live", api.AcquireRequest{}) // scripts loaded, one lease
			if res, body, _ := do(http.MethodGet, f.url+"/readyz", "", ""); res.StatusCode != 200 {
				t.Fatalf("readyz before: %d %s", res.StatusCode, body)
			}
			run(tc.break_)
			for _, c := range []struct{ name, path, body string }{
				{"acquire", "/v1/locks/cw:new/acquire", `{}`},
				{"re-entry", "/v1/locks/cw:live/acquire", `{"token":"` + live.Token + `"}`},
				{"waiting acquire", "/v1/locks/cw:new2/acquire", `{"wait_ms":200}`},
				{"hold", "/v1/locks/cw:new3/hold", `{}`},
				{"readyz", "/readyz", ""},
			} {
				method := http.MethodPost
				if c.body == "" {
					method = http.MethodGet
				}
				res, body, err := do(method, f.url+c.path, "application/json", c.body)
				if err != nil {
					t.Fatal(err)
				}
				if res.StatusCode != 503 || res.Header.Get("Retry-After") == "" {
					t.Fatalf("%s: %d %s", c.name, res.StatusCode, body)
				}
				if p := problemOf(t, res, body); p.Code != "backend_unavailable" {
					t.Fatalf("%s: %s", c.name, body)
				}
			}
			run(tc.mend)
			if res, body, _ := do(http.MethodGet, f.url+"/readyz", "", ""); res.StatusCode != 200 {
				t.Fatalf("readyz after: %d %s", res.StatusCode, body)
			}
		})
	}
}

// F2: a listing cursor reveals nothing outside the caller's prefixes: it
// is opaque (encrypted), replicas on the same Redis accept each other's,
// and a forged one is refused.
func TestListCursorRevealsNothing(t *testing.T) {
	keys, err := auth.Parse([]byte(authYAML))
	if err != nil {
		t.Fatal(err)
	}
	rs := redistest.Start(t)
	withKeys := func(c *server.Config) { c.Keys = keys }
	a, b := newFixtureWith(t, rs, withKeys), newFixtureWith(t, rs, withKeys)
	ctx := context.Background()
	for i := range 30 {
		if _, err := a.engine.Acquire(ctx, lock.Lock(fmt.Sprintf("other:secret-%02d", i)), lock.AcquireRequest{Owner: "o", TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range []string{"deploy:a", "deploy:b", "deploy:c"} {
		if _, err := a.engine.Acquire(ctx, lock.Lock(k), lock.AcquireRequest{Owner: "o", TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	const deployer = "prefix-key-0123456789"
	seen := map[string]bool{}
	cursor, pages := "", 0
	for {
		// Alternate replicas: each takes the other's cursor.
		f := []*fixture{a, b}[pages%2]
		url := f.url + "/v1/locks?limit=1"
		if cursor != "" {
			url += "&cursor=" + cursor
		}
		status, body, _ := call(t, http.MethodGet, url, deployer, "")
		if status != 200 {
			t.Fatalf("page %d: %d %s", pages, status, body)
		}
		var page api.LockList
		if err := json.Unmarshal([]byte(body), &page); err != nil {
			t.Fatal(err)
		}
		for _, l := range page.Locks {
			if !strings.HasPrefix(l.Key, "deploy:") {
				t.Fatalf("a foreign row: %s", l.Key)
			}
			seen[l.Key] = true
		}
		if page.NextCursor == nil || *page.NextCursor == "" {
			break
		}
		cursor = *page.NextCursor
		raw, _ := base64.RawURLEncoding.DecodeString(cursor)
		if strings.Contains(cursor, "other") || bytes.Contains(raw, []byte("other:")) || bytes.Contains(raw, []byte("secret")) {
			t.Fatalf("the cursor shows a foreign key: %s", raw)
		}
		if pages++; pages > 100 {
			t.Fatal("no end of pages")
		}
	}
	if len(seen) != 3 {
		t.Fatalf("saw %v, want the 3 deploy: locks", seen)
	}

	forged := base64.RawURLEncoding.EncodeToString([]byte(`{"s":0,"p":["deploy:a","deploy:zz"]}`))
	if status, body, _ := call(t, http.MethodGet, a.url+"/v1/locks?cursor="+forged, deployer, ""); status != 400 || !strings.Contains(body, `"field":"cursor"`) {
		t.Fatalf("forged cursor: %d %s", status, body)
	}
}

// F12: unknown keys are limited per client address: after the burst, a
// request with an unknown key gets 429 with Retry-After. Valid keys are
// looked up first and served as usual (N2 of the second audit); requests
// without a key, and endpoints that need none, are not limited.
func TestAuthFailuresLimited(t *testing.T) {
	keys, err := auth.Parse([]byte(authYAML))
	if err != nil {
		t.Fatal(err)
	}
	f := newFixtureWith(t, redistest.Start(t), func(c *server.Config) {
		c.Keys = keys
		c.UnknownKeys = authlimit.New(3, time.Hour)
	})
	const good = "Bearer read-key-0123456789"
	tests := []struct {
		name, path, authorization string
		status                    int
	}{
		{"good key first", "/v1/locks", good, 200},
		{"guess 1", "/v1/locks", "Bearer guess-0000000000000001", 401},
		{"guess 2", "/v1/locks/k", "Bearer guess-0000000000000002", 401},
		{"guess 3", "/v1/locks", "Bearer guess-0000000000000003", 401},
		{"guess 4 limited", "/v1/locks", "Bearer guess-0000000000000004", 429},
		{"good key served while limited", "/v1/locks", good, 200},
		{"good key, another route", "/v1/locks/k", good, 404},
		{"lower-case bearer counts as unknown", "/v1/locks", "bearer read-key-0123456789", 429},
		{"another scheme counts as unknown", "/v1/locks", "Basic cmVhZDprZXk=", 429},
		{"no key: plain 401", "/v1/locks", "", 401},
		{"probe with a wrong key", "/healthz", "Bearer guess-0000000000000005", 200},
		{"liveness probe with a wrong key", "/livez", "Bearer guess-0000000000000007", 200},
		{"no such endpoint with a wrong key", "/v2/nothing", "Bearer guess-0000000000000006", 404},
		{"good key still served", "/v1/semaphores", good, 200},
	}
	for _, tc := range tests {
		req, err := http.NewRequest(http.MethodGet, f.url+tc.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if tc.authorization != "" {
			req.Header.Set("Authorization", tc.authorization)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != tc.status {
			t.Fatalf("%s: %d, want %d: %s", tc.name, res.StatusCode, tc.status, b)
		}
		if res.StatusCode == 429 {
			if ra, _ := strconv.Atoi(res.Header.Get("Retry-After")); ra < 3000 || !strings.Contains(string(b), "too_many_requests") {
				t.Fatalf("%s: Retry-After %q: %s", tc.name, res.Header.Get("Retry-After"), b)
			}
		}
	}
}

// stalledWriter is a client connection for a hold stream: once stall is
// closed, every write blocks until its deadline, as on a full socket of a
// client that does not read; once gone is closed, writes fail.
type stalledWriter struct {
	header      http.Header
	stall, gone chan struct{}
	mu          sync.Mutex
	deadline    time.Time
	written     strings.Builder
}

func newStalledWriter() *stalledWriter {
	return &stalledWriter{header: http.Header{}, stall: make(chan struct{}), gone: make(chan struct{})}
}

func (w *stalledWriter) Header() http.Header { return w.header }
func (w *stalledWriter) WriteHeader(int)     {}
func (w *stalledWriter) Flush()              {}

func (w *stalledWriter) SetWriteDeadline(t time.Time) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.deadline = t
	return nil
}

func (w *stalledWriter) Write(b []byte) (int, error) {
	select {
	case <-w.gone:
		return 0, io.ErrClosedPipe
	case <-w.stall:
		w.mu.Lock()
		d := w.deadline
		w.mu.Unlock()
		var timeout <-chan time.Time
		if !d.IsZero() {
			timeout = time.After(time.Until(d))
		}
		select {
		case <-timeout:
			return 0, os.ErrDeadlineExceeded
		case <-w.gone:
			return 0, io.ErrClosedPipe
		}
	default:
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.written.Write(b)
}

func (w *stalledWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.written.String()
}

// F10: a hold whose client does not read keeps its lease renewed: writes
// block, renewals do not. When the client is gone the lease is released,
// not left to expire.
func TestHoldSlowReaderKeepsLease(t *testing.T) {
	ld := lockdtest.Start(t, lockdtest.Options{})
	h := ld.Server.Handler(prometheus.NewRegistry(), nil)
	ctx := context.Background()
	w := newStalledWriter()
	req := httptest.NewRequest(http.MethodPost, "/v1/locks/slow:1/hold", strings.NewReader(`{"ttl_ms":900}`))
	req.Header.Set("Content-Type", "application/json")
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.ServeHTTP(w, req)
	}()
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(w.String(), "event: acquired"); {
		if time.Now().After(deadline) {
			t.Fatalf("no acquired event: %q", w.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	first, err := ld.Engine.State(ctx, lock.Lock("slow:1"))
	if err != nil {
		t.Fatal(err)
	}
	close(w.stall)
	// Three TTLs with every write blocked: renewals go on.
	for end := time.Now().Add(2700 * time.Millisecond); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		st, err := ld.Engine.State(ctx, lock.Lock("slow:1"))
		if err != nil || st.Fence != first.Fence {
			t.Fatalf("the lease of a slow reader: %+v %v", st, err)
		}
	}
	close(w.gone)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the hold did not end when its client went")
	}
	evs, err := ld.Engine.History(ctx, lock.Lock("slow:1"), 100)
	if err != nil || len(evs) == 0 || evs[0].Type != "released" {
		t.Fatalf("history: %+v %v", evs, err)
	}
	for _, e := range evs {
		if e.Type == "expired" {
			t.Fatalf("the lease expired while held: %+v", evs)
		}
	}
}

// Item 3: a hold stream sends a comment line at least every HoldHeartbeat,
// whatever the TTL.
func TestHoldHeartbeat(t *testing.T) {
	f := newFixtureWith(t, redistest.Start(t), func(c *server.Config) { c.HoldHeartbeat = 50 * time.Millisecond })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, f.url+"/v1/locks/beat:1/hold", strings.NewReader(`{"ttl_ms":60000}`))
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(res.Body)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	beats := 0
	for timeout := time.After(5 * time.Second); beats < 3; {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("stream ended")
			}
			if strings.HasPrefix(l, ":") {
				beats++
			}
		case <-timeout:
			t.Fatalf("%d heartbeats in 5 s", beats)
		}
	}
	if d := server.DefaultConfig().HoldHeartbeat; d <= 0 || d > 15*time.Second {
		t.Fatalf("default heartbeat %v, want at most 15 s", d)
	}
}

// F9: one API key cannot take every hold or waiting slot: each has its
// quota (max_holds, max_waiters in the auth file, or the server's default
// per key), answered 429 beyond; other keys are unaffected.
func TestQuotasPerAPIKey(t *testing.T) {
	keys, err := auth.Parse([]byte(`
keys:
  - {name: ci, key: "ci-key-0123456789abcdef", scopes: [write], max_holds: 1, max_waiters: 1}
  - {name: deploy, key: "deploy-key-0123456789", scopes: [write]}
`))
	if err != nil {
		t.Fatal(err)
	}
	f := newFixtureWith(t, redistest.Start(t), func(c *server.Config) {
		c.Keys = keys
		c.MaxHolds = 10
	})
	const ci, deploy = "ci-key-0123456789abcdef", "deploy-key-0123456789"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hold := func(key, lockKey string) *http.Response {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, f.url+"/v1/locks/"+lockKey+"/hold", strings.NewReader(`{}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+key)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { res.Body.Close() })
		return res
	}
	if res := hold(ci, "q:1"); res.StatusCode != 200 {
		t.Fatalf("first ci hold: %d", res.StatusCode)
	}
	if res := hold(ci, "q:2"); res.StatusCode != 429 || res.Header.Get("Retry-After") == "" {
		t.Fatalf("second ci hold: %d, want 429", res.StatusCode)
	}
	if res := hold(deploy, "q:3"); res.StatusCode != 200 {
		t.Fatalf("deploy hold while ci is at its quota: %d", res.StatusCode)
	}

	// Waiters: ci waits on a held key; its second wait is refused at once,
	// deploy's wait goes on.
	if _, err := f.engine.Acquire(context.Background(), lock.Lock("q:busy"), lock.AcquireRequest{Owner: "o", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	waiting := make(chan int, 1)
	go func() {
		status, _, _ := call(t, http.MethodPost, f.url+"/v1/locks/q:busy/acquire", ci, `{"wait_ms":5000}`)
		waiting <- status
	}()
	for deadline := time.Now().Add(5 * time.Second); f.engine.Waiters() < 1; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the first ci waiter never waited")
		}
	}
	status, body, h := call(t, http.MethodPost, f.url+"/v1/locks/q:busy/acquire", ci, `{"wait_ms":5000}`)
	if status != 429 || h.Get("Retry-After") == "" || !strings.Contains(body, "too_many_requests") {
		t.Fatalf("second ci waiter: %d %s", status, body)
	}
	if status, body, _ := call(t, http.MethodPost, f.url+"/v1/locks/q:busy/acquire", deploy, `{"wait_ms":100}`); status != 409 {
		t.Fatalf("deploy waiter: %d %s, want 409 after its wait", status, body)
	}
	if status, _, _ := call(t, http.MethodPost, f.url+"/v1/locks/q:busy/acquire", ci, `{}`); status != 409 {
		t.Fatalf("ci without waiting is not limited: %d", status)
	}
	if _, err := f.engine.ForceReleaseFence(context.Background(), lock.Lock("q:busy"), 0, "t", ""); err != nil {
		t.Fatal(err)
	}
	if s := <-waiting; s != 200 {
		t.Fatalf("the first ci waiter: %d", s)
	}
}

// N7 of the second audit: event streams have a per-API-key share like
// holds and waiters. One key limited to a prefix used to take every stream
// of the server, and the admin got 429. Now it gets its share (a tenth of
// MaxEventStreams by default, or max_event_streams from the auth file)
// and other keys still get theirs.
func TestEventStreamsPerAPIKey(t *testing.T) {
	keys, err := auth.Parse([]byte(`
keys:
  - {name: ops, key: ops-key-0123456789, scopes: [admin]}
  - {name: ci-reader, key: ci-key-0123456789ab, scopes: [read], prefixes: ["ci:"]}
  - {name: big, key: big-key-0123456789ab, scopes: [read], max_event_streams: 5}
`))
	if err != nil {
		t.Fatal(err)
	}
	ld := lockdtest.Start(t, lockdtest.Options{Configure: func(c *server.Config) {
		c.Keys = keys
		c.MaxEventStreams = 20
	}})
	open := func(key string, n int) (ok int, refused *http.Response) {
		t.Helper()
		for range n {
			resp, _ := openEvents(t, ld.URL+"/v1/events?prefix=ci:", key, "")
			if resp.StatusCode != http.StatusOK {
				return ok, resp
			}
			ok++
		}
		return ok, nil
	}
	// The prefix-limited reader tries to take every stream.
	ok, refused := open("ci-key-0123456789ab", 20)
	if ok != 2 || refused == nil || refused.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("ci-reader opened %d of 20 streams, want its share of 2, then 429", ok)
	}
	b, _ := io.ReadAll(refused.Body)
	if !strings.Contains(string(b), "ci-reader") || refused.Header.Get("Retry-After") == "" {
		t.Errorf("the 429 does not say whose quota: %s", b)
	}
	if ok, _ := open("big-key-0123456789ab", 6); ok != 5 {
		t.Errorf("big opened %d streams, want its max_event_streams of 5", ok)
	}
	if ok, _ := open("ops-key-0123456789", 1); ok != 1 {
		t.Error("the admin got no stream while another key is at its share")
	}
}

// N11 of the second audit: the default per-key share of holds leaves room
// for more than two tenants. With --max-holds 10 and the default share,
// each of three keys gets its tenth; before, two keys took every slot and
// the third got 429.
func TestDefaultShareOfHolds(t *testing.T) {
	keys, err := auth.Parse([]byte(`
keys:
  - {name: ci, key: "ci-key-0123456789abcdef", scopes: [write]}
  - {name: deploy, key: "deploy-key-0123456789", scopes: [write]}
  - {name: a1, key: "a1-key-0123456789abcdef", scopes: [write]}
`))
	if err != nil {
		t.Fatal(err)
	}
	f := newFixtureWith(t, redistest.Start(t), func(c *server.Config) {
		c.Keys = keys
		c.MaxHolds = 10
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	holds := func(key, prefix string, n int) (ok int) {
		t.Helper()
		for i := range n {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, fmt.Sprintf("%s/v1/locks/%s%d/hold", f.url, prefix, i), strings.NewReader(`{}`))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer "+key)
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { res.Body.Close() })
			if res.StatusCode == http.StatusOK {
				ok++
			}
		}
		return ok
	}
	ci, deploy := holds("ci-key-0123456789abcdef", "ci:h", 5), holds("deploy-key-0123456789", "deploy:h", 5)
	a1 := holds("a1-key-0123456789abcdef", "a:1h", 1)
	if ci != 1 || deploy != 1 || a1 != 1 {
		t.Fatalf("holds of ci, deploy, a1: %d, %d, %d; want each its share of 1 (a tenth of 10)", ci, deploy, a1)
	}
}
