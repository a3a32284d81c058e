package client

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/lockd/lockd/api"
)

// CampaignOptions is a campaign: who campaigns (Owner: the candidate), the
// leadership's TTL, how long to wait in line (Wait), its Value, a
// LockDelay, an IdempotencyKey and NoAutoRenew, as for Acquire. Mode must
// be empty: an election has one leader.
type CampaignOptions = AcquireOptions

// Campaign waits in line (up to opts.Wait) to lead the election name, and
// returns the leadership as a Lease: its Fence is the term, strictly
// increasing per election; it renews itself every ttl/3 and is lost as a
// lock's lease is (Lost, Err, Context). Release resigns. Another leader
// after the wait is ErrHeld, earlier candidates ErrQueued.
func (c *Client) Campaign(ctx context.Context, name string, opts CampaignOptions) (*Lease, error) {
	if opts.Mode != "" && opts.Mode != Exclusive {
		return nil, fmt.Errorf("%w: mode %q: an election has one leader", ErrInvalid, opts.Mode)
	}
	return c.acquire(ctx, electionKind, opts, func(ctx context.Context, p acquireParams) (*http.Response, error) {
		body := api.CampaignRequest{Candidate: p.owner, TtlMs: p.ttlMs, WaitMs: p.waitMs, Session: p.session}
		if opts.LockDelay > 0 {
			body.LockDelayMs = ptr(opts.LockDelay.Milliseconds())
		}
		if opts.Value != nil {
			body.Value = &opts.Value
		}
		return c.raw.Campaign(ctx, name, &api.CampaignParams{IdempotencyKey: p.idem}, body)
	})
}

// Proclaim sets the leader's value without giving up the leadership (it
// renews it too); observers get a "proclaimed" event. A lease that no
// longer leads is ErrLeaseLost.
func (l *Lease) Proclaim(ctx context.Context, value json.RawMessage) error {
	if l.kind != electionKind {
		return fmt.Errorf("%w: proclaim is for a leadership (Campaign), not a lock or a permit", ErrInvalid)
	}
	resp, err := l.c.raw.Proclaim(ctx, l.key, api.ProclaimRequest{Token: l.token, Value: value, Proof: nonEmpty(l.Proof())})
	ld, err := decode[api.Leadership](ctx, resp, err)
	if err != nil {
		return lostIfNotFound(l.key, err)
	}
	if ld.Proof != nil {
		l.mu.Lock()
		l.info.Proof = ld.Proof
		l.mu.Unlock()
	}
	return nil
}

// Handover gives up a leadership to the candidate to, who leads next
// ahead of earlier candidates. When to is not campaigning the error wraps
// ErrNotCandidate and this lease still leads (and renews). After a
// handover the lease is done, as after Release.
func (l *Lease) Handover(ctx context.Context, to string) error {
	if l.kind != electionKind {
		return fmt.Errorf("%w: handover is for a leadership (Campaign), not a lock or a permit", ErrInvalid)
	}
	if err := l.Err(); err != nil {
		return err
	}
	resp, err := l.c.raw.Handover(ctx, l.key, api.HandoverRequest{Token: l.token, To: to})
	if _, err = decode[api.ResignResult](ctx, resp, err); err != nil {
		return lostIfNotFound(l.key, err)
	}
	l.Abandon() // the leadership is the candidate's now: stop renewing
	return nil
}

// Leader reads who leads the election name, with its value, term and the
// candidates in line; nobody leading is ErrNotFound.
func (c *Client) Leader(ctx context.Context, name string) (api.ElectionState, error) {
	resp, err := c.raw.GetElection(ctx, name)
	return decode[api.ElectionState](ctx, resp, err)
}

// ElectionEvent is one change an observer is told of: Event is "leader"
// (a new term, or the current leader when observing starts), "proclaimed"
// (the leader's new value) or "vacant" (nobody leads).
type ElectionEvent struct {
	Event  string
	Change api.ElectionChange
}

// Observe follows the election name: the current leader (or vacant) at
// once, then every change, on the returned channel, until ctx ends or the
// stream does (the channel is closed then; observe again to go on: the
// first event says where things stand).
func (c *Client) Observe(ctx context.Context, name string) (<-chan ElectionEvent, error) {
	resp, err := c.raw.ObserveElection(ctx, name)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if resp.StatusCode != http.StatusOK {
		_, err := decode[struct{}](ctx, resp, nil)
		return nil, err
	}
	out := make(chan ElectionEvent, 16)
	go func() {
		defer close(out)
		defer resp.Body.Close()
		readObserved(ctx, bufio.NewScanner(resp.Body), out)
	}()
	return out, nil
}

// readObserved sends each event of an observe stream to out until the
// stream or ctx ends.
func readObserved(ctx context.Context, sc *bufio.Scanner, out chan<- ElectionEvent) {
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	var ev ElectionEvent
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "" && ev.Event != "":
			select {
			case out <- ev:
			case <-ctx.Done():
				return
			}
			ev = ElectionEvent{}
		case strings.HasPrefix(line, "event: "):
			ev.Event = line[len("event: "):]
		case strings.HasPrefix(line, "data: "):
			_ = json.Unmarshal([]byte(line[len("data: "):]), &ev.Change)
		}
	}
}

// leaseOf is a leadership as the lease it is: the leader is its owner, the
// term its fence.
func leaseOf(ld api.Leadership) api.Lease {
	return api.Lease{
		Key: ld.Key, Owner: ld.Leader, Token: ld.Token, Fence: ld.Term, Count: 1, Mode: api.GrantModeExclusive,
		TtlMs: ld.TtlMs, AcquiredAt: ld.AcquiredAt, ExpiresAt: ld.ExpiresAt, Replayed: ld.Replayed, Proof: ld.Proof,
	}
}

// ElectionHistory returns the election's last events (at most limit; 0:
// the server's default), newest first: terms begun, resigned, lapsed,
// broken, and proclaimed values.
func (c *Client) ElectionHistory(ctx context.Context, name string, limit int) (api.History, error) {
	return c.history(ctx, electionKind, name, limit, nil)
}
