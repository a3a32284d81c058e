package client

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"mime"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/lockd/lockd/api"
)

// Client talks to one lockd server. It is safe for concurrent use.
type Client struct {
	raw      *api.Client
	retryFor time.Duration
	// maxWait is the server's longest wait (its --max-wait), learnt from
	// the first wait it refused as too long (0: not known yet).
	maxWait atomic.Int64
}

type options struct {
	apiKey   string
	http     *http.Client
	retryFor time.Duration
}

// Option configures a Client.
type Option func(*options)

// WithAPIKey sends key as "Authorization: Bearer <key>" on every request.
func WithAPIKey(key string) Option { return func(o *options) { o.apiKey = key } }

// WithHTTPClient uses h instead of a default http.Client. It must not time
// out requests sooner than the waits it is asked for.
func WithHTTPClient(h *http.Client) Option { return func(o *options) { o.http = h } }

// WithRetry sets how long Acquire keeps retrying 503 answers and connection
// errors past its wait; 0 tries once. The default is 30 s.
func WithRetry(d time.Duration) Option { return func(o *options) { o.retryFor = max(0, d) } }

// New returns a client of the lockd server at serverURL
// (e.g. "http://127.0.0.1:8080").
func New(serverURL string, opts ...Option) (*Client, error) {
	o := options{http: &http.Client{}, retryFor: 30 * time.Second}
	for _, opt := range opts {
		opt(&o)
	}
	copts := []api.ClientOption{api.WithHTTPClient(o.http)}
	if o.apiKey != "" {
		auth := "Bearer " + o.apiKey
		copts = append(copts, api.WithRequestEditorFn(func(_ context.Context, r *http.Request) error {
			r.Header.Set("Authorization", auth)
			return nil
		}))
	}
	raw, err := api.NewClient(serverURL, copts...)
	if err != nil {
		return nil, fmt.Errorf("lockd: server URL %q: %w", serverURL, err)
	}
	return &Client{raw: raw, retryFor: o.retryFor}, nil
}

// Mode is how a lease holds its key.
type Mode string

// Modes. A lock is held by one Exclusive holder or by any number of Shared
// holders together; a semaphore's holders each hold a Permit.
const (
	// Exclusive holds a lock alone: the default.
	Exclusive Mode = "exclusive"
	// Shared holds a lock together with any other Shared holders, and
	// with no Exclusive one. A Shared request that arrives while an
	// Exclusive one waits queues behind it, so writers do not starve.
	Shared Mode = "shared"
	// Permit is the mode of a semaphore's leases (Lease.Mode only).
	Permit Mode = "permit"
)

// AcquireOptions are the knobs of an acquire. Zero values take the server's
// defaults (TTL 30 s, no wait, exclusive).
type AcquireOptions struct {
	// Owner labels the holder on the dashboard; default the caller's
	// API-key name or address.
	Owner string
	// TTL is the lease's time to live; the watchdog renews every TTL/3.
	TTL time.Duration
	// Wait is how long to wait for a held key before answering ErrHeld
	// (ErrNoPermits for a semaphore), or ErrQueued when the key is free
	// but kept for requests that began to wait earlier. Waiting requests
	// are granted in the order they began to wait, across every lockd
	// replica. A wait longer than the server's longest (its --max-wait,
	// 60 s by default) goes in rounds of at most that, all with one
	// Idempotency-Key: the server keeps the request's place in line and
	// its waiting-since from one round to the next.
	Wait time.Duration
	// Mode is Exclusive (the default) or Shared, for locks. A
	// semaphore's permits have no other mode: leave it empty there.
	Mode Mode
	// LockDelay (exclusive locks only, at most a minute): after this
	// lease ends by expiry or force-release, nobody is granted the key
	// for this long (ErrLockDelay meanwhile). Zero: the server's default.
	LockDelay time.Duration
	// MinHold is a hold window (exclusive locks only, at most TTL, not in
	// a session; ShedLock's lockAtLeastFor): a release earlier than this
	// after the grant ends the lease but keeps the key taken, by nobody,
	// until the window ends (ErrMinHold meanwhile, a waiting acquire is
	// granted then), so that a job many nodes start at once runs once per
	// window. Zero: none.
	MinHold time.Duration
	// Value is any JSON for the grant's state (at most 4 KiB compact),
	// e.g. where the holder can be reached: read-scope callers see it, so
	// never a secret. Nil: none.
	Value json.RawMessage
	// IdempotencyKey (e.g. a webhook delivery ID) makes a repeated acquire
	// get the lease it already holds. Default: a random key per call, which
	// only makes Acquire's own retries safe.
	IdempotencyKey string
	// NoAutoRenew turns the watchdog off: call Lease.Renew yourself.
	NoAutoRenew bool
	// Session binds the grant to a session (NewSession): it lives as long
	// as the session, TTL is not sent and the lease has no watchdog of its
	// own; it is lost when the session is.
	Session *Session
	// SessionID binds the grant to a session that something else keeps
	// alive (CreateSession, a script's `lockd session renew`): as Session,
	// but nothing here notices the session's loss.
	SessionID string
}

