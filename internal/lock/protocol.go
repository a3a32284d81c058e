package lock

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The scripts' protocol: one Go type per script call, its fields in the
// order of the script's header (KEYS, then ARGV), so that a reader holds
// one call in their head and TestScriptHeaders holds each type to its
// script. The engine's settings (caps, retention, liveness) are in the
// scripts' text (their cfg, scriptConfig), not arguments; the replica
// id comes from node.arg; the rest is the request's.
//
// A call's arguments come in two parts: those every call sends, then
// those a call may leave empty, which it leaves off the end (trimmed):
// each argument costs Redis some 800 instructions, and most calls leave
// most of the second part empty. A script reads an argument past the end
// as "" (or 0).

// acquireCall is acquire.lua's call: its KEYS, then its ARGV, each field
// in its place and under the script's name for it (ttlMS is ttl_ms):
// TestScriptHeaders holds the two to one another, name by name.
type acquireCall struct {
	lease, hist, queue, epoch, sched, stream, qinfo, holders, replicas string

	token     string // the new lease's, the same on every try of one waiter
	owner     string
	ttlMS     int64
	actor     string
	channel   string // the key's wake-up channel
	intent    intent
	mode      string // "x", "s" or "p" (modeOf)
	seen      string // the epoch id this process saw last (epochArgs)
	replica   string // this process's id in the queues
	epochArgs string // "min_ms new_id" (epochArgs)
	// Each "" when left off the end.
	trace    string // the request's trace id (trace.go)
	named    string // "1": the caller named its mode or a limit (named)
	reentry  string // the holder's token for a re-entry
	idem     string // the idempotency tag
	limit    int
	waiter   string // the waiter's queue id; "" for a try-once request
	deadline int64  // ms from now
	place    string // the waiter's place from an earlier try
	delay    string // the lock-delay in ms
	value    string // the grant's value (JSON)
	session  string // the handle of the session it is bound to
	hold     string // the hold window in ms (min_hold_ms)
}

// acquireCallOf is the call of a try on key: its keys, and the node's
// part of its arguments.
func (n *node) acquireCallOf(key string, sh *sharedKeys) acquireCall {
	k := keysOf(key)
	seen, least := n.epochArgs(sh)
	return acquireCall{lease: k.lease, hist: k.hist, queue: k.queue, epoch: sh.epoch, sched: sh.expiries, stream: sh.events,
		qinfo: k.qinfo, holders: k.holders, replicas: sh.replicas, channel: k.wake, seen: seen, replica: n.id,
		epochArgs: strconv.FormatInt(least, 10) + " " + n.newEpochID()}
}

func (c acquireCall) run(*node) ([]string, []any) {
	keys, argv := c.args()
	return keys, trimmed(argv)
}

// args is the whole call, nothing trimmed.
func (c acquireCall) args() ([]string, []any) {
	limit, deadline := "", ""
	if c.limit != 0 {
		limit = strconv.Itoa(c.limit)
	}
	if c.waiter != "" {
		deadline = strconv.FormatInt(c.deadline, 10)
	}
	return []string{c.lease, c.hist, c.queue, c.epoch, c.sched, c.stream, c.qinfo, c.holders, c.replicas},
		[]any{c.token, c.owner, c.ttlMS, c.actor, c.channel, string(c.intent), c.mode, c.seen, c.replica, c.epochArgs,
			c.trace, c.named, c.reentry, c.idem, limit, c.waiter, deadline, c.place, c.delay, c.value, c.session, c.hold}
}

// trimmed is argv without the empty strings at its end.
func trimmed(argv []any) []any {
	n := len(argv)
	for n > 0 && argv[n-1] == "" {
		n--
	}
	return argv[:n]
}

