package client_test

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/lockdtest"
	"github.com/lockd/lockd/internal/redistest"
)

// lockd is a real lockd server on a real Redis, for one test.
type lockd struct {
	URL   string
	redis *redistest.Server
}

func startLockd(t *testing.T) *lockd {
	t.Helper()
	ld := lockdtest.Start(t, lockdtest.Options{})
	return &lockd{URL: ld.URL, redis: ld.Redis}
}

// uniqueKey is a lock key of its own for each test.
func uniqueKey(t *testing.T) string {
	return "test:" + strings.NewReplacer("/", ".", " ", "_").Replace(t.Name())
}

// renewClock records when renew requests are sent.
type renewClock struct {
	mu    sync.Mutex
	times []time.Time
}

func (rc *renewClock) RoundTrip(r *http.Request) (*http.Response, error) {
	if strings.HasSuffix(r.URL.Path, "/renew") {
		rc.mu.Lock()
		rc.times = append(rc.times, time.Now())
		rc.mu.Unlock()
	}
	return http.DefaultTransport.RoundTrip(r)
}

// intervals are the gaps between recorded renewals, starting from start.
func (rc *renewClock) intervals(start time.Time) []time.Duration {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	var out []time.Duration
	prev := start
	for _, t := range rc.times {
		out = append(out, t.Sub(prev))
		prev = t
	}
	return out
}