// Acquire takes key, waiting up to opts.Wait while another lease holds it
// (or, with opts.Mode Shared, while an exclusive lease holds it or waits
// for it). The lease renews itself every ttl/3 unless opts.NoAutoRenew;
// ctx bounds only the acquire, not the lease (Release ends that).
func (c *Client) Acquire(ctx context.Context, key string, opts AcquireOptions) (*Lease, error) {
	var mode *api.LockMode
	switch opts.Mode {
	case "", Exclusive:
		// Not sent: the server's default, and what servers before modes
		// understand.
	case Shared:
		mode = ptr(api.LockModeShared)
	default:
		return nil, fmt.Errorf("%w: mode %q: a lock is held exclusive or shared", ErrInvalid, opts.Mode)
	}
	return c.acquire(ctx, lockKind, opts, func(ctx context.Context, p acquireParams) (*http.Response, error) {
		body := api.AcquireRequest{Owner: p.owner, TtlMs: p.ttlMs, WaitMs: p.waitMs, Mode: mode, Session: p.session}
		if opts.LockDelay > 0 {
			body.LockDelayMs = ptr(opts.LockDelay.Milliseconds())
		}
		if opts.MinHold > 0 {
			body.MinHoldMs = ptr(opts.MinHold.Milliseconds())
		}
		if opts.Value != nil {
			body.Value = &opts.Value
		}
		return c.raw.AcquireLock(ctx, key, &api.AcquireLockParams{IdempotencyKey: p.idem}, body)
	})
}

// kind is what a key names: a lock or a semaphore (which may share a name).
type kind uint8

const (
	lockKind kind = iota
	semaphoreKind
	electionKind
)

// acquireParams are the fields that every acquire sends.
type acquireParams struct {
	idem, owner   *string
	ttlMs, waitMs *int64
	session       *string // instead of ttlMs
}

// acquire sends an acquire until it is answered, retrying 503s and
// connection errors with backoff for up to c.retryFor past the wait, each
// time with what is left of the wait.
func (c *Client) acquire(ctx context.Context, k kind, opts AcquireOptions, send func(context.Context, acquireParams) (*http.Response, error)) (*Lease, error) {
	if opts.IdempotencyKey == "" {
		opts.IdempotencyKey = crand.Text()
	}
	first := time.Now() // an answer that replays an earlier attempt's grant: no earlier than this
	waitUntil := first.Add(opts.Wait)
	giveUp := waitUntil.Add(c.retryFor)
	for attempt := 0; ; attempt++ {
		p := acquireParams{idem: &opts.IdempotencyKey}
		if opts.Owner != "" {
			p.owner = &opts.Owner
		}
		switch {
		case opts.Session != nil:
			p.session = &opts.Session.id
		case opts.SessionID != "":
			p.session = &opts.SessionID
		case opts.TTL > 0:
			p.ttlMs = ptr(opts.TTL.Milliseconds())
		}
		if w := time.Until(waitUntil); w > 0 {
			w = min(w, roundMax)
			if m := time.Duration(c.maxWait.Load()); m > 0 {
				w = min(w, m)
			}
			p.waitMs = ptr(w.Milliseconds())
		}
		sent := time.Now()
		resp, err := send(ctx, p)
		var l api.Lease
		if k == electionKind {
			var ld api.Leadership
			ld, err = decode[api.Leadership](ctx, resp, err)
			l = leaseOf(ld)
		} else {
			l, err = decode[api.Lease](ctx, resp, err)
		}
		arrived := time.Now()
		if err == nil && l.Replayed != nil && *l.Replayed {
			// Granted to an earlier attempt whose answer was lost.
			sent = first
		}
		if err == nil && opts.Session != nil {
			ls := newLease(c, k, l, sent, arrived, false)
			ls.inSession(opts.Session)
			return ls, nil
		}
		if err == nil {
			return newLease(c, k, l, sent, arrived, !opts.NoAutoRenew && opts.SessionID == ""), nil
		}
		if c.nextRound(err, p.waitMs, waitUntil) {
			attempt = -1
			continue
		}
		if !errors.Is(err, ErrUnavailable) {
			return nil, err
		}
		d := backoff(attempt, 100*time.Millisecond, 5*time.Second, retryAfter(err))
		if time.Now().Add(d).After(giveUp) {
			return nil, err
		}
		if err := sleep(ctx, d); err != nil {
			return nil, err
		}
	}
}

