package webhook_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
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
	hooks := []webhook.Hook{{Name: "ops", URL: hs.URL, Secret: secret, Events: []string{"acquired", "force_released"}, Prefixes: []string{"wh:"}}}
	run(t, e, hooks, "a", fast)
	run(t, e, hooks, "b", fast)
	ctx := context.Background()
	groupReady(t, e) // a new group starts at the end of the stream
	for i := range 5 {
		key := "wh:" + strconv.Itoa(i)
		l, err := e.Acquire(ctx, key, lock.AcquireRequest{Owner: "w", TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.ForceReleaseFence(ctx, key, l.Fence, "ops", "test"); err != nil {
			t.Fatal(err)
		}
		if _, err := e.Acquire(ctx, "other:"+strconv.Itoa(i), lock.AcquireRequest{TTL: time.Minute}); err != nil {
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
	hooks := []webhook.Hook{{Name: "ops", URL: hs.URL, Secret: secret}}
	stop := run(t, e, hooks, "a", fast)
	ctx := context.Background()
	groupReady(t, e)
	if _, err := e.Acquire(ctx, "d:1", lock.AcquireRequest{TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	lockdtest.Eventually(t, func() bool { return rec.count() == 1 }, 10*time.Second, "the delivery after a timeout")
	stop()
	for i := range 3 {
		if _, err := e.Acquire(ctx, "d:after:"+strconv.Itoa(i), lock.AcquireRequest{TTL: time.Minute}); err != nil {
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
		if _, err := e.Acquire(ctx, "d:live:"+strconv.Itoa(i), lock.AcquireRequest{TTL: time.Minute}); err != nil {
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
	run(t, e, []webhook.Hook{{Name: "ops", URL: hs.URL, Secret: secret, Events: []string{"acquired"}, Prefixes: []string{"wh:"}}}, "a", fast)
	groupReady(t, e)
	ctx := context.Background()
	for _, key := range []string{lock.SemaphoreKey("wh:pool"), lock.SemaphoreKey("other:pool"), "wh:1", "other:1"} {
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
