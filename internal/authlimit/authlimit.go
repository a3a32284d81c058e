// Package authlimit limits, per client address, how many unknown API keys
// lockd answers: a token bucket per address that only unknown keys drain
// (F12 of the first audit). The API and the dashboard's sign-in share one
// Limiter, so that an address has one limit whichever door it knocks on.
//
// Only a request whose key is unknown takes a token. A valid key is looked
// up first and served as usual, whatever its address's bucket holds: an
// address is often shared (a NAT, a proxy, a Kubernetes node's IPv6 /64),
// and one client's wrong keys must not lock the others out (N2 of the
// second audit).
package authlimit

import (
	"math"
	"net"
	"net/http"
	"sync"
	"time"
)

// Defaults of lockd serve.
const (
	DefaultBurst  = 10
	DefaultRefill = time.Second
	// MaxAddrs bounds the limiter's memory whatever the number of
	// addresses that send unknown keys.
	MaxAddrs = 10_000
)

// Limiter is a token bucket per client address: Burst unknown keys in a
// row, then one more per Refill. Its methods are safe for concurrent use.
type Limiter struct {
	burst  float64
	refill time.Duration
	now    func() time.Time

	mu      sync.Mutex
	buckets map[string]bucket
}

type bucket struct {
	tokens float64
	at     time.Time
}

// New returns a limiter of burst unknown keys per address, then one per
// refill. burst < 1 or refill <= 0 mean the defaults.
func New(burst int, refill time.Duration) *Limiter {
	if burst < 1 {
		burst = DefaultBurst
	}
	if refill <= 0 {
		refill = DefaultRefill
	}
	return &Limiter{burst: float64(burst), refill: refill, now: time.Now, buckets: map[string]bucket{}}
}

// Take spends one of addr's tokens on an unknown key. ok is true when
// there was one: the caller answers the key as refused (401). Otherwise
// nothing is taken and retryAfter is when the next token comes: the caller
// answers 429. Checking and taking happen under one lock, so that requests
// arriving together cannot all see the last token (the first audit saw 17
// guesses pass a burst of 10).
func (l *Limiter) Take(addr string) (retryAfter time.Duration, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	b := l.level(addr, now)
	if b.tokens < 1 {
		// Not stored: a refused request changes nothing, and an address
		// that is already limited has its bucket in the map.
		return time.Duration((1 - b.tokens) * float64(l.refill)), false
	}
	b.tokens--
	if _, known := l.buckets[addr]; !known && len(l.buckets) >= MaxAddrs {
		l.evict(now)
	}
	l.buckets[addr] = b
	return 0, true
}

// level is the bucket of addr now, refilled for the time passed.
func (l *Limiter) level(addr string, now time.Time) bucket {
	b, ok := l.buckets[addr]
	if !ok {
		return bucket{tokens: l.burst, at: now}
	}
	b.tokens = math.Min(l.burst, b.tokens+float64(now.Sub(b.at))/float64(l.refill))
	b.at = now
	return b
}

// evict makes room for one more address: buckets that have refilled are
// forgotten (they hold no information); if none has, arbitrary ones go, so
// an attacker with more than MaxAddrs addresses gets fresh buckets. That
// is the price of a bounded memory.
func (l *Limiter) evict(now time.Time) {
	for a := range l.buckets {
		if l.level(a, now).tokens >= l.burst {
			delete(l.buckets, a)
		}
	}
	for a := range l.buckets {
		if len(l.buckets) < MaxAddrs {
			return
		}
		delete(l.buckets, a)
	}
}

// RetryAfter is d in whole seconds for a Retry-After header: at least 1.
func RetryAfter(d time.Duration) int {
	return max(1, int(math.Ceil(d.Seconds())))
}

// ClientAddr is what the limiter counts by: the client's IP address, or
// its /64 network for IPv6, where one host has as many addresses as it
// likes. Proxies' X-Forwarded-For is not trusted: behind a proxy, all
// clients share the proxy's address (and its limit on unknown keys).
func ClientAddr(r *http.Request) string {
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
