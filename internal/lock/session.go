package lock

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"
)

// Sessions: one keep-alive for many grants, as etcd's leases and Consul's
// sessions. A grant acquired in a session (AcquireRequest.Session) lives
// exactly as long as the session: its expiry is the session's, moved by
// every renewal of the session and by nothing else, so that a session
// nobody renews takes all its grants with it at the same moment, recorded
// as released by "session" (scripts/lib/events.lua, events.record_lapse).
// Ending the session releases them at once, and wakes their waiters, as
// their holders' releases would.
//
// A session is a record of its own in Redis (session.lua), named by its
// handle, a hash of its secret id and its scope, so that neither the id
// nor anything that leads to it is in a key name, a grant or an event.
// The scope is the API key that made the session ("" with auth off): the
// same id in another scope names no session, so another tenant that
// learns an id finds nothing to read, renew, end or acquire in. On a Cluster
// the session and its grants are in different slots: a grant is taken
// first and then attached to the session's list, and a session's renewal
// renews each grant after its own record. The grants' expiries follow the
// session's within sessionSlack, and are never shorter while the session
// is renewed in time (every ttl/3).

// Session is a session's record. ID, its secret, is only set on creation.
type Session struct {
	ID        string
	Owner     string
	TTL       time.Duration
	CreatedAt time.Time
	ExpiresAt time.Time
	// Holds are the resources the session holds grants of, as far as its
	// list knows: a grant released by its holder or force-released may
	// stay listed until the session's next renewal.
	Holds []Resource
	// Requests are the pending requests that a grant of the session step
	// aside, by the grant's resource, as the session's renewal found them
	// (RenewSession): a grant bound to a session is renewed by it, so this
	// is where its holder learns of them, as a lone lease's holder does
	// from its renewal.
	Requests map[Resource]ReleaseRequest
}

// Session limits: the same TTLs as a lease's.
const (
	MinSessionTTL = 100 * time.Millisecond
	MaxSessionTTL = 24 * time.Hour
)

// sessionSlack is how far past its session's expiry a grant's may be
// before an acquire renews the grant to match (a waiter granted long after
// it asked has the session's expiry as of its request). Never before it:
// a grant that would end earlier than its session is renewed to match.
const sessionSlack = 50 * time.Millisecond

// sessionFanOut bounds the grants one session operation renews or
// releases at once.
const sessionFanOut = 16

// ErrSessionNotFound says that a session id names no live session: it
// ended, lapsed, or never existed.
var ErrSessionNotFound = errors.New("lock: no live session")

// errSessionExists is a new session's handle already taken.
var errSessionExists = errors.New("lock: session exists")

// ErrNoSessions answers every session operation on Redlock: a session's
// keep-alive would have to reach a quorum of masters for every grant.
var ErrNoSessions = fmt.Errorf("%w: Redlock has no sessions", ErrUnsupported)