// roundMax bounds a round of a wait before the server has said its
// longest: a day, far past any --max-wait.
const roundMax = 24 * time.Hour

// nextRound says whether an acquire answered err goes on at once with
// another round of its wait: the server refused the wait as longer than
// its longest (learnt here, from the answer's max_ms), or a round ended
// with the key still taken while the caller's wait is not over. The next
// round carries the same Idempotency-Key, so it keeps the request's place.
func (c *Client) nextRound(err error, waitMs *int64, waitUntil time.Time) bool {
	var ae *APIError
	if errors.As(err, &ae) && ae.Problem.Code == api.ProblemCodeInvalidRequest && ae.Problem.Field != nil &&
		*ae.Problem.Field == "wait_ms" && ae.Problem.MaxMs != nil && *ae.Problem.MaxMs > 0 &&
		waitMs != nil && *waitMs > *ae.Problem.MaxMs {
		c.maxWait.Store(int64(time.Duration(*ae.Problem.MaxMs) * time.Millisecond))
		return true
	}
	if waitMs == nil || *waitMs <= 0 || time.Until(waitUntil) < time.Millisecond {
		return false
	}
	return errors.Is(err, ErrHeld) || errors.Is(err, ErrQueued) || errors.Is(err, ErrNoPermits) || errors.Is(err, ErrLockDelay) ||
		errors.Is(err, ErrMinHold)
}

// Renew extends the lease with token on key by ttl (0: the lease's own
// TTL), once, without retries. A lease that is no longer live is
// ErrLeaseLost. Leases from Acquire renew themselves; this is for tokens
// kept elsewhere (a shell script's).
func (c *Client) Renew(ctx context.Context, key, token string, ttl time.Duration) (api.Lease, error) {
	return c.renew(ctx, lockKind, key, token, "", ttl)
}

// RenewWithProof is Renew that sends the lease's latest proof (the
// answer's Proof of its grant or last renewal) beside the token, so that
// any lockd can restore the lease should Redis have lost it. Keep the
// answer's new proof for the next call.
func (c *Client) RenewWithProof(ctx context.Context, key, token, proof string, ttl time.Duration) (api.Lease, error) {
	return c.renew(ctx, lockKind, key, token, proof, ttl)
}

func (c *Client) renew(ctx context.Context, k kind, key, token, proof string, ttl time.Duration) (api.Lease, error) {
	body := api.RenewRequest{Token: token, Proof: nonEmpty(proof)}
	if ttl > 0 {
		body.TtlMs = ptr(ttl.Milliseconds())
	}
	var resp *http.Response
	var err error
	switch k {
	case semaphoreKind:
		resp, err = c.raw.RenewSemaphore(ctx, key, body)
	case electionKind:
		resp, err = c.raw.RenewLeadership(ctx, key, body)
		ld, err := decode[api.Leadership](ctx, resp, err)
		return leaseOf(ld), lostIfNotFound(key, err)
	default:
		resp, err = c.raw.RenewLock(ctx, key, body)
	}
	l, err := decode[api.Lease](ctx, resp, err)
	return l, lostIfNotFound(key, err)
}

// Release gives back one level of the lease with token on key. A lease
// that is no longer live is ErrLeaseLost.
func (c *Client) Release(ctx context.Context, key, token string) (api.ReleaseResult, error) {
	return c.release(ctx, lockKind, key, token, "")
}

