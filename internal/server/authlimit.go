package server

import (
	"math"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/go-chi/chi/v5/middleware"
	"github.com/rs/zerolog/hlog"
)

// dashboardSignIn is the dashboard's sign-in form (web.loginPath): a 401
// there is a refused key, as on the API.
const dashboardSignIn = "/ui/login"

// Defaults of the failed-authentication limit per client address.
const (
	defaultAuthFailBurst  = 10
	defaultAuthFailRefill = time.Second
	// maxAuthFailAddrs bounds the limiter's memory whatever the number of
	// addresses that try.
	maxAuthFailAddrs = 10_000
)

// authLimiter is a token bucket per client address that only failed
// authentications drain: Burst refused keys in a row, then one more per
// Refill. While an address's bucket is empty, every request from it that
// presents a key is answered 429 without looking at the key, so that
// guessing cannot go faster than the limit. Requests without credentials
// (probes, reads with auth off) are never limited.
type authLimiter struct {
	burst  float64
	refill time.Duration
	now    func() time.Time

	mu      sync.Mutex
	buckets map[string]authBucket
}

type authBucket struct {
	tokens float64
	at     time.Time
}

func newAuthLimiter(burst int, refill time.Duration) *authLimiter {
	return &authLimiter{burst: float64(burst), refill: refill, now: time.Now, buckets: map[string]authBucket{}}
}

// level is the bucket of addr now, refilled for the time passed.
func (l *authLimiter) level(addr string, now time.Time) authBucket {
	b, ok := l.buckets[addr]
	if !ok {
		return authBucket{tokens: l.burst, at: now}
	}
	b.tokens = math.Min(l.burst, b.tokens+float64(now.Sub(b.at))/float64(l.refill))
	b.at = now
	return b
}

// wait is how long addr must wait before it may present a key; 0 means now.
func (l *authLimiter) wait(addr string) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.level(addr, l.now())
	if b.tokens >= 1 {
		return 0
	}
	return time.Duration((1 - b.tokens) * float64(l.refill))
}

// fail takes one token from addr's bucket.
func (l *authLimiter) fail(addr string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	b := l.level(addr, now)
	b.tokens = math.Max(0, b.tokens-1)
	if _, ok := l.buckets[addr]; !ok && len(l.buckets) >= maxAuthFailAddrs {
		l.evict(now)
	}
	l.buckets[addr] = b
}

// evict makes room: buckets that have refilled are forgotten (they hold no
// information); if none has, an arbitrary one goes.
func (l *authLimiter) evict(now time.Time) {
	for a := range l.buckets {
		if l.level(a, now).tokens >= l.burst {
			delete(l.buckets, a)
		}
	}
	for a := range l.buckets {
		if len(l.buckets) < maxAuthFailAddrs {
			return
		}
		delete(l.buckets, a)
	}
}

// clientAddr is what the limiter counts by: the client's IP address, or
// its /64 network for IPv6, where one host has as many addresses as it
// likes. Proxies' X-Forwarded-For is not trusted: behind a proxy, all
// clients share the proxy's address.
func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	ip := net.ParseIP(host)
	if ip == nil || ip.To4() != nil {
		return host
	}
	return ip.Mask(net.CIDRMask(64, 128)).String() + "/64"
}

// presentsKey reports whether r offers a credential: an API key, or the
// dashboard's sign-in form.
func presentsKey(r *http.Request) bool {
	return r.Header.Get("Authorization") != "" || (r.Method == http.MethodPost && r.URL.Path == dashboardSignIn)
}

// limitAuthFailures applies authLimiter with auth on (F12 of the audit:
// unthrottled key guessing).
func (s *Server) limitAuthFailures(next http.Handler) http.Handler {
	if !s.cfg.Keys.Enabled() {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !presentsKey(r) || openPath(r.URL.Path) {
			next.ServeHTTP(w, r)
			return
		}
		addr := clientAddr(r)
		if d := s.authFails.wait(addr); d > 0 {
			secs := max(1, int(math.Ceil(d.Seconds())))
			hlog.FromRequest(r).Warn().Str("remote", addr).Msg("too many refused keys from this address")
			writeError(w, r, &problemError{status: http.StatusTooManyRequests, code: "too_many_requests",
				title: "Too many failed sign-ins", retryAfter: secs,
				detail: "too many unknown API keys from this address; retry in " + strconv.Itoa(secs) + " s"})
			return
		}
		ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
		next.ServeHTTP(ww, r)
		if ww.Status() == http.StatusUnauthorized {
			hlog.FromRequest(r).Info().Str("remote", addr).Msg("API key refused")
			s.authFails.fail(addr)
		}
	})
}