// renewCall is renew.lua's call, as acquireCall is acquire.lua's.
type renewCall struct {
	lease, renewals, queue, sched, hist, holders, stream string

	token   string
	ttlMS   string // ms, or "" to keep the lease's own
	actor   string
	channel string // the key's wake-up channel
	// Each "" when left off the end.
	trace string
	value string // a new value (JSON), or "" to keep the grant's own
	// bySession "1": the grant's session renews it, the only renewal that
	// moves a session-bound grant's expiry; renewBySet: its lock set
	// renews it, the only other renewal a key of a set takes.
	bySession string
}

func renewCallOf(key string, sh *sharedKeys) renewCall {
	k := keysOf(key)
	return renewCall{lease: k.lease, renewals: k.renewals, queue: k.queue, sched: sh.expiries, hist: k.hist,
		holders: k.holders, stream: sh.events, channel: k.wake}
}

func (c renewCall) run() ([]string, []any) {
	keys, argv := c.args()
	return keys, trimmed(argv)
}

// args is the whole call, nothing trimmed.
func (c renewCall) args() ([]string, []any) {
	return []string{c.lease, c.renewals, c.queue, c.sched, c.hist, c.holders, c.stream},
		[]any{c.token, c.ttlMS, c.actor, c.channel, c.trace, c.value, c.bySession}
}

// releaseCall is release.lua's call, as acquireCall is acquire.lua's.
type releaseCall struct {
	lease, hist, sched, stream, holders, queue, qinfo, replicas string

	token   string
	actor   string
	channel string // the key's wake-up channel
	// Each "" when left off the end.
	handTo    string // this process's id: hand the key to its next waiter if it waits here
	trace     string
	unclaimed string // releaseKind
	to        string // an election's handover: the candidate that leads next
}

func releaseCallOf(key string, sh *sharedKeys) releaseCall {
	k := keysOf(key)
	return releaseCall{lease: k.lease, hist: k.hist, sched: sh.expiries, stream: sh.events, holders: k.holders,
		queue: k.queue, qinfo: k.qinfo, replicas: sh.replicas, channel: k.wake}
}

func (c releaseCall) run() ([]string, []any) {
	keys, argv := c.args()
	return keys, trimmed(argv)
}

// args is the whole call, nothing trimmed.
func (c releaseCall) args() ([]string, []any) {
	return []string{c.lease, c.hist, c.sched, c.stream, c.holders, c.queue, c.qinfo, c.replicas},
		[]any{c.token, c.actor, c.channel, c.handTo, c.trace, c.unclaimed, c.to}
}

// forceReleaseCall is force_release.lua's call, as acquireCall is
// acquire.lua's. It is sent whole.
type forceReleaseCall struct {
	lease, hist, sched, stream, holders string

	actor   string
	reason  string
	channel string // the key's wake-up channel
	fence   string // the fence to break, or "" for every holder
	trace   string
	op      string // "request": ask the holder to step aside (RequestRelease)
	by      string // who asks, with op "request"
}

func forceReleaseCallOf(key string, sh *sharedKeys) forceReleaseCall {
	k := keysOf(key)
	return forceReleaseCall{lease: k.lease, hist: k.hist, sched: sh.expiries, stream: sh.events, holders: k.holders,
		channel: k.wake}
}

func (c forceReleaseCall) args() ([]string, []any) {
	return []string{c.lease, c.hist, c.sched, c.stream, c.holders},
		[]any{c.actor, c.reason, c.channel, c.fence, c.trace, c.op, c.by}
}

// historyCall is history.lua's call: its fields are the names the script
// reads KEYS and ARGV under, in their places (TestCallNames).
type historyCall struct {
	lease, hist, sched, stream string
	read                       string // the list to read: the history, or the renewals
	holders                    string

	count int // how many events at most
}

func historyCallOf(key string, sh *sharedKeys, renewals bool, count int) historyCall {
	k := keysOf(key)
	read := k.hist
	if renewals {
		read = k.renewals
	}
	return historyCall{lease: k.lease, hist: k.hist, sched: sh.expiries, stream: sh.events, read: read,
		holders: k.holders, count: count}
}

