package server

import (
	"context"
	"sync"

	"github.com/lockd/lockd/internal/problem"
)

// Per-API-key quotas (F9, N7 of the audits): the process-wide caps on hold
// streams, waiting requests and event streams are shared by every tenant,
// so one API key could take every slot and starve the others. Each key may
// use at most its own share: max_holds / max_waiters / max_event_streams in
// the auth file, else Config.MaxHoldsPerAPIKey / MaxWaitersPerAPIKey /
// MaxEventStreamsPerAPIKey, by default DefaultShare of the process-wide
// cap. With auth off there are no tenants, and only the process-wide caps
// apply.

// DefaultShare is an API key's default quota of a process-wide cap: a
// tenth of it, at least 1 (N11 of the second audit: with half, two keys
// took every slot). It takes ten keys at their limit to fill the cap; a
// key that needs more gets its own limit in the auth file.
func DefaultShare(cap int) int { return max(1, cap/10) }

// quotaKind names what a quota counts.
type quotaKind int

const (
	quotaHolds quotaKind = iota
	quotaWaiters
	quotaEventStreams
	quotaKinds // how many kinds there are
)

// quotas counts the hold streams, waiting requests and event streams of
// each API key.
type quotas struct {
	mu   sync.Mutex
	used map[string]*[quotaKinds]int // by API-key name
}

func newQuotas() *quotas { return &quotas{used: map[string]*[quotaKinds]int{}} }

// limit is the caller's quota of kind, and what it counts.
func (s *Server) limit(c caller, kind quotaKind) (int, string) {
	own, limit, what := 0, 0, ""
	switch kind {
	case quotaHolds:
		own, limit, what = c.key.MaxHolds, s.cfg.MaxHoldsPerAPIKey, "hold streams"
	case quotaWaiters:
		own, limit, what = c.key.MaxWaiters, s.cfg.MaxWaitersPerAPIKey, "waiting requests"
	case quotaEventStreams:
		own, limit, what = c.key.MaxEventStreams, s.cfg.MaxEventStreamsPerAPIKey, "event streams"
	}
	if own > 0 {
		limit = own
	}
	return limit, what
}

// take counts one more of kind for the caller of ctx, or answers 429 when
// its key already uses its limit. The returned func gives it back; it is
// never nil.
func (s *Server) take(ctx context.Context, kind quotaKind) (release func(), err error) {
	c := callerOf(ctx)
	if !s.cfg.Keys.Enabled() || c.key == nil {
		return func() {}, nil
	}
	limit, what := s.limit(c, kind)
	q := s.quotas
	q.mu.Lock()
	defer q.mu.Unlock()
	n := q.used[c.name]
	if n == nil {
		n = new([quotaKinds]int)
		q.used[c.name] = n
	}
	if n[kind] >= limit {
		return func() {}, problem.Errorf(problem.ErrQuota, "API key %s already has %d %s open, its limit; retry later", c.name, n[kind], what)
	}
	n[kind]++
	var once sync.Once
	return func() {
		once.Do(func() {
			q.mu.Lock()
			defer q.mu.Unlock()
			if n[kind]--; *n == [quotaKinds]int{} {
				delete(q.used, c.name)
			}
		})
	}, nil
}
