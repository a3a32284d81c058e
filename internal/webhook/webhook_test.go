package webhook_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/lockdtest"
	"github.com/lockd/lockd/internal/redistest"
	"github.com/lockd/lockd/internal/webhook"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct{ name, yaml, err string }{
		{"ok", "webhooks:\n  - url: https://ops.example.com/hook\n    secret: 0123456789abcdef\n    events: [expired]\n    prefixes: [\"deploy:\"]\n", ""},
		{"empty", "", ""},
		{"not http", "webhooks:\n  - {url: 'ftp://x/y', secret: 0123456789abcdef}\n", "url must be"},
		{"short secret", "webhooks:\n  - {url: 'http://x/y', secret: short}\n", "secret must be at least 16"},
		{"bad event", "webhooks:\n  - {url: 'http://x/y', secret: 0123456789abcdef, events: [renewed]}\n", `"renewed" is not one of`},
		{"bad prefix", "webhooks:\n  - {url: 'http://x/y', secret: 0123456789abcdef, prefixes: ['a b']}\n", "not the start of a lock key"},
		{"unknown field", "webhooks:\n  - {url: 'http://x/y', secret: 0123456789abcdef, evnts: [expired]}\n", "evnts"},
		{"same name", "webhooks:\n  - {url: 'http://x/a', secret: 0123456789abcdef}\n  - {url: 'http://x/b', secret: 0123456789abcdef}\n", "two endpoints named"},
		// N9: a loopback, private or link-local address needs allow_private.
		{"loopback", "webhooks:\n  - {url: 'http://127.0.0.1:9000/h', secret: 0123456789abcdef}\n", "needs allow_private"},
		{"loopback allowed", "webhooks:\n  - {url: 'http://127.0.0.1:9000/h', secret: 0123456789abcdef, allow_private: true}\n", ""},
		{"localhost", "webhooks:\n  - {url: 'http://LocalHost.:9000/h', secret: 0123456789abcdef}\n", "needs allow_private"},
		{"a .localhost name", "webhooks:\n  - {url: 'http://app.localhost/h', secret: 0123456789abcdef}\n", "needs allow_private"},
		{"IPv6 loopback", "webhooks:\n  - {url: 'http://[::1]:9000/h', secret: 0123456789abcdef}\n", "needs allow_private"},
		{"IPv4-mapped loopback", "webhooks:\n  - {url: 'http://[::ffff:127.0.0.1]/h', secret: 0123456789abcdef}\n", "needs allow_private"},
		{"private", "webhooks:\n  - {url: 'https://10.1.2.3/h', secret: 0123456789abcdef}\n", "needs allow_private"},
		{"private 192.168", "webhooks:\n  - {url: 'https://192.168.1.10/h', secret: 0123456789abcdef}\n", "needs allow_private"},
		{"IPv6 unique local", "webhooks:\n  - {url: 'https://[fd00::1]/h', secret: 0123456789abcdef}\n", "needs allow_private"},
		{"metadata service", "webhooks:\n  - {url: 'http://169.254.169.254/latest', secret: 0123456789abcdef}\n", "needs allow_private"},
		{"this host", "webhooks:\n  - {url: 'http://0.0.0.0:9000/h', secret: 0123456789abcdef}\n", "needs allow_private"},
		{"shared space", "webhooks:\n  - {url: 'http://100.100.100.200/h', secret: 0123456789abcdef}\n", "needs allow_private"},
		{"public address", "webhooks:\n  - {url: 'https://203.0.113.7/h', secret: 0123456789abcdef}\n", ""},
		{"concurrency", "webhooks:\n  - {url: 'https://x/h', secret: 0123456789abcdef, concurrency: 1}\n", ""},
		{"concurrency too high", "webhooks:\n  - {url: 'https://x/h', secret: 0123456789abcdef, concurrency: 65}\n", "concurrency must be between 1 and 64"},
		{"concurrency negative", "webhooks:\n  - {url: 'https://x/h', secret: 0123456789abcdef, concurrency: -1}\n", "concurrency must be"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hooks, err := webhook.Parse([]byte(tc.yaml))
			if tc.err == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("%v, want an error with %q (hooks %v)", err, tc.err, hooks)
			}
			if strings.Contains(err.Error(), "0123456789abcdef") {
				t.Fatalf("the error shows the secret: %v", err)
			}
		})
	}
}

