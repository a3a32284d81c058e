package server

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/problem"
)

// Quotas of what an API key keeps in Redis (N22 of the third audit): live
// grants, the bytes of their values, and sessions. One prefix-limited key
// filled a shared 40 MB Redis with 7,223 shared holds carrying 4 KiB
// values, and every other tenant got 503 for as long as they lived.
//
// Counting them in Redis would cost a round trip per acquire (a tenant
// counter and the lock key are in different slots on Redis Cluster, so
// the acquire script cannot keep it). Instead each lockd process keeps,
// per API key, a book of what it granted or last renewed: the lease token
// with its expiry and value size, the session id with its expiry. Grants,
// renewals and releases pass through it, and entries are dropped at the
// expiry they were last given, so the book costs no Redis work. Every live
// lease is in the book of the process that last granted or renewed it,
// with its true expiry; each book is held to the key's quota (a renewal
// of a lease a process does not know is booked there, and refused when
// there is no room), so with N replicas a key keeps at most N times its
// quota. A release through another replica, or a force-release, frees the
// quota at the lease's expiry at worst.
//
// A request over a quota is answered 429 before any Redis write. Waiting
// acquires count while they wait, as grants to be. With auth off there are
// no tenants and no books, like the other quotas.

// Defaults of lockd serve: the budgets of one process, of which each API
// key may use DefaultShare (a tenth). Ten keys at their quota keep about
// 150 MB in Redis (5.5 KB per grant with a 4 KiB value, about 0.5 KB
// without), within the shipped manifest's maxmemory of 256 MB.
const (
	DefaultMaxGrants     = 100_000
	DefaultMaxValueBytes = 80 << 20
	DefaultMaxSessions   = 10_000
)

// books are the books of every API key, and their totals (the process's
// budgets).
type books struct {
	mu    sync.Mutex
	now   func() time.Time
	byKey map[string]*book
	total usage
	// pruned is when every book was last pruned (the totals' budget).
	pruned time.Time
}

// usage is what a book (or all of them) counts: live and asked-for
// grants, their value bytes, and sessions.
type usage struct{ grants, bytes, sessions int }

func (u *usage) add(v usage) {
	u.grants += v.grants
	u.bytes += v.bytes
	u.sessions += v.sessions
}

// book is one API key's.
type book struct {
	used     usage
	pruned   time.Time               // when expired entries were last dropped
	leases   map[string]bookLease    // by lease token: grants outside a session
	sessions map[string]*bookSession // by session id
	// idem are the lease tokens of grants made with an Idempotency-Key,
	// by that key: a retry of one is a replay, not a new grant.
	idem map[string]string
}

type bookLease struct {
	expires time.Time
	bytes   int
	res     lock.Resource
	idem    string // its Idempotency-Key, if any
	// keys is how many grants it stands for: a lock set's keys (one
	// token for all); 0 for one.
	keys int
}

// grants is how many grants g counts for.
func (g bookLease) grants() int { return max(1, g.keys) }

// bookSession is a session and the grants in it (by lease token, or by
// resource for grants known only from a renewal's answer): they live as
// long as the session.
type bookSession struct {
	expires time.Time
	grants  map[string]bookLease
}

func newBooks() *books { return &books{now: time.Now, byKey: map[string]*book{}} }

// quotaLimits are a caller's quotas and the process's budgets.
type quotaLimits struct{ key, all usage }

// quotaLimits is what caller c may keep; ok is false when no quota applies
// (auth off, or no valid key).
func (s *Server) quotaLimits(c caller) (quotaLimits, bool) {
	if !s.cfg.Keys.Enabled() || c.key == nil {
		return quotaLimits{}, false
	}
	l := quotaLimits{
		key: usage{grants: s.cfg.MaxGrantsPerAPIKey, bytes: s.cfg.MaxValueBytesPerAPIKey, sessions: s.cfg.MaxSessionsPerAPIKey},
		all: usage{grants: s.cfg.MaxGrants, bytes: s.cfg.MaxValueBytes, sessions: s.cfg.MaxSessions},
	}
	if c.key.MaxGrants > 0 {
		l.key.grants = c.key.MaxGrants
	}
	if c.key.MaxValueBytes > 0 {
		l.key.bytes = c.key.MaxValueBytes
	}
	if c.key.MaxSessions > 0 {
		l.key.sessions = c.key.MaxSessions
	}
	return l, true
}