func (c historyCall) args() ([]string, []any) {
	return []string{c.lease, c.hist, c.sched, c.stream, c.read, c.holders}, []any{c.count}
}

// Replies: one Go type per reply shape of a script's header, each read by
// one decode function, so that the engine names fields, never indexes.

// grantReply is a lease as acquire.lua and renew.lua answer it, written
// by one Lua function (grant_reply, scripts/lib/base.lua): {status, owner,
// token, fence, count, ttl_ms, acquired_at_ms, pttl_ms, now_ms, epoch_id
// or "", mode, limit}. The mode and limit are the lease's as Redis holds
// it, never the request's.
type grantReply struct {
	status     string
	owner      string
	token      string
	fence      int64
	count      int
	ttl        time.Duration
	acquiredAt time.Time
	left       time.Duration // the lease's PTTL
	now        time.Time
	epoch      string // the epoch marker's id on a fresh grant, else ""
	mode       Mode
	limit      int
}

func (g grantReply) lease(key string) Lease {
	return Lease{
		Resource: resourceOf(key), Owner: g.owner, Token: g.token, Fence: g.fence, Count: g.count, TTL: g.ttl,
		AcquiredAt: g.acquiredAt, ExpiresAt: g.now.Add(g.left), Mode: g.mode, Limit: g.limit,
	}
}

func readGrant(r *reply) grantReply {
	return grantReply{
		status: r.str(0), owner: r.str(1), token: r.str(2), fence: r.int(3), count: int(r.int(4)),
		ttl: r.ms(5), acquiredAt: r.time(6), left: r.ms(7), now: r.time(8),
		epoch: r.str(9), mode: modeOf(r.str(10)), limit: int(r.int(11)),
	}
}

// acquireAnswer is the caller's answer to one reply of acquire.lua, read.
type acquireAnswer func(ctx context.Context, n *node, t acquireTry) (Lease, error)

