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
	"time"

	"github.com/lockd/lockd/api"
)

// Client talks to one lockd server. It is safe for concurrent use.
type Client struct {
	raw      *api.Client
	retryFor time.Duration
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

// AcquireOptions are the knobs of an acquire. Zero values take the server's
// defaults (TTL 30 s, no wait).
type AcquireOptions struct {
	// Owner labels the holder on the dashboard; default the caller's
	// API-key name or address.
	Owner string
	// TTL is the lease's time to live; the watchdog renews every TTL/3.
	TTL time.Duration
	// Wait is how long the server waits for a held key before answering
	// ErrHeld.
	Wait time.Duration
	// IdempotencyKey (e.g. a webhook delivery ID) makes a repeated acquire
	// get the lease it already holds. Default: a random key per call, which
	// only makes Acquire's own retries safe.
	IdempotencyKey string
	// NoAutoRenew turns the watchdog off: call Lease.Renew yourself.
	NoAutoRenew bool
}

// Acquire takes key, waiting up to opts.Wait while another lease holds it.
// The lease renews itself every ttl/3 unless opts.NoAutoRenew; ctx bounds
// only the acquire, not the lease (Release ends that).
func (c *Client) Acquire(ctx context.Context, key string, opts AcquireOptions) (*Lease, error) {
	if opts.IdempotencyKey == "" {
		opts.IdempotencyKey = crand.Text()
	}
	params := &api.AcquireLockParams{IdempotencyKey: &opts.IdempotencyKey}
	waitUntil := time.Now().Add(opts.Wait)
	giveUp := waitUntil.Add(c.retryFor)
	for attempt := 0; ; attempt++ {
		body := api.AcquireRequest{}
		if opts.Owner != "" {
			body.Owner = &opts.Owner
		}
		if opts.TTL > 0 {
			body.TtlMs = ptr(opts.TTL.Milliseconds())
		}
		if w := time.Until(waitUntil); w > 0 {
			body.WaitMs = ptr(w.Milliseconds())
		}
		sent := time.Now()
		resp, err := c.raw.AcquireLock(ctx, key, params, body)
		l, err := decode[api.Lease](ctx, resp, err)
		if err == nil {
			return newLease(c, l, sent, !opts.NoAutoRenew), nil
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

// Renew extends the lease with token on key by ttl (0: the lease's own
// TTL), once, without retries. A lease that is no longer live is
// ErrLeaseLost. Leases from Acquire renew themselves; this is for tokens
// kept elsewhere (a shell script's).
func (c *Client) Renew(ctx context.Context, key, token string, ttl time.Duration) (api.Lease, error) {
	body := api.RenewRequest{Token: token}
	if ttl > 0 {
		body.TtlMs = ptr(ttl.Milliseconds())
	}
	resp, err := c.raw.RenewLock(ctx, key, body)
	l, err := decode[api.Lease](ctx, resp, err)
	return l, lostIfNotFound(key, err)
}

// Release gives back one level of the lease with token on key. A lease
// that is no longer live is ErrLeaseLost.
func (c *Client) Release(ctx context.Context, key, token string) (api.ReleaseResult, error) {
	resp, err := c.raw.ReleaseLock(ctx, key, api.ReleaseRequest{Token: token})
	r, err := decode[api.ReleaseResult](ctx, resp, err)
	return r, lostIfNotFound(key, err)
}

// ForceRelease breaks the lease on key, whoever holds it (admin scope).
func (c *Client) ForceRelease(ctx context.Context, key, reason string) (api.ForceReleaseResult, error) {
	body := api.ForceReleaseRequest{}
	if reason != "" {
		body.Reason = &reason
	}
	resp, err := c.raw.ForceReleaseLock(ctx, key, body)
	return decode[api.ForceReleaseResult](ctx, resp, err)
}

// State reads the live lock on key; ErrNotFound when it has none.
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
	p := &api.GetLockHistoryParams{}
	if limit > 0 {
		p.Limit = &limit
	}
	resp, err := c.raw.GetLockHistory(ctx, key, p)
	return decode[api.History](ctx, resp, err)
}

// Renewals returns the key's last renewals (at most limit; 0: the
// server's default), newest first, each with RemainingMs: how much of the
// lease was left when it came. The history itself keeps only lifecycle
// events.
func (c *Client) Renewals(ctx context.Context, key string, limit int) (api.History, error) {
	t := api.Renewed
	p := &api.GetLockHistoryParams{Type: &t}
	if limit > 0 {
		p.Limit = &limit
	}
	resp, err := c.raw.GetLockHistory(ctx, key, p)
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
	if resp.StatusCode == http.StatusOK {
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
	if ae.Problem.Code == api.ProblemCodeLockHeld {
		he := &HeldError{APIError: ae}
		if ae.Problem.Key != nil {
			he.Key = *ae.Problem.Key
		}
		if ae.Problem.Holder != nil {
			he.Holder = *ae.Problem.Holder
		}
		if ae.Problem.RemainingMs != nil {
			he.Remaining = time.Duration(*ae.Problem.RemainingMs) * time.Millisecond
		}
		return he
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