// bookOf is name's book, made on first use; b.mu is held.
func (b *books) bookOf(name string) *book {
	k := b.byKey[name]
	if k == nil {
		k = &book{leases: map[string]bookLease{}, sessions: map[string]*bookSession{}, idem: map[string]string{}}
		b.byKey[name] = k
	}
	return k
}

// change adds d to name's usage and the totals; b.mu is held.
func (b *books) change(k *book, d usage) {
	k.used.add(d)
	b.total.add(d)
}

// pruneEvery is how often a full book (or the totals at their budget)
// is pruned at most: a key refused at its quota, and asking again and
// again, walks its book ten times a second, not at each request.
const pruneEvery = 100 * time.Millisecond

// prune drops what has expired from k; b.mu is held.
func (b *books) prune(k *book) {
	now := b.now()
	if now.Sub(k.pruned) < pruneEvery {
		return
	}
	k.pruned = now
	for t, l := range k.leases {
		if !l.expires.After(now) {
			delete(k.leases, t)
			delete(k.idem, l.idem)
			b.change(k, usage{grants: -l.grants(), bytes: -l.bytes})
		}
	}
	for id, s := range k.sessions {
		if !s.expires.After(now) {
			b.dropSession(k, id)
		}
	}
}

func (b *books) dropSession(k *book, id string) {
	s := k.sessions[id]
	if s == nil {
		return
	}
	d := usage{sessions: -1}
	for _, g := range s.grants {
		d.grants--
		d.bytes -= g.bytes
		delete(k.idem, g.idem)
	}
	delete(k.sessions, id)
	b.change(k, d)
}

// room reserves want in name's book, or answers 429 naming the quota it
// would exceed. It prunes expired entries before refusing.
func (b *books) room(name string, lim quotaLimits, want usage) error {
	k := b.bookOf(name)
	if over(k.used, want, lim.key) != "" {
		b.prune(k)
	}
	if over(b.total, want, lim.all) != "" && b.now().Sub(b.pruned) >= pruneEvery {
		b.pruned = b.now()
		for _, o := range b.byKey {
			b.prune(o)
		}
	}
	if what := over(k.used, want, lim.key); what != "" {
		return problem.Errorf(problem.ErrQuota, "API key %s keeps %s on this server, its quota; release some, or retry when they expire", name, what)
	}
	if what := over(b.total, want, lim.all); what != "" {
		return problem.Errorf(problem.ErrQuota, "this server's API keys keep %s, its budget; retry when some are released or expire", what)
	}
	b.change(k, want)
	return nil
}

// over names what of used + want exceeds limit, or is "".
func over(used, want, limit usage) string {
	switch {
	case want.grants > 0 && used.grants+want.grants > limit.grants:
		return plural(used.grants, "live grant") + " of at most " + itoa(limit.grants)
	case want.bytes > 0 && used.bytes+want.bytes > limit.bytes:
		return itoa(used.bytes) + " bytes of values of at most " + itoa(limit.bytes) + " (this one has " + itoa(want.bytes) + ")"
	case want.sessions > 0 && used.sessions+want.sessions > limit.sessions:
		return plural(used.sessions, "session") + " of at most " + itoa(limit.sessions)
	}
	return ""
}

