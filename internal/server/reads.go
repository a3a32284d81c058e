package server

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/problem"
)

// Each API key's budget of event-stream reads (N26 of the third audit): a
// Last-Event-ID resume reads up to --events-resume-max events from the
// shared stream (21 XRANGE calls, about 36 ms of Redis, for 10,000),
// whatever the reader then keeps of them; eight resume loops of one key
// took a third of Redis's thread and made other tenants wait. A key's
// resumes may read at most its budget of events a minute: max_event_reads
// in the auth file, else Config.MaxEventReadsPerAPIKey. With auth off there
// are no tenants and resumes are not limited, like the other quotas.

// DefaultEventReads is an API key's default budget of events read by its
// resumes per minute: five resumes from the far end of the default window
// (10,000 events), about 0.2 s of Redis a minute, or any number of resumes
// after a blip or a rolling deploy, which read a few events each.
const DefaultEventReads = 50_000

// readBudget is a token bucket of events per API key: full at the key's
// budget, refilled at that many a minute. Its memory is one bucket per
// configured key that resumed.
type readBudget struct {
	mu      sync.Mutex
	now     func() time.Time
	buckets map[string]*readBucket // by API-key name
}

type readBucket struct {
	events float64 // may read this many now
	at     time.Time
	// owed is the reservation last refused: until the bucket holds that
	// much, a resume is refused before it costs Redis anything (a client
	// that retries before its Retry-After costs no XINFO).
	owed int
}

func newReadBudget() *readBudget {
	return &readBudget{now: time.Now, buckets: map[string]*readBucket{}}
}

// level is name's bucket now, refilled for the time passed.
func (b *readBudget) level(name string, perMinute int) *readBucket {
	now := b.now()
	k := b.buckets[name]
	if k == nil {
		k = &readBucket{events: float64(perMinute), at: now}
		b.buckets[name] = k
	}
	k.events = math.Min(float64(perMinute), k.events+now.Sub(k.at).Minutes()*float64(perMinute))
	k.at = now
	return k
}

// reserve takes n events of name's budget (at most a whole minute's, so
// that a budget smaller than one resume still lets one through a minute),
// answering how many it took; or, when the bucket holds fewer, takes
// nothing and answers how long until it holds enough.
func (b *readBudget) reserve(name string, perMinute, n int) (took int, wait time.Duration) {
	n = min(n, perMinute)
	b.mu.Lock()
	defer b.mu.Unlock()
	k := b.level(name, perMinute)
	if k.events < float64(n) {
		k.owed = n
		return 0, time.Duration((float64(n) - k.events) / float64(perMinute) * float64(time.Minute))
	}
	k.events -= float64(n)
	k.owed = 0
	return n, 0
}

// ready reports whether name's bucket holds what the last refused
// reservation asked (at least 1 event), or how long until it does.
func (b *readBudget) ready(name string, perMinute int) (time.Duration, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := b.level(name, perMinute)
	need := float64(max(1, k.owed))
	if k.events < need {
		return time.Duration((need - k.events) / float64(perMinute) * float64(time.Minute)), false
	}
	return 0, true
}

// refund gives back n events of a reservation that were not read; a
// negative n charges the events read beyond it (a reservation cut to a
// minute's budget), which the bucket owes until it refills.
func (b *readBudget) refund(name string, perMinute, n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := b.level(name, perMinute)
	k.events = math.Min(float64(perMinute), k.events+float64(n))
}

// readBudgetOf is the caller's budget of events a minute, and whether it
// has one (auth on, a valid key).
func (s *Server) readBudgetOf(c caller) (int, bool) {
	if !s.cfg.Keys.Enabled() || c.key == nil {
		return 0, false
	}
	if c.key.MaxEventReads > 0 {
		return c.key.MaxEventReads, true
	}
	return s.cfg.MaxEventReadsPerAPIKey, true
}

// checkResume answers 429 to a resume when the caller's budget is spent,
// or holds less than its last refused resume asked, before the resume
// costs Redis anything.
func (s *Server) checkResume(ctx context.Context) error {
	c := callerOf(ctx)
	perMinute, ok := s.readBudgetOf(c)
	if !ok {
		return nil
	}
	if wait, ok := s.reads.ready(c.name, perMinute); !ok {
		return s.resumeRefused(c, perMinute, 0, wait)
	}
	return nil
}

// chargeResume takes from the caller's budget what sub's catch-up may
// read, and gives back what it did not read once it is over; or answers
// 429 with the Retry-After of the budget's refill. Without auth, or for a
// subscription that reads nothing back, it does nothing.
func (s *Server) chargeResume(ctx context.Context, sub *lock.Subscription) error {
	c := callerOf(ctx)
	perMinute, ok := s.readBudgetOf(c)
	need := sub.MaxRead()
	if !ok || need == 0 {
		return nil
	}
	took, wait := s.reads.reserve(c.name, perMinute, need)
	if took == 0 {
		return s.resumeRefused(c, perMinute, need, wait)
	}
	sub.OnCatchUp(func(read int) { s.reads.refund(c.name, perMinute, took-read) })
	return nil
}

// resumeRefused is the 429 of a resume that may read need events (0:
// not known yet) beyond the caller's budget.
func (s *Server) resumeRefused(c caller, perMinute, need int, wait time.Duration) error {
	this := "its budget is spent"
	if need > 0 {
		this = fmt.Sprintf("this resume may read %d", min(need, perMinute))
	}
	return &problem.Error{Kind: problem.ErrQuota, RetryAfter: max(1, int(math.Ceil(wait.Seconds()))),
		Detail: fmt.Sprintf("API key %s may read %d events of the event stream a minute when resuming (Last-Event-ID), "+
			"and %s; retry in %s, or resume from a later event", c.name, perMinute, this, max(time.Second, wait.Round(time.Second)))}
}
