package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/lockd/lockd/api"
)

// ErrSessionNotFound means the session ended or lapsed (or never
// existed), and every grant in it with it.
var ErrSessionNotFound = errors.New("lockd: no live session")

// SessionOptions configure NewSession.
type SessionOptions struct {
	// Owner labels the session; default the caller's API-key name or
	// address.
	Owner string
	// TTL is how long the session lives unless renewed (default the
	// server's, 30 s); the keep-alive renews it every TTL/3.
	TTL time.Duration
}

// Session is one keep-alive for many grants: a lease acquired with
// AcquireOptions.Session (or a permit, or a leadership) lives as long as
// the session, and its own watchdog does not run. A goroutine renews the
// session every ttl/3 until End or loss; a lost session loses every lease
// in it at once. Its methods are safe for concurrent use.
type Session struct {
	c   *Client
	id  string
	ttl time.Duration

	ctx    context.Context // cancelled on loss (cause: Err) or End
	cancel context.CancelCauseFunc
	lost   chan struct{}
	stop   chan struct{}
	done   chan struct{}

	mu       sync.Mutex
	info     api.Session
	expires  time.Time // by our clock; see grantExpiry
	renewNow bool      // created by a slow answer: the keep-alive renews at once
	err      error
	ended    bool
	// locks are the session's lock leases by key, for the requests that
	// their holder step aside, which the session's renewals carry; joined
	// is when each was added.
	locks  map[string]*Lease
	joined map[*Lease]time.Time
}

// NewSession starts a session and its keep-alive.
func (c *Client) NewSession(ctx context.Context, opts SessionOptions) (*Session, error) {
	sent := time.Now()
	info, err := c.CreateSession(ctx, opts)
	if err != nil {
		return nil, err
	}
	ttl := time.Duration(info.TtlMs) * time.Millisecond
	// A creation does not wait, but its answer may be slow: the same rule
	// as a lease's grant.
	expires, renewNow := grantExpiry(sent, time.Now(), ttl)
	sctx, cancel := context.WithCancelCause(context.Background())
	s := &Session{
		c: c, id: *info.Session, ttl: ttl,
		ctx: sctx, cancel: cancel,
		lost: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{}),
		info: info, expires: expires, renewNow: renewNow,
	}
	go s.watch()
	return s, nil
}

// CreateSession starts a session without a keep-alive: its Session field
// is the id, for AcquireOptions.SessionID and for whoever renews it (a
// script's `lockd session renew`). NewSession is the usual way.
func (c *Client) CreateSession(ctx context.Context, opts SessionOptions) (api.Session, error) {
	body := api.SessionRequest{}
	if opts.Owner != "" {
		body.Owner = &opts.Owner
	}
	if opts.TTL > 0 {
		body.TtlMs = ptr(opts.TTL.Milliseconds())
	}
	resp, err := c.raw.CreateSession(ctx, body)
	info, err := decode[api.Session](ctx, resp, err)
	if err == nil && info.Session == nil {
		err = fmt.Errorf("lockd: the server answered a session without its id")
	}
	return info, err
}

// GetSession reads the session with id: its expiry and what it holds.
func (c *Client) GetSession(ctx context.Context, id string) (api.Session, error) {
	resp, err := c.raw.GetSession(ctx, id)
	return decode[api.Session](ctx, resp, err)
}

// RenewSession renews the session with id, and every grant in it, once.
func (c *Client) RenewSession(ctx context.Context, id string) (api.Session, error) {
	resp, err := c.raw.RenewSession(ctx, id)
	return decode[api.Session](ctx, resp, err)
}

// EndSession ends the session with id: every grant in it is released.
func (c *Client) EndSession(ctx context.Context, id string) (api.Session, error) {
	resp, err := c.raw.EndSession(ctx, id)
	return decode[api.Session](ctx, resp, err)
}

// ID is the session's secret id. Keep it out of logs.
func (s *Session) ID() string { return s.id }

// TTL is the session's time to live.
func (s *Session) TTL() time.Duration { return s.ttl }

// Lost is closed when the session is lost: it ended elsewhere, lapsed, or
// could not be renewed before it expired. Every lease in it is lost too.
func (s *Session) Lost() <-chan struct{} { return s.lost }