// ReleaseWithProof is Release that sends the lease's latest proof beside
// the token (see RenewWithProof).
func (c *Client) ReleaseWithProof(ctx context.Context, key, token, proof string) (api.ReleaseResult, error) {
	return c.release(ctx, lockKind, key, token, proof)
}

func (c *Client) release(ctx context.Context, k kind, key, token, proof string) (api.ReleaseResult, error) {
	body := api.ReleaseRequest{Token: token, Proof: nonEmpty(proof)}
	var resp *http.Response
	var err error
	switch k {
	case semaphoreKind:
		resp, err = c.raw.ReleaseSemaphore(ctx, key, body)
	case electionKind:
		resp, err = c.raw.Resign(ctx, key, body)
		r, err := decode[api.ResignResult](ctx, resp, err)
		return api.ReleaseResult{Key: r.Key, Released: r.Resigned}, lostIfNotFound(key, err)
	default:
		resp, err = c.raw.ReleaseLock(ctx, key, body)
	}
	r, err := decode[api.ReleaseResult](ctx, resp, err)
	return r, lostIfNotFound(key, err)
}

// ForceRelease breaks every lease on key (all its shared holders),
// whoever holds it (admin scope).
func (c *Client) ForceRelease(ctx context.Context, key, reason string) (api.ForceReleaseResult, error) {
	return c.ForceReleaseFence(ctx, key, 0, reason)
}

// ForceReleaseFence breaks only the lease on key with fence (admin
// scope): one shared holder, or an exclusive holder you have looked at,
// not whoever took the key since. When no holder has that fence, nothing is
// broken and the error wraps ErrLeaseLost. Fence 0 breaks every holder.
func (c *Client) ForceReleaseFence(ctx context.Context, key string, fence int64, reason string) (api.ForceReleaseResult, error) {
	return c.forceRelease(ctx, lockKind, key, fence, reason)
}

func (c *Client) forceRelease(ctx context.Context, k kind, key string, fence int64, reason string) (api.ForceReleaseResult, error) {
	body := api.ForceReleaseRequest{}
	if reason != "" {
		body.Reason = &reason
	}
	if fence != 0 {
		body.Fence = &fence
	}
	var resp *http.Response
	var err error
	if k == semaphoreKind {
		resp, err = c.raw.ForceReleaseSemaphore(ctx, key, body)
	} else {
		resp, err = c.raw.ForceReleaseLock(ctx, key, body)
	}
	return decode[api.ForceReleaseResult](ctx, resp, err)
}

// RequestRelease asks the exclusive holder of key to step aside (write
// scope): the holder's lease learns it on its next renewal
// (Lease.ReleaseRequested) and decides. by names who asks ("" : the API
// key's name). A key held shared is refused (ErrNotExclusive); a free key
// is ErrNotFound.
func (c *Client) RequestRelease(ctx context.Context, key, by, reason string) (api.RequestReleaseResult, error) {
	body := api.RequestReleaseRequest{}
	if by != "" {
		body.By = &by
	}
	if reason != "" {
		body.Reason = &reason
	}
	resp, err := c.raw.RequestReleaseLock(ctx, key, body)
	return decode[api.RequestReleaseResult](ctx, resp, err)
}

// State reads the live lock on key: its mode, every holder and the queue
// of waiting requests (never a token); ErrNotFound when it has none.
func (c *Client) State(ctx context.Context, key string) (api.LockState, error) {
	resp, err := c.raw.GetLock(ctx, key)
	return decode[api.LockState](ctx, resp, err)
}

// List reads one page of live locks whose keys start with prefix. Pass the
// page's NextCursor to get the next one; limit 0 is the server's default.
func (c *Client) List(ctx context.Context, prefix string, limit int, cursor string) (api.LockList, error) {
	p := &api.ListLocksParams{}
	if prefix != "" {
		p.Prefix = &prefix
	}
	if limit > 0 {
		p.Limit = &limit
	}
	if cursor != "" {
		p.Cursor = &cursor
	}
	resp, err := c.raw.ListLocks(ctx, p)
	return decode[api.LockList](ctx, resp, err)
}

// History reads the recent events of key, newest first; limit 0 is the
// server's default.
func (c *Client) History(ctx context.Context, key string, limit int) (api.History, error) {
	return c.history(ctx, lockKind, key, limit, nil)
}