// verify checks a Lockd-Signature the way a receiver must: HMAC-SHA256 of
// "<t>.<body>" under the secret, compared in constant time, t recent.
func verify(secret, header string, body []byte) bool {
	var ts, sig string
	for _, part := range strings.Split(header, ",") {
		k, v, _ := strings.Cut(part, "=")
		switch k {
		case "t":
			ts = v
		case "v1":
			sig = v
		}
	}
	n, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || time.Since(time.Unix(n, 0)).Abs() > 5*time.Minute {
		return false
	}
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(ts + "." + string(body)))
	want := hex.EncodeToString(m.Sum(nil))
	return hmac.Equal([]byte(sig), []byte(want))
}

// receiver is a webhook endpoint that checks every signature, fails the
// first `fail` attempts of each event (500, or no answer in time when
// hang), and records every attempt.
type receiver struct {
	secret string
	fail   int
	hang   time.Duration

	mu        sync.Mutex
	attempts  map[string]int // event ID → attempts
	delivered map[string]int // event ID → 2xx answers
	events    map[string]map[string]any
	latency   []time.Duration // event's at → its 2xx
	badSig    int
}

func newReceiver(t *testing.T, secret string, fail int) (*receiver, *httptest.Server) {
	r := &receiver{secret: secret, fail: fail, attempts: map[string]int{}, delivered: map[string]int{}, events: map[string]map[string]any{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		id := req.Header.Get("Lockd-Event-Id")
		r.mu.Lock()
		if !verify(r.secret, req.Header.Get("Lockd-Signature"), body) {
			r.badSig++
			r.mu.Unlock()
			http.Error(w, "bad signature", http.StatusBadRequest)
			return
		}
		r.attempts[id]++
		n := r.attempts[id]
		r.mu.Unlock()
		if n <= r.fail {
			if r.hang > 0 {
				time.Sleep(r.hang)
			}
			http.Error(w, "not yet", http.StatusInternalServerError)
			return
		}
		var ev map[string]any
		_ = json.Unmarshal(body, &ev)
		at, _ := time.Parse(time.RFC3339Nano, ev["at"].(string))
		r.mu.Lock()
		r.delivered[id]++
		r.events[id] = ev
		r.latency = append(r.latency, time.Since(at))
		r.mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	return r, srv
}

func (r *receiver) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.delivered)
}

// run starts a dispatcher (a lockd replica) until stop or the test's end.
func run(t *testing.T, e *lock.Engine, hooks []webhook.Hook, consumer string, opts webhook.Options) (stop func()) {
	opts.Consumer = consumer
	d := webhook.New(e.EventClient(), e.EventStream(), hooks, opts, prometheus.NewRegistry())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); d.Run(ctx) }()
	stop = func() { cancel(); <-done }
	t.Cleanup(stop)
	return stop
}

// groupReady waits for the hook's consumer group.
func groupReady(t *testing.T, e *lock.Engine) {
	t.Helper()
	lockdtest.Eventually(t, func() bool {
		gs, err := e.EventClient().XInfoGroups(context.Background(), e.EventStream()).Result()
		return err == nil && len(gs) == 1
	}, 5*time.Second, "the consumer group")
}

var fast = webhook.Options{Timeout: 300 * time.Millisecond, BackoffMin: 500 * time.Millisecond, BackoffMax: 2 * time.Second, Poll: 50 * time.Millisecond}