// reserveQuota reserves want for the caller of ctx; settle (never nil) is then
// called once, under the books' lock, with the reservation already given
// back, to book what the request turned out to do.
func (s *Server) reserveQuota(ctx context.Context, want usage) (settle func(func(b *books, k *book)), err error) {
	c := callerOf(ctx)
	lim, ok := s.quotaLimits(c)
	if !ok {
		return func(func(*books, *book)) {}, nil
	}
	b := s.books
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.room(c.name, lim, want); err != nil {
		return nil, err
	}
	var once sync.Once
	return func(f func(b *books, k *book)) {
		once.Do(func() {
			b.mu.Lock()
			defer b.mu.Unlock()
			k := b.bookOf(c.name)
			b.change(k, usage{grants: -want.grants, bytes: -want.bytes, sessions: -want.sessions})
			if f != nil {
				f(b, k)
			}
		})
	}, nil
}

// bookAcquire reserves what an acquire may add: a grant and its value for
// a new grant; for a re-entry (it may replace the value) the value, and a
// grant if this process does not know the lease.
func (s *Server) bookAcquire(ctx context.Context, req lock.AcquireRequest) (func(lock.Lease, error), error) {
	want := usage{grants: 1, bytes: len(req.Value)}
	switch {
	case req.Token != "":
		want = s.renewalNeeds(ctx, req.Token, req.Value)
	case req.IdempotencyKey != "" && s.knowsRetry(ctx, req.IdempotencyKey):
		// A retry of a grant this process booked: its replay (or a 409
		// mismatch) adds nothing, and must not be refused at the quota.
		want = usage{}
	}
	settle, err := s.reserveQuota(ctx, want)
	if err != nil {
		return nil, err
	}
	return func(l lock.Lease, err error) {
		settle(func(b *books, k *book) {
			switch {
			case err == nil && l.Outcome == lock.Granted:
				b.addGrant(k, req.Session, l, len(req.Value), req.IdempotencyKey)
			case err == nil && l.Outcome == lock.Reentered:
				b.renewed(k, l, req.Value)
			case errors.Is(err, lock.ErrLeaseLost) && req.Token != "":
				b.dropLease(k, req.Token)
			}
		})
	}, nil
}

// knowsRetry reports whether the caller's book has a live grant made with
// Idempotency-Key idem.
func (s *Server) knowsRetry(ctx context.Context, idem string) bool {
	known := false
	s.withBook(ctx, func(b *books, k *book) {
		if t, ok := k.idem[idem]; ok {
			if _, _, known = k.find(t); !known {
				delete(k.idem, idem)
			}
		}
	})
	return known
}

// renewalNeeds is what renewing (or re-entering) the lease with token,
// with value ("" keeps it), may add to the caller's book: nothing but the
// value's growth for a lease it knows; a grant and the value for one it
// does not (granted or last renewed through another replica).
func (s *Server) renewalNeeds(ctx context.Context, token, value string) usage {
	c := callerOf(ctx)
	if _, ok := s.quotaLimits(c); !ok {
		return usage{}
	}
	b := s.books
	b.mu.Lock()
	defer b.mu.Unlock()
	k := b.bookOf(c.name)
	if g, _, ok := k.find(token); ok {
		if value == "" {
			return usage{}
		}
		return usage{bytes: max(0, len(value)-g.bytes)}
	}
	return usage{grants: 1, bytes: len(value)}
}

// bookRenew reserves what a renewal may add, and books its answer.
func (s *Server) bookRenew(ctx context.Context, token, value string) (func(lock.Lease, error), error) {
	settle, err := s.reserveQuota(ctx, s.renewalNeeds(ctx, token, value))
	if err != nil {
		return nil, err
	}
	return func(l lock.Lease, err error) {
		settle(func(b *books, k *book) {
			switch {
			case err == nil:
				b.renewed(k, l, value)
			case errors.Is(err, lock.ErrLeaseLost), errors.Is(err, lock.ErrNotFound):
				b.dropLease(k, token)
			}
		})
	}, nil
}

// bookRelease drops a released lease from the caller's book.
func (s *Server) bookRelease(ctx context.Context, token string, rel lock.Released, err error) {
	if err != nil && !errors.Is(err, lock.ErrLeaseLost) && !errors.Is(err, lock.ErrNotFound) {
		return
	}
	if err == nil && !rel.Released {
		return // one re-entry level given back: still live
	}
	s.withBook(ctx, func(b *books, k *book) { b.dropLease(k, token) })
}

