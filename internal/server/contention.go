package server

import (
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockd/lockd/api"
	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/problem"
)

// ContentionConfig bounds the key-prefix label of the contention metrics:
// a key never becomes a label (millions of series), its first segments do,
// and only so many of them.
type ContentionConfig struct {
	// PrefixDepth is how many ':'-separated segments of a key make its
	// label (default 1: "order:pay:12" is "order:").
	PrefixDepth int
	// MaxPrefixes is how many labels there may be (default 100); keys of
	// any further prefix are counted under "other". The labels of the
	// auth file's prefixes are kept whatever their number, and count.
	MaxPrefixes int
}

// otherPrefix labels the keys of prefixes beyond MaxPrefixes.
const otherPrefix = "other"

// contention are the per-prefix series: wait time, hold time and grants
// by outcome, and how late lapses were noticed.
type contention struct {
	labels      *prefixLabels
	wait        *prometheus.HistogramVec
	hold        *prometheus.HistogramVec
	grants      *prometheus.CounterVec
	expiryDelay prometheus.Histogram
	// heldSoFar is observed at each renewal: how long the lease has been
	// held until then. A lock held too long shows here while it is held,
	// not only once it ends.
	heldSoFar *prometheus.HistogramVec
}

// newContention registers the contention series on reg. tenants are the
// API keys' prefixes: their labels are taken first (prefixLabels.reserve).
func newContention(reg prometheus.Registerer, cfg ContentionConfig, tenants []string) *contention {
	if cfg.PrefixDepth <= 0 {
		cfg.PrefixDepth = 1
	}
	if cfg.MaxPrefixes <= 0 {
		cfg.MaxPrefixes = 100
	}
	labels := &prefixLabels{depth: cfg.PrefixDepth, max: cfg.MaxPrefixes, seen: map[string]bool{}}
	labels.reserve(tenants)
	c := &contention{
		labels: labels,
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "lockd_acquire_wait_seconds", Help: "Time acquires with wait_ms > 0 waited, by kind (lock, semaphore, election), key prefix and outcome.",
			Buckets: []float64{.001, .005, .025, .1, .25, 1, 2.5, 10, 30, 60},
		}, []string{"kind", "prefix", "outcome"}),
		hold: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "lockd_hold_seconds", Help: "How long leases were held, by kind, key prefix and how they ended (released, force_released, expired).",
			Buckets: []float64{.01, .1, .5, 1, 5, 30, 60, 300, 1800, 3600, 21600, 86400},
		}, []string{"kind", "prefix", "end"}),
		grants: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lockd_acquires_total", Help: "Acquires by kind (lock, semaphore, election), key prefix and outcome: granted, reentered, replayed, held, queued, lease_lost, limit_mismatch, unavailable, error.",
		}, []string{"kind", "prefix", "outcome"}),
		heldSoFar: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "lockd_held_at_renewal_seconds", Help: "How long leases had been held when they were renewed, by kind and key prefix: a lease renewed long after its grant is one held for that long now.",
			Buckets: []float64{1, 10, 60, 300, 1800, 3600, 21600, 86400},
		}, []string{"kind", "prefix"}),
		expiryDelay: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "lockd_expiry_notice_delay_seconds", Help: "How long after a lease lapsed this process's sweeper recorded it as expired.",
			Buckets: []float64{.01, .05, .1, .2, .3, .5, .75, 1, 2, 5},
		}),
	}
	if reg != nil {
		reg.MustRegister(c.wait, c.hold, c.grants, c.expiryDelay, c.heldSoFar)
	}
	return c
}

// acquired counts one acquire of res and, when it waited, its wait.
func (c *contention) acquired(res lock.Resource, o lock.Outcome, err error, waited time.Duration, wanted bool) {
	k, p := res.Kind.String(), c.labels.of(res)
	outcome := outcomeLabel(o, err)
	c.grants.WithLabelValues(k, p, outcome).Inc()
	if wanted {
		c.wait.WithLabelValues(k, p, outcome).Observe(waited.Seconds())
	}
}

// ended observes how long a lease of res was held.
func (c *contention) ended(res lock.Resource, end string, held time.Duration) {
	if held > 0 {
		c.hold.WithLabelValues(res.Kind.String(), c.labels.of(res), end).Observe(held.Seconds())
	}
}

// renewed observes how long a lease of res has been held at a renewal.
func (c *contention) renewed(res lock.Resource, acquiredAt time.Time) {
	if !acquiredAt.IsZero() {
		c.heldSoFar.WithLabelValues(res.Kind.String(), c.labels.of(res)).Observe(max(0, time.Since(acquiredAt)).Seconds())
	}
}

// lapsed is the engine's LapseFunc.
func (c *contention) lapsed(res lock.Resource, lapsed, noticed time.Time, held time.Duration) {
	c.expiryDelay.Observe(max(0, noticed.Sub(lapsed)).Seconds())
	c.ended(res, "expired", held)
}

// outcomeLabel is an acquire's outcome, from a fixed set, named after the
// problem the client was answered (problem.Of): held means no lease or
// permit was free (lock_held, no_permits), unavailable that Redis could
// not grant (backend_unavailable, backend_recovering).
func outcomeLabel(o lock.Outcome, err error) string {
	if err == nil {
		return string(o)
	}
	switch problem.Of(err, lock.Resource{}).Code {
	case api.ProblemCodeLockHeld, api.ProblemCodeNoPermits:
		return "held"
	case api.ProblemCodeQueued:
		return "queued"
	case api.ProblemCodeLeaseLost:
		return "lease_lost"
	case api.ProblemCodeLimitMismatch:
		return "limit_mismatch"
	case api.ProblemCodeBackendUnavailable, api.ProblemCodeBackendRecovering:
		return "unavailable"
	default:
		return "error"
	}
}

// prefixLabels hands out the prefix label of a resource: its name's first
// depth segments, while fewer than max labels exist; "other" after. The
// kind is a label of its own: the semaphore "render:pool" and the lock
// "render:x" share the prefix "render:" and one place in the bound.
type prefixLabels struct {
	depth, max int
	mu         sync.Mutex
	seen       map[string]bool
}

// reserve takes the labels of the API keys' prefixes before any key is
// seen, for their locks and their semaphores. Labels are otherwise
// first-come: whoever may make up new first segments (auth off, a key
// without prefixes) could take every label and leave a tenant's keys
// counted as "other", blinding its alerts until a restart. A prefix with
// fewer segments than depth ("pay" or "pay:" at depth 2) does not say its
// keys' labels, and reserves none.
func (p *prefixLabels) reserve(prefixes []string) {
	for _, pre := range prefixes {
		if strings.Count(pre, ":") < p.depth {
			continue
		}
		p.seen[keyPrefixOf(pre, p.depth)] = true
	}
}

func (p *prefixLabels) of(res lock.Resource) string {
	pre := keyPrefixOf(res.Name, p.depth)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.seen[pre] {
		return pre
	}
	if len(p.seen) < p.max {
		p.seen[pre] = true
		return pre
	}
	return otherPrefix
}

// keyPrefixOf is key's first depth ':'-separated segments, with the ':'
// that follows them ("order:pay:1", 1 → "order:"); a key with no more
// segments than that is its own prefix.
func keyPrefixOf(key string, depth int) string {
	i := 0
	for range depth {
		j := strings.IndexByte(key[i:], ':')
		if j < 0 {
			return key
		}
		i += j + 1
	}
	return key[:i]
}