// Renewals returns the key's last renewals (at most limit; 0: the
// server's default), newest first, each with RemainingMs: how much of the
// lease was left when it came. The history itself keeps only lifecycle
// events.
func (c *Client) Renewals(ctx context.Context, key string, limit int) (api.History, error) {
	return c.history(ctx, lockKind, key, limit, ptr(api.Renewed))
}

func (c *Client) history(ctx context.Context, k kind, key string, limit int, typ *api.EventType) (api.History, error) {
	var lim *int
	if limit > 0 {
		lim = &limit
	}
	var resp *http.Response
	var err error
	switch k {
	case semaphoreKind:
		resp, err = c.raw.GetSemaphoreHistory(ctx, key, &api.GetSemaphoreHistoryParams{Limit: lim, Type: typ})
	case electionKind:
		resp, err = c.raw.GetElectionHistory(ctx, key, &api.GetElectionHistoryParams{Limit: lim, Type: typ})
	default:
		resp, err = c.raw.GetLockHistory(ctx, key, &api.GetLockHistoryParams{Limit: lim, Type: typ})
	}
	return decode[api.History](ctx, resp, err)
}

// lostIfNotFound: on renew and release, "no live lease" means the caller's
// lease is gone, the same as a token that is not the live one.
func lostIfNotFound(key string, err error) error {
	if errors.Is(err, ErrNotFound) || errors.Is(err, ErrLeaseLost) {
		return fmt.Errorf("%w: %s: %w", ErrLeaseLost, key, err)
	}
	return err
}

// decode turns a response into T, or into an error that unwraps to one of
// the sentinels. It always closes the body.
func decode[T any](ctx context.Context, resp *http.Response, err error) (T, error) {
	var v T
	if err != nil {
		if ctx.Err() != nil {
			return v, ctx.Err()
		}
		// The request may not have reached the server: worth a retry.
		return v, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		if ctx.Err() != nil {
			return v, ctx.Err()
		}
		return v, fmt.Errorf("%w: reading the answer: %w", ErrUnavailable, err)
	}
	if statusOK(resp.StatusCode) {
		if err := json.Unmarshal(body, &v); err != nil {
			return v, fmt.Errorf("lockd: decoding the answer: %w", err)
		}
		return v, nil
	}
	return v, problemError(resp, body)
}

// problemError builds the error for a non-200 answer.
func problemError(resp *http.Response, body []byte) error {
	ae := APIError{Status: resp.StatusCode, RetryAfter: parseRetryAfter(resp.Header.Get("Retry-After"))}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt == "application/problem+json" || mt == "application/json" {
		_ = json.Unmarshal(bytes.TrimSpace(body), &ae.Problem)
	}
	var key, holder string
	var remaining time.Duration
	if ae.Problem.Key != nil {
		key = *ae.Problem.Key
	}
	if ae.Problem.Holder != nil {
		holder = *ae.Problem.Holder
	}
	if ae.Problem.RemainingMs != nil {
		remaining = time.Duration(*ae.Problem.RemainingMs) * time.Millisecond
	}
	switch ae.Problem.Code {
	case api.ProblemCodeLockHeld:
		return &HeldError{APIError: ae, Key: key, Holder: holder, Remaining: remaining}
	case api.ProblemCodeNoPermits:
		return &NoPermitsError{APIError: ae, Name: key, Holder: holder, Remaining: remaining}
	case api.ProblemCodeQueued:
		qe := &QueuedError{APIError: ae, Key: key}
		if ae.Problem.Waiters != nil {
			qe.Waiters = *ae.Problem.Waiters
		}
		if ae.Problem.Next != nil {
			qe.Next, qe.NextSince = ae.Problem.Next.Owner, ae.Problem.Next.WaitingSince
		}
		return qe
	}
	return &ae
}

// backoff is the delay before retry number attempt (0-based): exponential
// from base up to ceiling, with jitter so that many clients that failed
// together do not retry together, and never shorter than the server's
// Retry-After.
func backoff(attempt int, base, ceiling, retryAfter time.Duration) time.Duration {
	d := base << min(attempt, 20)
	if d <= 0 || d > ceiling {
		d = ceiling
	}
	d = d/2 + rand.N(d/2+1)
	return max(d, retryAfter)
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func ptr[T any](v T) *T { return &v }

// nonEmpty is s, or nil for "": an optional field left out.
func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