// Err is why the session was lost (it wraps ErrSessionNotFound), or nil.
func (s *Session) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Context is cancelled when the session is lost or ended.
func (s *Session) Context() context.Context { return s.ctx }

// Info reads the session from the server: its expiry and what it holds.
func (s *Session) Info(ctx context.Context) (api.Session, error) {
	info, err := s.c.GetSession(ctx, s.id)
	return info, s.lostIf(err)
}

// Renew renews the session (and every grant in it) once.
func (s *Session) Renew(ctx context.Context) error {
	sent := time.Now()
	info, err := s.c.RenewSession(ctx, s.id)
	if err != nil {
		return s.lostIf(err)
	}
	s.mu.Lock()
	s.info, s.expires, s.renewNow = info, sent.Add(s.ttl), false
	var asked []*Lease
	var requests []*api.ReleaseRequested
	for _, h := range info.Holds {
		// A lease that joined after the renewal was sent may be a new
		// grant of a key whose request was the earlier grant's.
		if l := s.locks[h.Key]; l != nil && h.Kind == api.Lock && h.ReleaseRequested != nil && s.joined[l].Before(sent) {
			asked, requests = append(asked, l), append(requests, h.ReleaseRequested)
		}
	}
	s.mu.Unlock()
	// A grant bound to a session is renewed by it: its lease learns of a
	// request to step aside here, as a lone lease from its own renewal.
	for i, l := range asked {
		l.mu.Lock()
		notify, rq := l.noteRequest(requests[i])
		l.mu.Unlock()
		if notify != nil {
			notify(rq)
		}
	}
	return nil
}

// End stops the keep-alive and ends the session: the server releases
// every grant in it. A session that was lost returns its Err.
func (s *Session) End(ctx context.Context) error {
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return nil
	}
	s.ended = true
	s.mu.Unlock()
	close(s.stop)
	<-s.done
	if err := s.Err(); err != nil {
		return err
	}
	if _, err := s.c.EndSession(ctx, s.id); err != nil {
		return s.lostIf(err)
	}
	s.cancel(ErrReleased)
	return nil
}

// lostIf loses the session on an answer that says it is gone.
func (s *Session) lostIf(err error) error {
	if errors.Is(err, ErrSessionNotFound) {
		s.lose(err)
		return s.Err()
	}
	return err
}

func (s *Session) lose(cause error) {
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return
	}
	s.err = cause
	if !errors.Is(cause, ErrSessionNotFound) {
		s.err = fmt.Errorf("%w: %w", ErrSessionNotFound, cause)
	}
	err := s.err
	s.mu.Unlock()
	s.cancel(err)
	close(s.lost)
}

// watch renews every ttl/3 until End or loss (keepAlive).
func (s *Session) watch() {
	defer close(s.done)
	s.mu.Lock()
	now := s.renewNow
	s.mu.Unlock()
	keepAlive(keeper{
		stop: s.stop, ttl: s.ttl, expiry: s.expiry, renew: s.Renew, renewNow: now,
		gone: func(err error) bool { return errors.Is(err, ErrSessionNotFound) },
		lose: s.lose, what: "session",
	})
}

func (s *Session) expiry() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.expires
}

// inSession ties a lease to its session: the lease has no watchdog of its
// own, is lost when the session is, and hears of requests that its holder
// step aside from the session's renewals.
func (l *Lease) inSession(s *Session) {
	if l.kind == lockKind {
		s.mu.Lock()
		if s.locks == nil {
			s.locks, s.joined = map[string]*Lease{}, map[*Lease]time.Time{}
		}
		s.locks[l.key], s.joined[l] = l, time.Now()
		s.mu.Unlock()
	}
	l.endsWith(s, l.lose, func() {
		s.mu.Lock()
		if s.locks[l.key] == l {
			delete(s.locks, l.key)
		}
		delete(s.joined, l)
		s.mu.Unlock()
	})
}

// statusOK reports whether an answer carries its body: 200, or 201 for a
// creation.
func statusOK(code int) bool {
	return code == http.StatusOK || code == http.StatusCreated || code == http.StatusAccepted
}