// acquireStatuses has one row per status of acquire.lua's reply (its
// header lists them): what follows the status, read from r, and the
// caller's answer. c is the call that got the reply.
var acquireStatuses = map[string]func(r *reply, c acquireCall) acquireAnswer{
	// {"new", fence, now_ms, epoch_id}: a fresh exclusive grant of what c
	// asked, as Redis wrote it: the script sends only what c does not know.
	"new": func(r *reply, c acquireCall) acquireAnswer {
		ttl, now := time.Duration(c.ttlMS)*time.Millisecond, r.time(2)
		g := grantReply{status: "granted", owner: c.owner, token: c.token, fence: r.int(1), count: 1, ttl: ttl,
			acquiredAt: now, left: ttl, now: now, epoch: r.str(3), mode: Exclusive}
		return func(ctx context.Context, n *node, t acquireTry) (Lease, error) { return n.granted(ctx, t, g, Granted) }
	},
	"granted":   grantAs(Granted),
	"reentered": grantAs(Reentered),
	"idempotent": func(r *reply, _ acquireCall) acquireAnswer {
		g := readGrant(r)
		return func(_ context.Context, _ *node, t acquireTry) (Lease, error) {
			l := g.lease(t.key)
			l.Outcome = Replayed
			return l, nil
		}
	},
	// {"held", owner, retry_ms, epoch_id or "", place or ""[, set mark]}
	"held": func(r *reply, _ acquireCall) acquireAnswer {
		owner, retry, epoch, place, mark := r.str(1), r.ms(2), r.str(3), r.str(4), markOf(r, 5)
		return func(ctx context.Context, n *node, t acquireTry) (Lease, error) {
			n.waits(t, epoch, place)
			he := &HeldError{Resource: resourceOf(t.key), Owner: owner, Remaining: retry}
			if mark != "" {
				return Lease{}, n.heldByGathering(ctx, he, mark)
			}
			return Lease{}, he
		}
	},
	// {"min_hold", owner, retry_ms, epoch_id or "", place or ""}: released
	// inside its hold window, the key kept by nobody.
	"min_hold": func(r *reply, _ acquireCall) acquireAnswer {
		owner, retry, epoch, place := r.str(1), r.ms(2), r.str(3), r.str(4)
		return func(_ context.Context, n *node, t acquireTry) (Lease, error) {
			n.waits(t, epoch, place)
			return Lease{}, &MinHoldError{Resource: resourceOf(t.key), Owner: owner, Remaining: retry}
		}
	},
	// {"queued", next owner or "", retry_ms, epoch_id or "", place or "",
	// waiters, next's since_ms}
	"queued": func(r *reply, _ acquireCall) acquireAnswer {
		owner, retry, epoch, place, waiters, since := r.str(1), r.ms(2), r.str(3), r.str(4), int(r.int(5)), r.time(6)
		return func(_ context.Context, n *node, t acquireTry) (Lease, error) {
			n.waits(t, epoch, place)
			qe := &QueuedError{Resource: resourceOf(t.key), Waiters: waiters, RetryAfter: min(retry, queuedRetry)}
			if owner != "" {
				qe.Next = Waiter{Owner: owner, Since: since}
			}
			return Lease{}, qe
		}
	},
	// {"recovering", epoch_id, ms_left}
	"recovering": func(r *reply, _ acquireCall) acquireAnswer {
		epoch, left := r.str(1), r.ms(2)
		return func(_ context.Context, n *node, t acquireTry) (Lease, error) {
			n.saw(t.sh, epoch)
			n.epochs.recovering(left)
			return Lease{}, &RecoveringError{Remaining: left}
		}
	},
	// {"delay", epoch_id, ms_left, place or ""}
	"delay": func(r *reply, _ acquireCall) acquireAnswer {
		epoch, left, place := r.str(1), r.ms(2), r.str(3)
		return func(_ context.Context, n *node, t acquireTry) (Lease, error) {
			n.epochs.met(t.sh, epoch)
			if t.en != nil {
				t.en.setPlace(place)
			}
			return Lease{}, &DelayError{Resource: resourceOf(t.key), Remaining: left}
		}
	},
	// {"full", n}
	"full": func(r *reply, _ acquireCall) acquireAnswer {
		return refuse(&TooManyHoldersError{Holders: int(r.int(1))})
	},
	// {"mode", the lease's mode}
	"mode": func(r *reply, c acquireCall) acquireAnswer {
		return refuse(&ModeMismatchError{Held: modeOf(r.str(1)), Asked: modeOf(c.mode)})
	},
	// {"in_set", n}: a re-entry with the token of a lock set of n keys.
	"in_set":   func(r *reply, _ acquireCall) acquireAnswer { return refuse(inSet(r)) },
	"lost":     func(*reply, acquireCall) acquireAnswer { return refuse(ErrLeaseLost) },
	"mismatch": func(*reply, acquireCall) acquireAnswer { return refuse(ErrIdempotencyMismatch) },
	"limit":    func(*reply, acquireCall) acquireAnswer { return refuse(ErrLimitMismatch) },
	"free":     func(*reply, acquireCall) acquireAnswer { return refuse(errFree) },
	"ended":    func(*reply, acquireCall) acquireAnswer { return refuse(errEnded) },
}

// grantAs is the row of a grant reply (grant_reply) answered as o.
func grantAs(o Outcome) func(r *reply, c acquireCall) acquireAnswer {
	return func(r *reply, _ acquireCall) acquireAnswer {
		g := readGrant(r)
		return func(ctx context.Context, n *node, t acquireTry) (Lease, error) { return n.granted(ctx, t, g, o) }
	}
}

// refuse is an answer that is err whatever the try.
func refuse(err error) acquireAnswer {
	return func(context.Context, *node, acquireTry) (Lease, error) { return Lease{}, err }
}