// withBook runs f on the caller's book, when quotas apply.
func (s *Server) withBook(ctx context.Context, f func(b *books, k *book)) {
	c := callerOf(ctx)
	if _, ok := s.quotaLimits(c); !ok {
		return
	}
	s.books.mu.Lock()
	defer s.books.mu.Unlock()
	f(s.books, s.books.bookOf(c.name))
}

// inSession reports whether the lock set with token is booked in a
// session, key by key (quotaEngine.AcquireSet).
func (k *book) inSession(token string) bool {
	for _, s := range k.sessions {
		for t := range s.grants {
			if strings.HasPrefix(t, token+"@") {
				return true
			}
		}
	}
	return false
}

// find is the grant with token, and its session ("" for none).
func (k *book) find(token string) (bookLease, string, bool) {
	if g, ok := k.leases[token]; ok {
		return g, "", true
	}
	for id, s := range k.sessions {
		if g, ok := s.grants[token]; ok {
			return g, id, true
		}
	}
	return bookLease{}, "", false
}

// addGrant books a new grant: in its session when this process knows the
// session, else on its own until its expiry.
func (b *books) addGrant(k *book, session string, l lock.Lease, bytes int, idem string) {
	g := bookLease{expires: l.ExpiresAt, bytes: bytes, res: l.Resource, idem: idem}
	if idem != "" {
		k.idem[idem] = l.Token
	}
	if s := k.sessions[session]; session != "" && s != nil {
		s.grants[l.Token] = g
	} else {
		k.leases[l.Token] = g
	}
	b.change(k, usage{grants: 1, bytes: bytes})
}

// renewed books a renewal (or re-entry) of l: its new expiry and, when
// value is set, its new value size; a lease this process did not know is
// booked with the value size it learns (0 when the renewal keeps it).
func (b *books) renewed(k *book, l lock.Lease, value string) {
	g, session, ok := k.find(l.Token)
	if !ok {
		k.leases[l.Token] = bookLease{expires: l.ExpiresAt, bytes: len(value), res: l.Resource}
		b.change(k, usage{grants: 1, bytes: len(value)})
		return
	}
	d := 0
	if value != "" {
		d = len(value) - g.bytes
		g.bytes = len(value)
	}
	if session != "" {
		k.sessions[session].grants[l.Token] = g
	} else {
		g.expires = l.ExpiresAt
		k.leases[l.Token] = g
	}
	b.change(k, usage{bytes: d})
}

// dropLease forgets the lease with token.
func (b *books) dropLease(k *book, token string) {
	g, session, ok := k.find(token)
	if !ok {
		return
	}
	if session != "" {
		delete(k.sessions[session].grants, token)
	} else {
		delete(k.leases, token)
	}
	delete(k.idem, g.idem)
	b.change(k, usage{grants: -g.grants(), bytes: -g.bytes})
}

// sessionRenewed books a session's expiry and the grants its answer lists:
// those the book has under it that the answer no longer lists are gone
// (released); those it lists that the book lacks (granted through another
// replica) are booked by resource, with no value size known.
func (b *books) sessionRenewed(k *book, sess lock.Session) {
	s := k.sessions[sess.ID]
	if s == nil {
		s = &bookSession{grants: map[string]bookLease{}}
		k.sessions[sess.ID] = s
		b.change(k, usage{sessions: 1})
	}
	s.expires = sess.ExpiresAt
	listed := map[lock.Resource]bool{}
	for _, r := range sess.Holds {
		listed[r] = true
	}
	d := usage{}
	for t, g := range s.grants {
		if !listed[g.res] {
			delete(s.grants, t)
			delete(k.idem, g.idem)
			d.grants--
			d.bytes -= g.bytes
		} else {
			delete(listed, g.res)
		}
	}
	for r := range listed {
		s.grants["res:"+r.Kind.String()+":"+r.Name] = bookLease{res: r}
		d.grants++
	}
	b.change(k, d)
}

