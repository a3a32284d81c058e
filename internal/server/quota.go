package server

import (
	"context"
	"fmt"
	"net/http"
	"sync"
)

// Per-API-key quotas (F9 of the audit): the process-wide caps on hold
// streams and waiting requests are shared by every tenant, so one API key
// could take every slot and starve the others. Each key may use at most
// its own share: max_holds / max_waiters in the auth file, else
// Config.MaxHoldsPerAPIKey / MaxWaitersPerAPIKey. With auth off there are
// no tenants, and only the process-wide caps apply.

// quotaKind names what a quota counts.
type quotaKind int

const (
	quotaHolds quotaKind = iota
	quotaWaiters
)

// quotas counts the hold streams and waiting requests of each API key.
type quotas struct {
	mu   sync.Mutex
	used map[string]*[2]int // by API-key name
}

func newQuotas() *quotas { return &quotas{used: map[string]*[2]int{}} }

// take counts one more of kind for the caller of ctx, or answers 429 when
// its key already uses its limit. The returned func gives it back; it is
// never nil.
func (s *Server) take(ctx context.Context, kind quotaKind) (release func(), err error) {
	c := callerOf(ctx)
	if !s.cfg.Keys.Enabled() || c.key == nil {
		return func() {}, nil
	}
	limit, what := s.cfg.MaxWaitersPerAPIKey, "waiting requests"
	if c.key.MaxWaiters > 0 {
		limit = c.key.MaxWaiters
	}
	if kind == quotaHolds {
		limit, what = s.cfg.MaxHoldsPerAPIKey, "hold streams"
		if c.key.MaxHolds > 0 {
			limit = c.key.MaxHolds
		}
	}
	q := s.quotas
	q.mu.Lock()
	defer q.mu.Unlock()
	n := q.used[c.name]
	if n == nil {
		n = new([2]int)
		q.used[c.name] = n
	}
	if n[kind] >= limit {
		return func() {}, &problemError{status: http.StatusTooManyRequests, code: "too_many_requests",
			title:  "Quota of the API key reached",
			detail: fmt.Sprintf("API key %s already has %d %s open, its limit; retry later", c.name, n[kind], what)}
	}
	n[kind]++
	var once sync.Once
	return func() {
		once.Do(func() {
			q.mu.Lock()
			defer q.mu.Unlock()
			if n[kind]--; n[0] == 0 && n[1] == 0 {
				delete(q.used, c.name)
			}
		})
	}, nil
}