// Two replicas share the deliveries: every event reaches the receiver
// signed, exactly once with a 2xx, after two failed attempts (500, then no
// answer within the timeout) retried with backoff; events of other types
// and keys are not sent.
func TestDeliveredOnceAcrossReplicasWithRetries(t *testing.T) {
	srv := redistest.Start(t)
	e := lock.New(srv.Client(t), lock.Options{})
	t.Cleanup(func() { _ = e.Close() })
	const secret = "s3cret-0123456789"
	rec, hs := newReceiver(t, secret, 2)
	hooks := []webhook.Hook{{Name: "ops", URL: hs.URL, Secret: secret, Events: []string{"acquired", "force_released"}, Prefixes: []string{"wh:"}, AllowPrivate: true}}
	run(t, e, hooks, "a", fast)
	run(t, e, hooks, "b", fast)
	ctx := context.Background()
	groupReady(t, e) // a new group starts at the end of the stream
	for i := range 5 {
		key := "wh:" + strconv.Itoa(i)
		l, err := e.Acquire(ctx, lock.Lock(key), lock.AcquireRequest{Owner: "w", TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.ForceReleaseFence(ctx, lock.Lock(key), l.Fence, "ops", "test"); err != nil {
			t.Fatal(err)
		}
		if _, err := e.Acquire(ctx, lock.Lock("other:"+strconv.Itoa(i)), lock.AcquireRequest{TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	lockdtest.Eventually(t, func() bool { return rec.count() == 10 }, 20*time.Second, "10 deliveries")
	time.Sleep(1500 * time.Millisecond) // room for a duplicate to show
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.badSig != 0 {
		t.Errorf("%d requests with a bad signature", rec.badSig)
	}
	for id, n := range rec.delivered {
		if n != 1 || rec.attempts[id] != 3 {
			t.Errorf("event %s: %d deliveries in %d attempts, want 1 in 3", id, n, rec.attempts[id])
		}
		ev := rec.events[id]
		if ev["id"] != id || !strings.HasPrefix(ev["key"].(string), "wh:") || (ev["type"] != "acquired" && ev["type"] != "force_released") {
			t.Errorf("event %s: %v", id, ev)
		}
		if _, ok := ev["token"]; ok {
			t.Errorf("event %s carries a token", id)
		}
	}
	slices.Sort(rec.latency)
	t.Logf("delivery after two failures: p50 %v, max %v", rec.latency[len(rec.latency)/2], rec.latency[len(rec.latency)-1])
}

// A delivery that gets no answer within the timeout is retried; events
// that happen while no replica runs are delivered when one starts again
// (the group's place is kept in Redis); a healthy endpoint gets each event
// within a poll.
func TestDurableAcrossRestartsAndTimeouts(t *testing.T) {
	srv := redistest.Start(t)
	e := lock.New(srv.Client(t), lock.Options{})
	t.Cleanup(func() { _ = e.Close() })
	const secret = "s3cret-0123456789"
	rec, hs := newReceiver(t, secret, 1)
	rec.hang = 400 * time.Millisecond // past the 300 ms timeout
	hooks := []webhook.Hook{{Name: "ops", URL: hs.URL, Secret: secret, AllowPrivate: true}}
	stop := run(t, e, hooks, "a", fast)
	ctx := context.Background()
	groupReady(t, e)
	if _, err := e.Acquire(ctx, lock.Lock("d:1"), lock.AcquireRequest{TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	lockdtest.Eventually(t, func() bool { return rec.count() == 1 }, 10*time.Second, "the delivery after a timeout")
	stop()
	for i := range 3 {
		if _, err := e.Acquire(ctx, lock.Lock("d:after:"+strconv.Itoa(i)), lock.AcquireRequest{TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	rec.mu.Lock()
	rec.fail = 0
	rec.mu.Unlock()
	run(t, e, hooks, "restarted", fast)
	lockdtest.Eventually(t, func() bool { return rec.count() == 4 }, 10*time.Second, "the events of the downtime")
	rec.mu.Lock()
	rec.latency = nil
	rec.mu.Unlock()
	for i := range 20 {
		if _, err := e.Acquire(ctx, lock.Lock("d:live:"+strconv.Itoa(i)), lock.AcquireRequest{TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	lockdtest.Eventually(t, func() bool { return rec.count() == 24 }, 10*time.Second, "20 live deliveries")
	rec.mu.Lock()
	defer rec.mu.Unlock()
	slices.Sort(rec.latency)
	t.Logf("delivery to a healthy endpoint: p50 %v, max %v", rec.latency[len(rec.latency)/2], rec.latency[len(rec.latency)-1])
}

func TestSign(t *testing.T) {
	body := []byte(`{"type":"expired"}`)
	at := time.Unix(1763812345, 0)
	got := webhook.Sign("secret-0123456789", at, body)
	m := hmac.New(sha256.New, []byte("secret-0123456789"))
	m.Write([]byte("1763812345." + string(body)))
	if want := "t=1763812345,v1=" + hex.EncodeToString(m.Sum(nil)); got != want {
		t.Fatalf("Sign = %s, want %s", got, want)
	}
}

// A semaphore's events are delivered by its name, with kind semaphore; a
// hook's prefixes apply to the name as to a lock's key.
func TestSemaphoreEventsByName(t *testing.T) {
	srv := redistest.Start(t)
	e := lock.New(srv.Client(t), lock.Options{})
	t.Cleanup(func() { _ = e.Close() })
	const secret = "s3cret-0123456789"
	rec, hs := newReceiver(t, secret, 0)
	run(t, e, []webhook.Hook{{Name: "ops", URL: hs.URL, Secret: secret, Events: []string{"acquired"}, Prefixes: []string{"wh:"}, AllowPrivate: true}}, "a", fast)
	groupReady(t, e)
	ctx := context.Background()
	for _, key := range []lock.Resource{lock.Semaphore("wh:pool"), lock.Semaphore("other:pool"), lock.Lock("wh:1"), lock.Lock("other:1")} {
		if _, err := e.Acquire(ctx, key, lock.AcquireRequest{Owner: "w", TTL: time.Minute, Limit: 2}); err != nil {
			t.Fatal(err)
		}
	}
	lockdtest.Eventually(t, func() bool { return rec.count() == 2 }, 10*time.Second, "2 deliveries")
	time.Sleep(300 * time.Millisecond) // room for an unwanted one to show
	rec.mu.Lock()
	defer rec.mu.Unlock()
	got := map[string]any{}
	for _, ev := range rec.events {
		got[ev["key"].(string)] = ev["kind"]
	}
	if len(got) != 2 || got["wh:pool"] != "semaphore" || got["wh:1"] != "lock" {
		t.Fatalf("delivered (key → kind) %v, want wh:pool → semaphore and wh:1 → lock", got)
	}
}

func TestPlaintext(t *testing.T) {
	for url, want := range map[string]bool{
		"https://ops.example.com/h":   false,
		"http://ops.example.com/h":    true,
		"HTTP://ops.example.com/h":    true,
		"http://203.0.113.7/h":        true,
		"http://10.0.0.5/h":           true, // private, but another host
		"http://127.0.0.1:9000/h":     false,
		"http://[::1]:9000/h":         false,
		"http://localhost:9000/h":     false,
		"http://[::ffff:127.0.0.1]/h": false,
	} {
		if got := (webhook.Hook{URL: url}).Plaintext(); got != want {
			t.Errorf("%s: Plaintext %v, want %v", url, got, want)
		}
	}
}

// errorLog collects what a dispatcher reports through OnError.
type errorLog struct {
	mu   sync.Mutex
	errs []error
}

func (l *errorLog) add(_ string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errs = append(l.errs, err)
}

func (l *errorLog) count(match func(error) bool) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, err := range l.errs {
		if match(err) {
			n++
		}
	}
	return n
}

// counter is an endpoint that counts the requests it gets and answers
// them with answer.
func counter(t *testing.T, answer func(w http.ResponseWriter, r *http.Request)) (*httptest.Server, func() int) {
	var mu sync.Mutex
	n := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		n++
		mu.Unlock()
		answer(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, func() int { mu.Lock(); defer mu.Unlock(); return n }
}

// N9 of the second audit: an endpoint's 307, 308 or 302 does not make
// lockd send the signed event to another address: a 3xx is a failed
// delivery, retried with backoff like any other. Before, the POST with its
// body and signature went to the Location (a 302 as a GET), and counted
// as delivered.
func TestRedirectsNotFollowed(t *testing.T) {
	srv := redistest.Start(t)
	e := lock.New(srv.Client(t), lock.Options{})
	t.Cleanup(func() { _ = e.Close() })
	internal, internalHits := counter(t, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	const secret = "s3cret-0123456789"
	var hooks []webhook.Hook
	var hits []func() int
	for _, status := range []int{http.StatusTemporaryRedirect, http.StatusPermanentRedirect, http.StatusFound} {
		hs, n := counter(t, func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, internal.URL+"/internal-admin", status)
		})
		hooks = append(hooks, webhook.Hook{Name: strconv.Itoa(status), URL: hs.URL, Secret: secret, AllowPrivate: true})
		hits = append(hits, n)
	}
	var log errorLog
	opts := fast
	opts.OnError = log.add
	reg := prometheus.NewRegistry()
	d := webhook.New(e.EventClient(), e.EventStream(), hooks, opts, reg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); d.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	lockdtest.Eventually(t, func() bool {
		gs, err := e.EventClient().XInfoGroups(context.Background(), e.EventStream()).Result()
		return err == nil && len(gs) == len(hooks)
	}, 5*time.Second, "the consumer groups")
	if _, err := e.Acquire(context.Background(), lock.Lock("wh:redirect"), lock.AcquireRequest{Owner: "w", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	// Each endpoint gets the event, then its retry after the backoff
	// (unless a redirect was followed).
	lockdtest.Eventually(t, func() bool {
		for _, n := range hits {
			if n() < 2 && internalHits() == 0 {
				return false
			}
		}
		return true
	}, 10*time.Second, "two attempts at each redirecting endpoint")
	if n := internalHits(); n != 0 {
		t.Fatalf("the address redirected to got %d requests, want none", n)
	}
	if n := log.count(func(err error) bool { return strings.Contains(err.Error(), "redirects are not followed") }); n < len(hooks) {
		t.Errorf("%d failures say the redirect was not followed, want at least %d", n, len(hooks))
	}
	metrics := gather(t, reg)
	for _, h := range hooks {
		if !strings.Contains(metrics, `lockd_webhook_deliveries_total{hook="`+h.Name+`",outcome="failed"}`) ||
			strings.Contains(metrics, `lockd_webhook_deliveries_total{hook="`+h.Name+`",outcome="delivered"}`) {
			t.Errorf("hook %s: metrics do not count a failed, undelivered event:\n%s", h.Name, metrics)
		}
	}
}

// N9: without allow_private, a delivery does not connect to a loopback,
// private or link-local address, checked when it dials (after DNS, so a
// public name cannot point at an internal service either); with it, it
// does. The hooks are built without Parse, which refuses such literal
// URLs at start: this is the check at delivery time.
func TestPrivateAddressRefusedWhenDialing(t *testing.T) {
	srv := redistest.Start(t)
	e := lock.New(srv.Client(t), lock.Options{})
	t.Cleanup(func() { _ = e.Close() })
	const secret = "s3cret-0123456789"
	refused, refusedHits := counter(t, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	allowed, allowedHits := counter(t, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	var log errorLog
	opts := fast
	opts.OnError = log.add
	d := webhook.New(e.EventClient(), e.EventStream(), []webhook.Hook{
		{Name: "internal", URL: refused.URL, Secret: secret},
		{Name: "allowed", URL: allowed.URL, Secret: secret, AllowPrivate: true},
	}, opts, prometheus.NewRegistry())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); d.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	lockdtest.Eventually(t, func() bool {
		gs, err := e.EventClient().XInfoGroups(context.Background(), e.EventStream()).Result()
		return err == nil && len(gs) == 2
	}, 5*time.Second, "the consumer groups")
	if _, err := e.Acquire(context.Background(), lock.Lock("wh:private"), lock.AcquireRequest{Owner: "w", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	lockdtest.Eventually(t, func() bool {
		return allowedHits() == 1 && (refusedHits() > 0 || log.count(func(err error) bool { return errors.Is(err, webhook.ErrPrivateAddress) }) >= 2)
	}, 10*time.Second, "the allowed delivery, and two refused attempts")
	if n := refusedHits(); n != 0 {
		t.Errorf("the endpoint without allow_private got %d requests", n)
	}
}

// N10 of the second audit: deliveries to one endpoint run concurrently,
// up to its concurrency (8 by default), so that a slow endpoint is not
// held to one event per round trip. The endpoint holds the first requests
// until 8 are in flight at once (which one at a time never reaches); no
// more than 8 ever are.
func TestConcurrentDeliveries(t *testing.T) {
	srv := redistest.Start(t)
	e := lock.New(srv.Client(t), lock.Options{})
	t.Cleanup(func() { _ = e.Close() })
	const secret = "s3cret-0123456789"
	var (
		mu               sync.Mutex
		inFlight, most   int
		delivered        = map[string]bool{}
		eight            = make(chan struct{})
		reachedEight     bool
		eightOnce        sync.Once
		waitedOutBarrier int
	)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		inFlight++
		most = max(most, inFlight)
		if inFlight == 8 {
			reachedEight = true
			eightOnce.Do(func() { close(eight) })
		}
		mu.Unlock()
		select {
		case <-eight:
		case <-time.After(3 * time.Second):
			mu.Lock()
			waitedOutBarrier++
			mu.Unlock()
		}
		mu.Lock()
		inFlight--
		delivered[r.Header.Get("Lockd-Event-Id")] = true
		mu.Unlock()
	}))
	t.Cleanup(hs.Close)
	opts := fast
	opts.Timeout = 5 * time.Second // longer than the barrier: no retry
	run(t, e, []webhook.Hook{{Name: "slow", URL: hs.URL, Secret: secret, AllowPrivate: true}}, "a", opts)
	groupReady(t, e)
	for i := range 40 {
		if _, err := e.Acquire(context.Background(), lock.Lock("wh:c:"+strconv.Itoa(i)), lock.AcquireRequest{Owner: "w", TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	lockdtest.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(delivered) == 40 || waitedOutBarrier > 0
	}, 20*time.Second, "40 deliveries")
	mu.Lock()
	defer mu.Unlock()
	if !reachedEight || most != 8 || waitedOutBarrier > 0 {
		t.Fatalf("at most %d deliveries in flight at once (%d waited 3 s for 8), want 8", most, waitedOutBarrier)
	}
}

func gather(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			b.WriteString(mf.GetName() + "{")
			for i, l := range m.GetLabel() {
				if i > 0 {
					b.WriteString(",")
				}
				b.WriteString(l.GetName() + `="` + l.GetValue() + `"`)
			}
			b.WriteString("}\n")
		}
	}
	return b.String()
}