// sessionNeeds is what renewing the session id may add to the caller's
// book: nothing when this process knows it; else the session and the
// grants it holds, which it reads (one read, only the first time this
// process renews a session made through another replica).
func (s *Server) sessionNeeds(ctx context.Context, inner Engine, scope, id string) (usage, error) {
	c := callerOf(ctx)
	if _, ok := s.quotaLimits(c); !ok {
		return usage{}, nil
	}
	s.books.mu.Lock()
	_, known := s.books.bookOf(c.name).sessions[id]
	s.books.mu.Unlock()
	if known {
		return usage{}, nil
	}
	sess, err := inner.GetSession(ctx, scope, id)
	if err != nil {
		return usage{}, err
	}
	return usage{sessions: 1, grants: len(sess.Holds)}, nil
}

func itoa(n int) string { return strconv.Itoa(n) }

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return itoa(n) + " " + what + "s"
}

// quotaEngine books, around the engine, what each API key keeps: every
// grant, renewal, release and session of the server goes through it, hold
// streams' renewals included.
type quotaEngine struct {
	Engine
	s *Server
}

func (e quotaEngine) Acquire(ctx context.Context, res lock.Resource, req lock.AcquireRequest) (lock.Lease, error) {
	settle, err := e.s.bookAcquire(ctx, req)
	if err != nil {
		return lock.Lease{}, err
	}
	l, err := e.Engine.Acquire(ctx, res, req)
	settle(l, err)
	return l, err
}

func (e quotaEngine) Renew(ctx context.Context, res lock.Resource, req lock.RenewRequest) (lock.Lease, error) {
	settle, err := e.s.bookRenew(ctx, req.Token, req.Value)
	if err != nil {
		return lock.Lease{}, err
	}
	l, err := e.Engine.Renew(ctx, res, req)
	settle(l, err)
	return l, err
}

func (e quotaEngine) Release(ctx context.Context, res lock.Resource, token, actor string) (lock.Released, error) {
	rel, err := e.Engine.Release(ctx, res, token, actor)
	e.s.bookRelease(ctx, token, rel, err)
	return rel, err
}

// AcquireSet books a lock set as one entry under its token that counts
// its keys' grants and values.
func (e quotaEngine) AcquireSet(ctx context.Context, req lock.SetRequest) (lock.SetLease, error) {
	n := len(req.Keys)
	want := usage{grants: n, bytes: n * len(req.Value)}
	settle, err := e.s.reserveQuota(ctx, want)
	if err != nil {
		return lock.SetLease{}, err
	}
	set, err := e.Engine.AcquireSet(ctx, req)
	settle(func(b *books, k *book) {
		if err != nil {
			return
		}
		if sess := k.sessions[req.Session]; req.Session != "" && sess != nil {
			// In the session, key by key, as its renewals list them.
			for _, l := range set.Leases {
				sess.grants[set.Token+"@"+l.Key] = bookLease{bytes: len(req.Value), res: lock.Lock(l.Key)}
			}
		} else {
			k.leases[set.Token] = bookLease{expires: set.ExpiresAt, bytes: want.bytes, keys: n}
		}
		b.change(k, want)
	})
	return set, err
}

// RenewSet books a set's renewal: its new expiry, or the set itself when
// this process did not know it (granted through another replica).
func (e quotaEngine) RenewSet(ctx context.Context, token string, ttl time.Duration, actor string) (lock.SetLease, error) {
	need := e.s.renewalNeeds(ctx, token, "")
	e.s.withBook(ctx, func(_ *books, k *book) {
		if k.inSession(token) {
			need = usage{}
		}
	})
	settle, err := e.s.reserveQuota(ctx, need)
	if err != nil {
		return lock.SetLease{}, err
	}
	set, err := e.Engine.RenewSet(ctx, token, ttl, actor)
	settle(func(b *books, k *book) {
		switch {
		case err == nil && set.InSession:
			// The session's renewals book its keys.
		case err == nil:
			g, ok := k.leases[token]
			if !ok {
				g = bookLease{keys: len(set.Leases)}
				b.change(k, usage{grants: g.grants()})
			}
			g.expires = set.ExpiresAt
			k.leases[token] = g
		case errors.Is(err, lock.ErrLeaseLost):
			b.dropLease(k, token)
		}
	})
	return set, err
}

