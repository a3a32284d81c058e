package mcp

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/lockd/lockd/api"
	"github.com/lockd/lockd/client"
)

// errClosed answers a tool call that arrives while its MCP session ends.
var errClosed = errors.New("this MCP session has ended: connect again")

// lockd is a lockd server as the tools see it: the Go client, and the
// generated API client for what the Go client does not offer (a renewal
// that sets a value).
type lockd struct {
	c   *client.Client
	raw *api.Client
}

// agent is one MCP session's side of lockd: its name, its lockd session
// (created at its first claim) and what it holds. Its methods are safe for
// concurrent use: an agent may call tools in parallel.
type agent struct {
	ld   lockd
	name string // the default owner of its claims
	ttl  time.Duration

	// ctx ends when the MCP session does: waits in flight give up.
	ctx    context.Context
	cancel context.CancelFunc

	// ending makes end run once; every caller of end waits for it.
	ending sync.Once

	mu         sync.Mutex
	closed     bool
	noSessions bool // the server has none (Redlock)
	sess       *client.Session
	claims     map[string]*hold // by lock key
	leads      map[string]*hold // by election name
}

// hold is one lease of the agent's, and how it lives.
type hold struct {
	lease *client.Lease
	// kept: kept alive for the agent while its MCP session lives, as a
	// grant in its lockd session, or (where the store has no sessions:
	// Redlock) by the lease's own watchdog; else it has a TTL of its own
	// that the agent renews.
	kept bool
	// inSession: a grant in the lockd session, released when it ends.
	inSession bool
	note      any // as the agent gave it; under agent.mu
}

// newAgent begins an agent whose waits give up when parent ends.
func newAgent(parent context.Context, ld lockd, name string, ttl time.Duration) *agent {
	ctx, cancel := context.WithCancel(parent)
	return &agent{
		ld: ld, name: name, ttl: ttl, ctx: ctx, cancel: cancel,
		claims: map[string]*hold{}, leads: map[string]*hold{},
	}
}

// session is the agent's live lockd session, started on first use (and
// again after a loss: the grants of a lost one are gone with it).
func (a *agent) session(ctx context.Context) (*client.Session, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil, errClosed
	}
	if a.sess != nil && a.sess.Err() == nil {
		return a.sess, nil
	}
	if a.noSessions {
		return nil, client.ErrUnsupported
	}
	s, err := a.ld.c.NewSession(ctx, client.SessionOptions{Owner: a.name, TTL: a.ttl})
	if errors.Is(err, client.ErrUnsupported) {
		a.noSessions = true
	}
	if err != nil {
		return nil, err
	}
	a.sess = s
	return s, nil
}

// keepAlive sets opts so that the grant lives as long as the agent's MCP
// session: a grant in its lockd session, or where the server has no
// sessions (Redlock) a lease of the session's TTL that renews itself
// until the agent ends.
func (a *agent) keepAlive(ctx context.Context, opts *client.AcquireOptions, h *hold) error {
	s, err := a.session(ctx)
	switch {
	case err == nil:
		opts.Session, h.inSession = s, true
	case errors.Is(err, client.ErrUnsupported):
		opts.TTL = a.ttl
	default:
		return err
	}
	return nil
}

// held is the agent's live lease on name (a lock key, or an election's
// name when leads), or nil; a lost one is forgotten.
func (a *agent) held(name string, leads bool) *hold {
	a.mu.Lock()
	defer a.mu.Unlock()
	m := a.claims
	if leads {
		m = a.leads
	}
	h := m[name]
	if h != nil && h.lease.Err() != nil {
		delete(m, name)
		return nil
	}
	return h
}

// keep records a new lease; when the MCP session ended meanwhile, it is
// given back at once and the answer is errClosed.
func (a *agent) keep(name string, leads bool, h *hold) error {
	a.mu.Lock()
	if !a.closed {
		if leads {
			a.leads[name] = h
		} else {
			a.claims[name] = h
		}
		a.mu.Unlock()
		return nil
	}
	a.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = h.lease.Release(ctx)
	return errClosed
}

// forget drops name from what the agent holds.
func (a *agent) forget(name string, leads bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if leads {
		delete(a.leads, name)
	} else {
		delete(a.claims, name)
	}
}

// mine is the fence of the agent's live claim on key, or 0.
func (a *agent) mine(key string) int64 {
	if h := a.held(key, false); h != nil {
		return h.lease.Fence()
	}
	return 0
}

// end lets go of everything: the leases with a TTL of their own one by
// one, then the session, which releases every grant in it at once. Waits
// in flight give up first. The MCP session's end and lockd's shutdown may
// both call it; each returns once everything is let go, so that a
// shutdown never stops serving while the releases are under way.
func (a *agent) end() { a.ending.Do(a.letGo) }

func (a *agent) letGo() {
	a.cancel()
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return
	}
	a.closed = true
	var own []*client.Lease
	for _, m := range []map[string]*hold{a.claims, a.leads} {
		for _, h := range m {
			// A grant in the session goes with it below.
			if !h.inSession && h.lease.Err() == nil {
				own = append(own, h.lease)
			}
		}
	}
	s := a.sess
	a.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, l := range own {
		_ = l.Release(ctx)
	}
	if s != nil {
		_ = s.End(ctx)
	}
}

// within is ctx that also ends when the agent does.
func (a *agent) within(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(a.ctx, cancel)
	return ctx, func() { stop(); cancel() }
}

// ownerName makes a name fit for a lock's owner (1-128 printable
// characters): an MCP client names itself as it likes.
func ownerName(s string) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsPrint(r) {
			return r
		}
		return -1
	}, strings.TrimSpace(s))
	if r := []rune(s); len(r) > 128 {
		s = string(r[:128])
	}
	return s
}

// describe says how long ago or ahead d is, for people.
func describe(d time.Duration) string {
	switch {
	case d < time.Second:
		return fmt.Sprintf("%d ms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%.1f s", d.Seconds())
	default:
		return d.Round(time.Second).String()
	}
}