// decodeRenew reads renew.lua's reply: a grant, as acquire.lua's, and
// the request that the holder step aside, when one was made.
func decodeRenew(v any) (grantReply, *ReleaseRequest, error) {
	r, err := newReply(v)
	if err != nil {
		return grantReply{}, nil, err
	}
	if r.str(0) == "in_set" {
		return grantReply{}, nil, inSet(r)
	}
	if err := statusErr(r.str(0)); err != nil {
		return grantReply{}, nil, err
	}
	g := readGrant(r)
	var rq *ReleaseRequest
	if r.len() > 12 {
		rq = releaseRequestOf(r.str(12))
	}
	return g, rq, r.err
}

// releaseRequestOf reads a lease's release request (exclusive.lua's rq:
// at_ms RS by RS reason), nil for none.
func releaseRequestOf(s string) *ReleaseRequest {
	at, rest, ok := strings.Cut(s, "\x1e")
	if !ok {
		return nil
	}
	by, reason, _ := strings.Cut(rest, "\x1e")
	ms, err := strconv.ParseInt(at, 10, 64)
	if err != nil {
		return nil
	}
	return &ReleaseRequest{By: by, Reason: reason, At: time.UnixMilli(ms).UTC()}
}

// decodeRequest reads force_release.lua's reply to op "request".
func decodeRequest(v any) (RequestedRelease, error) {
	r, err := newReply(v)
	if err != nil {
		return RequestedRelease{}, err
	}
	if r.str(0) == "mode" {
		return RequestedRelease{}, ErrNotExclusive
	}
	if err := statusErr(r.str(0)); err != nil {
		return RequestedRelease{}, err
	}
	return RequestedRelease{Owner: r.str(1), Fence: r.int(2), At: r.time(3)}, r.err
}

// releaseReply is release.lua's reply.
type releaseReply struct {
	status     string // ok, or claimed (a give-back the waiter beat)
	count      int    // re-entry levels left
	acquiredAt time.Time
	// The next waiter, of this lockd, that the key went to; nil if none.
	handoff *struct {
		waiter, owner, token string
		fence                int64
		ttl                  time.Duration
		at                   time.Time
	}
}

func decodeRelease(v any) (releaseReply, error) {
	r, err := newReply(v)
	if err != nil {
		return releaseReply{}, err
	}
	out := releaseReply{status: r.str(0)}
	switch out.status {
	case "claimed":
		return out, nil
	case "in_set":
		return releaseReply{}, inSet(r)
	}
	if err := statusErr(out.status); err != nil {
		return releaseReply{}, err
	}
	out.count = int(r.int(1))
	if r.len() > 2 {
		out.acquiredAt = r.time(2)
	}
	if r.len() > 8 {
		out.handoff = &struct {
			waiter, owner, token string
			fence                int64
			ttl                  time.Duration
			at                   time.Time
		}{r.str(3), r.str(4), r.str(5), r.int(6), r.ms(7), r.time(8)}
	}
	return out, r.err
}

// forceReply is force_release.lua's reply: the newest holder broken, and
// whether holders are left that the call did not reach.
type forceReply struct {
	owner      string
	fence      int64
	acquiredAt time.Time
	more       bool
}

func decodeForce(v any) (forceReply, error) {
	r, err := newReply(v)
	if err != nil {
		return forceReply{}, err
	}
	if err := statusErr(r.str(0)); err != nil {
		return forceReply{}, err
	}
	out := forceReply{owner: r.str(1), fence: r.int(2)}
	if r.len() > 3 {
		out.acquiredAt = r.time(3)
	}
	out.more = r.len() > 4 && r.int(4) == 1
	return out, r.err
}

// statusErr is the error of a status that is neither "ok" nor a reply
// shape of its own.
func statusErr(status string) error {
	switch status {
	case "ok":
		return nil
	case "not_found":
		return ErrNotFound
	case "not_candidate":
		return ErrNotCandidate
	case "lost":
		return ErrLeaseLost
	default:
		return fmt.Errorf("lock: script said %q", status)
	}
}