// ReleaseSet drops a released set from the caller's book.
func (e quotaEngine) ReleaseSet(ctx context.Context, token, actor string) (int, error) {
	n, err := e.Engine.ReleaseSet(ctx, token, actor)
	if err == nil || errors.Is(err, lock.ErrLeaseLost) {
		e.s.withBook(ctx, func(b *books, k *book) { b.dropLease(k, token) })
	}
	return n, err
}

func (e quotaEngine) CreateSession(ctx context.Context, scope, owner string, ttl time.Duration) (lock.Session, error) {
	settle, err := e.s.reserveQuota(ctx, usage{sessions: 1})
	if err != nil {
		return lock.Session{}, err
	}
	sess, err := e.Engine.CreateSession(ctx, scope, owner, ttl)
	settle(func(b *books, k *book) {
		if err == nil {
			b.sessionRenewed(k, sess)
		}
	})
	return sess, err
}

func (e quotaEngine) RenewSession(ctx context.Context, scope, id, actor string) (lock.Session, error) {
	need, err := e.s.sessionNeeds(ctx, e.Engine, scope, id)
	if err != nil {
		return lock.Session{}, err
	}
	settle, err := e.s.reserveQuota(ctx, need)
	if err != nil {
		return lock.Session{}, err
	}
	sess, err := e.Engine.RenewSession(ctx, scope, id, actor)
	settle(func(b *books, k *book) {
		switch {
		case err == nil:
			booked := sess // the answer carries no id
			booked.ID = id
			b.sessionRenewed(k, booked)
		case errors.Is(err, lock.ErrSessionNotFound):
			b.dropSession(k, id)
		}
	})
	return sess, err
}

func (e quotaEngine) EndSession(ctx context.Context, scope, id string) (lock.Session, error) {
	sess, err := e.Engine.EndSession(ctx, scope, id)
	if err == nil || errors.Is(err, lock.ErrSessionNotFound) {
		e.s.withBook(ctx, func(b *books, k *book) { b.dropSession(k, id) })
	}
	return sess, err
}

// maxTTL is the longest TTL caller c may ask for: its key's max_ttl, else
// Config.MaxTTLPerAPIKey, never beyond Config.MaxTTL. A lease held for a
// day by one tenant holds off everyone's keys that long after a Redis data
// loss (the restart quarantine), so an operator may keep tenants shorter.
func (s *Server) maxTTL(c caller) time.Duration {
	if !s.cfg.Keys.Enabled() || c.key == nil {
		return s.cfg.MaxTTL
	}
	d := s.cfg.MaxTTLPerAPIKey
	if c.key.MaxTTL > 0 {
		d = c.key.MaxTTL
	}
	if d <= 0 {
		return s.cfg.MaxTTL
	}
	return min(d, s.cfg.MaxTTL)
}

// ttlRange is msRange for a TTL of caller c's: within lo and its maxTTL
// (and limit), def (cut to that maximum) when v is nil. Beyond the key's
// own maximum the 400 says so.
func (s *Server) ttlRange(c caller, field string, v *int64, def, lo, limit time.Duration) (time.Duration, error) {
	hi := min(s.maxTTL(c), limit)
	if v != nil && hi < min(s.cfg.MaxTTL, limit) && *v > hi.Milliseconds() {
		return 0, invalid(field, "%s must be at most %d for API key %s (its max_ttl), got %d", field, hi.Milliseconds(), c.name, *v)
	}
	return msRange(field, v, min(def, hi), lo, hi)
}