// ValidSessionID reports whether id has the shape of a session id (the
// shape of a token); whether it names a live session is Redis's to say.
func ValidSessionID(id string) bool {
	if len(id) != 32 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// sessionHandle names a session's keys: a hash of its scope and id, so
// that the keys do not carry the secret. The empty scope hashes as before
// scopes existed, so that live sessions of a server without API keys
// survive an upgrade; a scoped input is longer than any unscoped one (an
// id has 32 characters and no NUL), so the two never meet.
func sessionHandle(scope, id string) string {
	in := "lockd session\x00" + id
	if scope != "" {
		in = "lockd session\x00" + scope + "\x00" + id
	}
	sum := sha256.Sum256([]byte(in))
	return hex.EncodeToString(sum[:16])
}

// sessionCall is session.lua's call.
type sessionCall struct {
	handle string
	op     string
	a, b   string // create: owner, ttl_ms; attach, detach: resource id, token
}

func (c sessionCall) run(*node) ([]string, []any) {
	base := keyPrefix + "{sess/" + c.handle + "}:"
	return []string{base + "session", base + "grants"}, []any{c.op, c.a, c.b}
}

// sessionReply is session.lua's reply.
type sessionReply struct {
	expiresAt, now time.Time
	owner          string
	ttl            time.Duration
	createdAt      time.Time
	grants         []sessionGrant
}

type sessionGrant struct{ id, token string }

func decodeSession(v any, tokens bool) (sessionReply, error) {
	r, err := newReply(v)
	if err != nil {
		return sessionReply{}, err
	}
	switch r.str(0) {
	case "ok":
	case "not_found":
		return sessionReply{}, ErrSessionNotFound
	case "exists":
		return sessionReply{}, errSessionExists
	default:
		return sessionReply{}, fmt.Errorf("lock: session script said %q", r.str(0))
	}
	out := sessionReply{expiresAt: r.time(1), now: r.time(2)}
	if r.len() > 3 {
		out.owner, out.ttl, out.createdAt = r.str(3), r.ms(4), r.time(5)
		step := 1
		if tokens {
			step = 2
		}
		for i := 6; i+step-1 < r.len(); i += step {
			g := sessionGrant{id: r.str(i)}
			if tokens {
				g.token = r.str(i + 1)
			}
			out.grants = append(out.grants, g)
		}
	}
	return out, r.err
}

// session runs one op of session.lua.
func (n *node) session(ctx context.Context, c sessionCall, tokens bool) (sessionReply, error) {
	ctx, cancel := n.bound(ctx)
	defer cancel()
	keys, argv := c.run(n)
	sent := time.Now()
	v, err := n.write(ctx, n.scripts.session, keys, argv...)
	if err != nil && !errors.Is(err, errNoAcks) {
		return sessionReply{}, wrap("session "+c.op, err)
	}
	r, err := decodeSession(v, tokens)
	if err == nil {
		n.ledger.sessionSeen(c.handle, c.op, c.a, c.b, r, sent)
	}
	return r, err
}

func (s sessionReply) session(holds bool) Session {
	out := Session{Owner: s.owner, TTL: s.ttl, CreatedAt: s.createdAt, ExpiresAt: s.expiresAt}
	if holds {
		for _, g := range s.grants {
			out.Holds = append(out.Holds, resourceOf(g.id))
		}
	}
	return out
}

// CreateSession starts a session of owner in scope that lives ttl unless
// renewed. Only the same scope finds it again.
func (e *Engine) CreateSession(ctx context.Context, scope, owner string, ttl time.Duration) (Session, error) {
	if ttl < MinSessionTTL || ttl > MaxSessionTTL {
		return Session{}, fmt.Errorf("lock: session ttl %v is outside %v…%v", ttl, MinSessionTTL, MaxSessionTTL)
	}
	for {
		id, err := newSessionID()
		if err != nil {
			return Session{}, err
		}
		v, err := e.n.session(ctx, sessionCall{handle: sessionHandle(scope, id), op: "create", a: packable(owner),
			b: strconv.FormatInt(ttl.Milliseconds(), 10)}, false)
		if errors.Is(err, errSessionExists) {
			continue // 2^-128 odds: take another id
		}
		if err != nil {
			return Session{}, err
		}
		return Session{ID: id, Owner: owner, TTL: ttl, CreatedAt: v.now, ExpiresAt: v.expiresAt}, nil
	}
}

// newSessionID returns 192 random bits as URL-safe text, a token's shape.
func newSessionID() (string, error) {
	return newToken()
}

// GetSession reads a session of scope and what it holds.
func (e *Engine) GetSession(ctx context.Context, scope, id string) (Session, error) {
	r, err := e.n.session(ctx, sessionCall{handle: sessionHandle(scope, id), op: "get"}, false)
	if err != nil {
		return Session{}, err
	}
	return r.session(true), nil
}

// RenewSession moves the session's expiry to now + its TTL, and each of
// its grants' with it. A grant that ended on its own (released by its
// holder, force-released) leaves the session's list. A grant that could
// not be renewed is an error: it lapses at the session's previous expiry.
func (e *Engine) RenewSession(ctx context.Context, scope, id, actor string) (Session, error) {
	h := sessionHandle(scope, id)
	var r sessionReply
	err := e.n.restoring(ctx, "", "", "", func() error {
		var err error
		r, err = e.n.session(ctx, sessionCall{handle: h, op: "renew"}, true)
		return err
	})
	if err != nil {
		return Session{}, err
	}
	left := r.expiresAt.Sub(r.now)
	// The grants are renewed even if the caller goes away meanwhile (its
	// answer came too late: a client's renewal times out at the session's
	// expiry): the session's record has moved, and its grants must not
	// lapse before it.
	ctx = context.WithoutCancel(ctx)
	lone, sets := sessionSets(r.grants)
	var setsErr error
	for token, entries := range sets {
		setsErr = cmp.Or(setsErr, e.renewSessionSet(ctx, h, token, entries, left, actor))
	}
	var mu sync.Mutex
	requests := map[Resource]ReleaseRequest{}
	err = eachGrant(lone, func(g sessionGrant) error {
		l, err := e.n.renewBy(ctx, g.id, RenewRequest{Token: g.token, TTL: left, Actor: actor}, true)
		if err == nil && l.ReleaseRequested != nil {
			mu.Lock()
			requests[resourceOf(g.id)] = *l.ReleaseRequested
			mu.Unlock()
		}
		if errors.Is(err, ErrNotFound) || errors.Is(err, ErrLeaseLost) {
			_, err = e.n.session(ctx, sessionCall{handle: h, op: "detach", a: g.id, b: g.token}, false)
			if errors.Is(err, ErrSessionNotFound) {
				err = nil
			}
		}
		return err
	})
	if err := cmp.Or(err, setsErr); err != nil {
		return Session{}, fmt.Errorf("lock: renew the session's grants: %w", err)
	}
	s := r.session(true)
	if len(requests) > 0 {
		s.Requests = requests
	}
	return s, nil
}

// EndSession ends the session and releases every grant it holds, each
// recorded as released by "session"; their waiters are woken.
func (e *Engine) EndSession(ctx context.Context, scope, id string) (Session, error) {
	r, err := e.n.session(ctx, sessionCall{handle: sessionHandle(scope, id), op: "end"}, true)
	if err != nil {
		return Session{}, err
	}
	// The grants are released even if the caller goes away meanwhile: the
	// session is already gone, and they must not outlive it.
	ctx = context.WithoutCancel(ctx)
	lone, sets := sessionSets(r.grants)
	var setsErr error
	for token := range sets {
		setsErr = cmp.Or(setsErr, e.endSessionSet(ctx, token))
	}
	err = eachGrant(lone, func(g sessionGrant) error {
		return e.releaseAll(ctx, resourceOf(g.id), g.token)
	})
	if err := cmp.Or(err, setsErr); err != nil {
		return Session{}, fmt.Errorf("lock: release the session's grants: %w", err)
	}
	s := r.session(true)
	s.ExpiresAt = r.now // it ended: it lived until now, not until its expiry
	return s, nil
}

// releaseAll releases every re-entry level of a grant, as its session.
func (e *Engine) releaseAll(ctx context.Context, res Resource, token string) error {
	for range 1 << 16 {
		r, err := e.Release(ctx, res, token, "session")
		if errors.Is(err, ErrNotFound) || errors.Is(err, ErrLeaseLost) || err == nil && r.Released {
			return nil
		}
		if err != nil {
			return err
		}
	}
	return fmt.Errorf("lock: %v re-entered past any count", res)
}

// acquireInSession is Acquire for a grant bound to a session: its TTL is
// the session's time left, and once granted it is on the session's list.
func (e *Engine) acquireInSession(ctx context.Context, res Resource, req AcquireRequest, token, want string) (Lease, error) {
	h := sessionHandle(req.SessionScope, req.Session)
	r, err := e.n.session(ctx, sessionCall{handle: h, op: "check"}, false)
	if err != nil {
		return Lease{}, err
	}
	req.TTL, req.sessionHandle = r.expiresAt.Sub(r.now), h
	if req.Owner == "" {
		// A grant in a session is the session owner's unless it says.
		req.Owner = r.owner
	}
	if req.TTL <= 0 {
		return Lease{}, ErrSessionNotFound
	}
	lease, err := e.acquire(ctx, res, req, token, want)
	if err != nil {
		return Lease{}, err
	}
	a, err := e.n.session(ctx, sessionCall{handle: h, op: "attach", a: res.id(), b: lease.Token}, false)
	if err != nil {
		// The session ended or lapsed while the grant was made: it must
		// not outlive it. (Unanswered: it lapses with the session.)
		_ = e.releaseAll(context.WithoutCancel(ctx), res, lease.Token)
		return Lease{}, err
	}
	// A waiter's grant has the session's expiry as of its request; the
	// session may have been renewed since. A grant must never end before
	// its session, not even by the slack: a renewal of the session that
	// comes late in its TTL, but in time, would find the grant gone.
	if d := lease.ExpiresAt.Sub(a.expiresAt); d > sessionSlack || d < 0 {
		renewed, err := e.n.renewBy(ctx, res.id(), RenewRequest{Token: lease.Token, TTL: a.expiresAt.Sub(a.now), Actor: req.Actor}, true)
		if err != nil {
			return Lease{}, err
		}
		lease.ExpiresAt, lease.TTL = renewed.ExpiresAt, renewed.TTL
	}
	return lease, nil
}

// eachGrant calls f for each grant, sessionFanOut at a time, and returns the
// first error.
func eachGrant(grants []sessionGrant, f func(sessionGrant) error) error {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
		slots = make(chan struct{}, sessionFanOut)
	)
	for _, g := range grants {
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-slots; wg.Done() }()
			if err := f(g); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return first
}

// Redlock has no sessions: see ErrNoSessions.

// CreateSession answers ErrNoSessions.
func (r *Redlock) CreateSession(context.Context, string, string, time.Duration) (Session, error) {
	return Session{}, ErrNoSessions
}

// GetSession answers ErrNoSessions.
func (r *Redlock) GetSession(context.Context, string, string) (Session, error) {
	return Session{}, ErrNoSessions
}

// RenewSession answers ErrNoSessions.
func (r *Redlock) RenewSession(context.Context, string, string, string) (Session, error) {
	return Session{}, ErrNoSessions
}

// EndSession answers ErrNoSessions.
func (r *Redlock) EndSession(context.Context, string, string) (Session, error) {
	return Session{}, ErrNoSessions
}
