package lock

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockd/lockd/internal/lock/store"
	"github.com/lockd/lockd/internal/lock/wait"
)

// node runs lockd's scripts on one Redis topology (one server, Sentinel or
// Cluster): each operation is one script call, or one pipeline of them, and
// one decode of its reply. The Engine is one node; Redlock is one node per
// master and decides by quorum over their answers.
//
// A node keeps what its calls need from one call to the next: what this
// process knows of the epoch markers (epoch.go), the sweeper's map of a
// Cluster's buckets and the buckets it wrote to (expiry.go), the list
// cursors' cipher (list.go), the count of missed replica acks. It starts
// nothing that outlives a call: its owner runs the epoch refresher
// (keepEpochs) and the sweeper (sweep) on it, and keeps the wait hub,
// which listens through subscribe.
type node struct {
	st      *store.Store
	opts    Options // with the defaults
	scripts scripts
	id      string // this process, in the queues and sweeper leases in Redis
	arg     args

	shared     [1]*sharedKeys               // one server or Sentinel: the one bucket
	slotShared []atomic.Pointer[sharedKeys] // Cluster: per slot, made when first used

	epochs epochs
	ledger ledger // the live leases this process granted or renewed (restore.go)
	// restoredSum counts what restoreBucket put back since the start.
	restoredMu  sync.Mutex
	restoredSum Restored
	sweeper     sweeper
	cursorKey   cursorKey // the list cursors' cipher (list.go)
	missedAcks  atomic.Int64
	// later gives back, in the background, a grant whose give-back got no
	// answer (giveback.go); nil: nobody does (a Redlock master's node).
	later func(key string, gb giveBackOf)
}

// newNode returns a node on st; opts has its defaults.
func newNode(st *store.Store, opts Options) *node {
	sc, fns := loadScripts(st.Sharded(), scriptConfigOf(opts))
	st.UseFunctions(fns)
	n := &node{st: st, opts: opts, scripts: sc}
	var id [8]byte
	_, _ = rand.Read(id[:])
	n.epochs.seed = hex.EncodeToString(id[:])
	n.epochs.kick = make(chan struct{}, 1)
	n.id = hex.EncodeToString(id[:])
	n.arg = args{
		historyMax:  opts.HistoryMax,
		retention:   opts.Retention.Milliseconds(),
		eventsMax:   opts.EventsMax,
		renewalsMax: opts.RenewalsMax,
		replica:     n.id,
		alive:       aliveFor.Milliseconds(),
		queueTTL:    (opts.MaxWait + time.Minute).Milliseconds(),
	}
	if st.Sharded() {
		n.slotShared = make([]atomic.Pointer[sharedKeys], store.Slots)
	} else {
		n.shared[0] = newShared("")
	}
	return n
}

// loadFunctions loads the function library, before the first call needs
// it (a call that finds it missing loads it too).
func (n *node) loadFunctions() {
	ctx, cancel := context.WithTimeout(context.Background(), n.opts.CallTimeout)
	defer cancel()
	_ = n.st.LoadFunctions(ctx)
}

// subscribe opens the wake-up subscription of a wait hub on this node.
func (n *node) subscribe(l wait.Listener) wait.Subscription {
	return n.st.Subscribe(wakeChannels, l)
}

// close stops the store's own work; later calls answer ErrClosed.
func (n *node) close() { n.st.Close() }

// ping checks that Redis answers.
func (n *node) ping(ctx context.Context) error {
	ctx, cancel := n.bound(ctx)
	defer cancel()
	return wrap("ping", n.st.Ping(ctx))
}

// intent is what a try does with a free key: take it (grantFree), or only
// look (peek: re-entry, idempotent replay, holder) and leave it to the
// waiters queued before the caller (Redlock, whose queues live in each
// process). acquire.lua's call names it the same.
type intent string

const (
	grantFree intent = "grant"
	peek      intent = "peek"
)

// errFree is a peek's answer when the key is free.
var errFree = errors.New("lock: key is free")

// errEnded answers a try of a waiter whose wait had ended when Redis ran
// it (scripts/lib/queue.lua, queue.ended): only a try that went
// unanswered, run late, meets it, and its caller has its answer already.
var errEnded = fmt.Errorf("lock: a try of a wait that had ended: %w", ErrUnavailable)

// try runs the acquire script once. mode is the script's mode ("x", "s"
// or "p", modeArg); en is the caller's place in the key's queue, nil for a
// request that does not wait.
func (n *node) try(ctx context.Context, key string, req AcquireRequest, token, mode string, i intent, en *entry) (Lease, error) {
	ctx, cancel := n.bound(ctx)
	defer cancel()
	idem := ""
	if req.IdempotencyKey != "" {
		sum := sha256.Sum256([]byte(req.Actor + "\x00" + req.IdempotencyKey))
		idem = hex.EncodeToString(sum[:])
	}
	sh := n.sharedOf(key)
	c := n.acquireCallOf(key, sh)
	c.token, c.owner, c.ttlMS, c.actor, c.intent, c.mode = token, packable(req.Owner), req.TTL.Milliseconds(), packable(req.Actor), i, mode
	c.trace, c.named, c.reentry, c.idem, c.limit = traceOf(ctx), named(req), req.Token, idem, req.Limit
	if en != nil {
		c.waiter, c.place, c.deadline = en.id, en.place(), (en.wait + entrySlack).Milliseconds()
	}
	c.delay, c.value, c.session, c.hold = delayArg(req.LockDelay), req.Value, req.sessionHandle, delayArg(req.MinHold)
	keys, argv := c.run(n)
	sent := time.Now()
	v, err := n.write(ctx, n.scripts.acquire, keys, argv...)
	unacked := errors.Is(err, errNoAcks)
	if err != nil && !unacked {
		return Lease{}, wrap("acquire", err)
	}
	r, err := newReply(v)
	if err != nil {
		return Lease{}, err
	}
	status := acquireStatuses[r.str(0)]
	if status == nil {
		return Lease{}, fmt.Errorf("lock: acquire script said %q", r.str(0))
	}
	a := status(r, c)
	if r.err != nil {
		return Lease{}, r.err
	}
	return a(ctx, n, acquireTry{key: key, req: req, en: en, sh: sh, unacked: unacked, sent: sent})
}

// acquireTry is what an answer of acquire.lua needs of the try that got it.
type acquireTry struct {
	key     string
	req     AcquireRequest
	en      *entry
	sh      *sharedKeys
	unacked bool      // too few replicas acknowledged the write
	sent    time.Time // when the try was sent
}

// granted answers a fresh grant or a re-entry, noting the epoch it names;
// a grant too few replicas acknowledged is given back (one level of a
// re-entry): a failover now could lose it while its holder works.
func (n *node) granted(ctx context.Context, t acquireTry, g grantReply, o Outcome) (Lease, error) {
	if t.unacked {
		if _, err := n.releaseAs(context.WithoutCancel(ctx), t.key, g.token, t.req.Actor, givenBack, nil); err != nil && n.later != nil &&
			unanswered(err) {
			// A failover cut the give-back: the grant may still be there.
			n.later(t.key, giveBackOf{token: g.token, actor: t.req.Actor, ttl: g.ttl, kind: givenBack})
		}
		return Lease{}, wrap("acquire", errNoAcks)
	}
	n.noted(t.key)
	l := g.lease(t.key)
	l.Outcome = o
	if g.epoch != "" {
		n.saw(t.sh, g.epoch)
	}
	n.epochs.lease(t.sh, g.left)
	n.ledger.note(t.key, l, g.left, t.req, t.sent)
	return l, nil
}

// waits notes what a refusal that may be waited out says of the epoch
// and of the waiter's place.
func (n *node) waits(t acquireTry, epoch, place string) {
	if epoch != "" {
		n.epochs.met(t.sh, epoch)
	}
	if t.en != nil {
		t.en.setPlace(place)
	}
}

// modeOf is the Mode of the scripts' mode (modeArg).
func modeOf(mode string) Mode {
	switch mode {
	case "s":
		return Shared
	case "p":
		return Permit
	default:
		return Exclusive
	}
}

// errNoAcks is a write that fewer replicas acknowledged than asked for.
var errNoAcks = fmt.Errorf("%w: too few replicas acknowledged the write", ErrUnavailable)

// write runs a script that may write. With replica acks on, a write that
// too few replicas acknowledged is an error: the reply comes back with it,
// so that a grant can be undone.
func (n *node) write(ctx context.Context, s *redis.Script, keys []string, args ...any) (any, error) {
	if n.opts.ReplicaAcks <= 0 {
		return n.st.Run(ctx, s, keys, args...)
	}
	v, acks, err := n.st.RunAcked(ctx, s, n.opts.ReplicaAcks, n.opts.ReplicaAckTimeout, keys, args...)
	if err == nil && acks < n.opts.ReplicaAcks {
		n.missedAcks.Add(1)
		return v, errNoAcks
	}
	return v, err
}

// bound gives one node call its overall deadline, so that dialling,
// waiting for a pooled connection and the round trip together answer
// ErrUnavailable in about 2 s when Redis does not.
func (n *node) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, n.opts.CallTimeout)
}

// named says whether req names its mode (or a semaphore's limit), so that
// a re-entry or replay must match the lease's: without one, it takes the
// lease as it is.
func named(req AcquireRequest) string {
	if req.Mode != "" || req.Limit > 0 {
		return "1"
	}
	return ""
}

// delayArg is acquire.lua's lock-delay or hold window argument: ms, or ""
// for none.
func delayArg(d time.Duration) string {
	if d <= 0 {
		return ""
	}
	return strconv.FormatInt(max(1, d.Milliseconds()), 10)
}

// renewBy runs renew.lua: the lease's expiry becomes now + req.TTL (0:
// the lease's own TTL), and req.Value, if any, replaces the grant's value.
// A grant bound to a session keeps its expiry unless bySession (the
// session's own renewal).
func (n *node) renewBy(ctx context.Context, key string, req RenewRequest, bySession bool) (Lease, error) {
	by := ""
	if bySession {
		by = "1"
	}
	return n.renewAs(ctx, key, req, by)
}

// renewBySet is renew.lua's by_session for a lock set's renewal of its
// keys, which a lone renewal cannot renew.
const renewBySet = "set"

// renewAs is renewBy with renew.lua's by_session: "", "1" (the session)
// or renewBySet.
func (n *node) renewAs(ctx context.Context, key string, req RenewRequest, by string) (Lease, error) {
	ttlArg := ""
	if req.TTL > 0 {
		ttlArg = strconv.FormatInt(req.TTL.Milliseconds(), 10)
	}
	ctx, cancel := n.bound(ctx)
	defer cancel()
	sh := n.sharedOf(key)
	c := renewCallOf(key, sh)
	c.token, c.ttlMS, c.actor, c.trace, c.value, c.bySession = req.Token, ttlArg, packable(req.Actor), traceOf(ctx), req.Value, by
	keys, argv := c.run()
	sent := time.Now()
	v, err := n.write(ctx, n.scripts.renew, keys, argv...)
	if err != nil {
		return Lease{}, wrap("renew", err)
	}
	g, rq, err := decodeRenew(v)
	if err != nil {
		return Lease{}, err
	}
	n.epochs.lease(sh, g.left)
	l := g.lease(key)
	n.ledger.renewed(key, l, g.left, req.Value, sent)
	l.ReleaseRequested = rq
	return l, nil
}

// releaseKind is whose release release.lua makes (its unclaimed).
type releaseKind string

const (
	// byHolder is the holder's own: a hold window stays
	// (scripts/lib/exclusive.lua, keep_window).
	byHolder releaseKind = ""
	// givenBack is a grant whose caller never had it (it left, or the
	// grant went unacknowledged or unanswered): no hold window stays.
	givenBack releaseKind = "back"
	// unclaimedHandOff gives back a key handed to a waiter only if the
	// waiter has not claimed it; no hold window stays either.
	unclaimedHandOff releaseKind = "unclaimed"
	// bySet is a lock set's release (or give-back) of its keys: a key of
	// a set takes no other (scripts/lib/exclusive.lua, release).
	bySet releaseKind = "set"
)

// handed is a lease that a release gave to the next waiter, of this process.
type handed struct {
	waiter string
	actor  string
	lease  Lease
}

// releaseTo gives back one level of the lease. When the key went to the
// next waiter, of this process, take hands it over; should take refuse
// (the waiter has gone meanwhile) or be nil, the key is given back, and may
// go to the next one, unless the waiter's own try took it in the meantime.
func (n *node) releaseTo(ctx context.Context, key, token, actor string, take func(*handed) bool) (Released, error) {
	return n.releaseAs(ctx, key, token, actor, byHolder, take)
}

// releaseAs is releaseTo, a release of the kind kind (a give-back, or a
// key handed to a waiter that goes back only if the waiter has not
// claimed it).
func (n *node) releaseAs(ctx context.Context, key, token, actor string, kind releaseKind, take func(*handed) bool) (Released, error) {
	out, next, err := n.release(ctx, key, token, actor, kind)
	for next != nil && (take == nil || !take(next)) {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), n.opts.CallTimeout)
		h := next
		var gerr error
		_, next, gerr = n.release(rctx, key, h.lease.Token, h.actor, unclaimedHandOff)
		cancel()
		if gerr != nil && unanswered(gerr) && n.later != nil {
			// The key handed to a waiter that had gone stays handed, for
			// its TTL, unless it goes back: a 409 answered that waiter.
			n.later(key, giveBackOf{token: h.lease.Token, actor: h.actor, ttl: h.lease.TTL, kind: unclaimedHandOff})
		}
	}
	return out, err
}

// release runs release.lua, a release of the kind kind.
func (n *node) release(ctx context.Context, key, token, actor string, kind releaseKind) (Released, *handed, error) {
	ctx, cancel := n.bound(ctx)
	defer cancel()
	sh := n.sharedOf(key)
	// With replica acks a grant must be acknowledged before its holder
	// hears of it: no hand-off then.
	c := releaseCallOf(key, sh)
	c.token, c.actor, c.trace, c.unclaimed = token, packable(actor), traceOf(ctx), string(kind)
	if n.opts.ReplicaAcks == 0 {
		c.handTo = n.id
	}
	return n.runRelease(ctx, key, sh, c, actor)
}

// handover runs release.lua with to: the leader's release hands the key to
// the candidate to first (ErrNotCandidate when it is not waiting).
func (n *node) handover(ctx context.Context, key, token, to, actor string) (Released, *handed, error) {
	ctx, cancel := n.bound(ctx)
	defer cancel()
	sh := n.sharedOf(key)
	c := releaseCallOf(key, sh)
	c.token, c.actor, c.trace, c.to = token, packable(actor), traceOf(ctx), packable(to)
	if n.opts.ReplicaAcks == 0 {
		c.handTo = n.id
	}
	return n.runRelease(ctx, key, sh, c, actor)
}

// runRelease runs the release call c and reads its answer.
func (n *node) runRelease(ctx context.Context, key string, sh *sharedKeys, c releaseCall, actor string) (Released, *handed, error) {
	keys, argv := c.run()
	sent := time.Now()
	v, err := n.write(ctx, n.scripts.release, keys, argv...)
	if err != nil {
		return Released{}, nil, wrap("release", err)
	}
	r, err := decodeRelease(v)
	if err != nil {
		return Released{}, nil, err
	}
	if r.status == "claimed" {
		return Released{}, nil, nil
	}
	n.noted(key)
	n.ledger.released(key, c.token, r.count)
	out := Released{Released: r.count == 0, Count: r.count}
	if out.Released {
		out.HeldFor = heldSince(r.acquiredAt.UnixMilli())
	}
	var next *handed
	if h := r.handoff; h != nil {
		next = &handed{waiter: h.waiter, actor: actor, lease: Lease{
			Resource: resourceOf(key), Owner: h.owner, Token: h.token, Fence: h.fence, Count: 1, TTL: h.ttl,
			AcquiredAt: h.at, ExpiresAt: h.at.Add(h.ttl), Outcome: Granted, Mode: Exclusive,
		}}
		n.epochs.lease(sh, h.ttl)
		// Its request's value and session are the waiter's (Engine.queue).
		n.ledger.note(key, next.lease, h.ttl, AcquireRequest{}, sent)
	}
	return out, next, nil
}

// forceReleaseFence breaks the lease with this fence (0: every holder),
// calling force_release.lua until no holder it should break is left.
func (n *node) forceReleaseFence(ctx context.Context, key string, fence int64, actor, reason string) (Broken, error) {
	var out Broken
	for range MaxLimit/50 + 1 {
		b, more, err := n.forceRelease(ctx, key, fence, actor, reason)
		if err != nil {
			if out.Fence != 0 && (errors.Is(err, ErrNotFound) || errors.Is(err, ErrLeaseLost)) {
				// The holders left went by themselves meanwhile.
				return out, nil
			}
			return out, err
		}
		if b.Fence > out.Fence {
			out = b
		}
		if !more {
			break
		}
	}
	return out, nil
}

// forceRelease runs force_release.lua once; more says holders are left
// that this call did not reach.
func (n *node) forceRelease(ctx context.Context, key string, fence int64, actor, reason string) (Broken, bool, error) {
	fenceArg := ""
	if fence != 0 {
		fenceArg = strconv.FormatInt(fence, 10)
	}
	ctx, cancel := n.bound(ctx)
	defer cancel()
	sh := n.sharedOf(key)
	c := forceReleaseCallOf(key, sh)
	c.actor, c.reason, c.fence, c.trace = packable(actor), packable(reason), fenceArg, traceOf(ctx)
	keys, argv := c.args()
	v, err := n.write(ctx, n.scripts.forceRelease, keys, argv...)
	if err != nil {
		return Broken{}, false, wrap("force-release", err)
	}
	r, err := decodeForce(v)
	if err != nil {
		return Broken{}, false, err
	}
	n.noted(key)
	n.ledger.broken(key, r.fence)
	return Broken{Owner: r.owner, Fence: r.fence, HeldFor: heldSince(r.acquiredAt.UnixMilli())}, r.more, nil
}

// requestRelease runs force_release.lua's op "request": it asks the
// exclusive holder of key (with fence, when not 0) to step aside.
func (n *node) requestRelease(ctx context.Context, key string, fence int64, by, reason, actor string) (RequestedRelease, error) {
	ctx, cancel := n.bound(ctx)
	defer cancel()
	c := forceReleaseCallOf(key, n.sharedOf(key))
	c.actor, c.reason, c.trace, c.op, c.by = packable(actor), packable(reason), traceOf(ctx), "request", packable(by)
	if fence != 0 {
		c.fence = strconv.FormatInt(fence, 10)
	}
	keys, argv := c.args()
	v, err := n.write(ctx, n.scripts.forceRelease, keys, argv...)
	if err != nil {
		return RequestedRelease{}, wrap("request-release", err)
	}
	return decodeRequest(v)
}

// state runs state.lua: the key's live lease, or ErrNotFound.
func (n *node) state(ctx context.Context, key string) (State, error) {
	ctx, cancel := n.bound(ctx)
	defer cancel()
	v, err := n.st.Run(ctx, n.scripts.state, n.stateKeys(key))
	if err != nil {
		return State{}, wrap("state", err)
	}
	s, marks, err := stateFrom(key, v)
	if err != nil || marks == nil {
		return s, err
	}
	shown, err := n.hideGathering(ctx, []State{s}, []setMarks{marks})
	if err != nil {
		return State{}, err
	}
	if len(shown) == 0 {
		return State{}, ErrNotFound
	}
	return shown[0], nil
}

// writeFence runs fence.lua: it raises the key's fence counter to fence
// (a Redlock majority's, written back to every master: redlock.go) and
// gives the lease with token that fence.
func (n *node) writeFence(ctx context.Context, key string, fence int64, token string) error {
	k := keysOf(key)
	ctx, cancel := n.bound(ctx)
	defer cancel()
	_, err := n.st.Run(ctx, n.scripts.fence, []string{k.fence, k.lease},
		strconv.FormatInt(fence, 10), token, n.opts.Retention.Milliseconds())
	return err
}

// stateKeys are the KEYS of state.lua.
func (n *node) stateKeys(key string) []string {
	k := keysOf(key)
	return []string{k.lease, k.queue, k.qinfo, k.holders, n.sharedOf(key).replicas}
}

// stateFrom reads state.lua's reply: one exclusive holder ("x"), or
// shared holders or permits ("m"), and the marks of lock sets' grants
// (nil: none) that the caller hides while their sets gather.
func stateFrom(key string, v any) (State, setMarks, error) {
	r, err := newReply(v)
	if err != nil {
		return State{}, nil, err
	}
	if r.len() == 0 {
		return State{}, nil, ErrNotFound
	}
	s := State{Resource: resourceOf(key), Queue: queueFrom(r, 2)}
	s.Waiters = len(s.Queue)
	if r.str(0) == "x" {
		exclusiveState(&s, r)
		return s, marksFrom(r, 17), r.err
	}
	if err := sharedState(&s, r); err != nil {
		return State{}, nil, err
	}
	return s, marksFrom(r, 9), r.err
}

// exclusiveState reads {"x", now_ms, queue, owner, fence, count, ttl_ms,
// acquired_at_ms, renewed_at_ms, renewals, pttl_ms, left_ms, waiters,
// value, rq, mh, set}; count 0 is a key kept by a hold window after its
// holder's release.
func exclusiveState(s *State, r *reply) {
	now := r.time(1)
	if r.len() > 12 {
		s.Waiters = int(r.int(12))
	}
	s.HoldersTotal = 1
	remaining := r.ms(10)
	h := Holder{
		Owner:      r.str(3),
		Mode:       Exclusive,
		Fence:      r.int(4),
		Count:      int(r.int(5)),
		TTL:        r.ms(6),
		AcquiredAt: r.time(7),
		ExpiresAt:  now.Add(remaining),
		Remaining:  remaining,
	}
	s.Mode, s.Holders = Exclusive, []Holder{h}
	s.Owner, s.Fence, s.Count, s.TTL, s.AcquiredAt, s.ExpiresAt, s.Remaining = h.Owner, h.Fence, h.Count, h.TTL, h.AcquiredAt, h.ExpiresAt, h.Remaining
	s.RenewedAt = r.time(8)
	s.Renewals = r.int(9)
	s.LeftAtRenewal = r.ms(11)
	s.Value = r.str(13)
	s.Holders[0].Value = s.Value
	if r.len() > 14 {
		s.ReleaseRequested = releaseRequestOf(r.str(14))
	}
	if r.len() > 16 {
		s.Set = int(r.int(16))
	}
	if r.len() > 15 && r.str(15) != "" {
		if until := r.time(15); until.After(now) {
			s.MinHoldUntil = until
		}
	}
	if s.Count == 0 {
		// Released inside its hold window: nobody holds the key.
		s.Holders, s.HoldersTotal = []Holder{}, 0
		return
	}
	s.AtRisk = atRisk(*s)
}

// sharedState reads {"m", now_ms, queue, mode, limit, holders, waiters,
// holders_total, set}, each holder {owner, fence, count, ttl, acquired,
// renewed, renewals, expires, left, value}; the state describes the
// newest.
func sharedState(s *State, r *reply) error {
	now := r.time(1)
	s.Mode = Permit
	if r.str(3) == "shared" {
		s.Mode = Shared
	} else {
		s.Limit = int(r.int(4))
	}
	hs, err := newReply(r.vals[5])
	if err != nil {
		return err
	}
	if r.len() > 7 {
		s.Waiters, s.HoldersTotal = int(r.int(6)), int(r.int(7))
	}
	if r.len() > 8 {
		s.Set = int(r.int(8))
	}
	for i := 0; i+9 < hs.len(); i += 10 {
		exp := hs.time(i + 7)
		h := Holder{
			Owner:      hs.str(i),
			Mode:       s.Mode,
			Fence:      hs.int(i + 1),
			Count:      int(hs.int(i + 2)),
			TTL:        hs.ms(i + 3),
			AcquiredAt: hs.time(i + 4),
			ExpiresAt:  exp,
			Remaining:  exp.Sub(now),
			Value:      hs.str(i + 9),
		}
		s.Holders = append(s.Holders, h)
		if len(s.Holders) == 1 || h.Fence > s.Fence {
			s.Owner, s.Fence, s.Count, s.TTL, s.AcquiredAt, s.ExpiresAt, s.Remaining = h.Owner, h.Fence, h.Count, h.TTL, h.AcquiredAt, h.ExpiresAt, h.Remaining
			s.RenewedAt, s.Renewals, s.LeftAtRenewal = hs.time(i+5), hs.int(i+6), hs.ms(i+8)
			s.Value = h.Value
		}
	}
	slices.SortFunc(s.Holders, func(a, b Holder) int { return cmp.Compare(a.Fence, b.Fence) })
	s.AtRisk = atRisk(*s)
	return hs.err
}

// queueFrom reads the queue part of a state reply: {owner, mode, since, …}.
func queueFrom(r *reply, i int) []Queued {
	if i >= r.len() {
		return nil
	}
	q, err := newReply(r.vals[i])
	if err != nil {
		r.fail(err)
		return nil
	}
	var out []Queued
	for j := 0; j+2 < q.len(); j += 3 {
		out = append(out, Queued{Owner: q.str(j), Mode: modeOf(q.str(j + 1)), WaitingSince: q.time(j + 2)})
	}
	if q.err != nil {
		r.fail(q.err)
	}
	return out
}

// readHistory runs history.lua: up to limit events of the key's history,
// or of its renewals, newest first (it records a lapse first).
func (n *node) readHistory(ctx context.Context, key string, limit int, renewals bool) ([]Event, error) {
	ctx, cancel := n.bound(ctx)
	defer cancel()
	keys, argv := historyCallOf(key, n.sharedOf(key), renewals, limit).args()
	v, err := n.st.Run(ctx, n.scripts.history, keys, argv...)
	if err != nil {
		return nil, wrap("history", err)
	}
	n.noted(key) // it may have recorded a lapse
	entries, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("lock: history reply %T", v)
	}
	// Oldest first from Redis; newest first to the caller.
	events := make([]Event, 0, len(entries))
	for i := len(entries) - 1; i >= 0; i-- {
		packed, ok := entries[i].(string)
		if !ok {
			return nil, fmt.Errorf("lock: history entry %T", entries[i])
		}
		ev, err := unpackEvent(packed)
		if err != nil {
			return nil, err
		}
		events = append(events, ev)
	}
	return events, nil
}

// unpackEvent reads an event of a key's history or renewals as scripts/lib/events.lua
// packs it: type, at, owner, fence, ttl_ms, count, actor, reason, exp,
// left_ms and then fields for the scripts only, joined by US (\x1f).
func unpackEvent(s string) (Event, error) {
	// type, at, owner, fence, ttl_ms, count, actor, reason, exp, left_ms,
	// w, keep, d, s, t, ls (events.lua, pack); entries of older layouts
	// stop after left_ms or later.
	f := strings.SplitN(s, eventSep, 17)
	if len(f) < 10 {
		return Event{}, fmt.Errorf("lock: history entry has %d fields, want at least 10", len(f))
	}
	e := Event{
		Type: f[0], At: time.UnixMilli(atoi(f[1])).UTC(), Owner: f[2], Fence: atoi(f[3]),
		TTL: time.Duration(atoi(f[4])) * time.Millisecond, Count: int(atoi(f[5])),
		Actor: f[6], Reason: f[7], Left: time.Duration(atoi(f[9])) * time.Millisecond,
	}
	if len(f) > 14 && validTraceID(f[14]) {
		e.TraceID = f[14]
	}
	if len(f) > 15 {
		e.Set = int(atoi(f[15]))
	}
	return e, nil
}

// eventSep joins the fields of a packed history event (base.lua's US). No
// owner, actor or reason may hold it: checkText.
const eventSep = "\x1f"

func atoi(s string) int64 {
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

// wrap turns errors that mean "Redis is not there" into ErrUnavailable and
// leaves the others (script bugs) as they are, with the operation named.
func wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) {
		return fmt.Errorf("lock: %s: %w", op, err)
	}
	if errors.Is(err, store.ErrClosed) {
		return fmt.Errorf("lock: %s: %w", op, ErrClosed)
	}
	if unavailable(err) {
		return fmt.Errorf("lock: %s: %w: %w", op, ErrUnavailable, err)
	}
	return fmt.Errorf("lock: %s: %w", op, err)
}

func unavailable(err error) bool {
	var rerr redis.Error
	if errors.As(err, &rerr) {
		// Replies from a Redis that cannot serve us right now: not ready,
		// read-only, out of memory (maxmemory with noeviction), or
		// refusing our credentials (a configuration fault the operator
		// sees in the log, not a request's fault).
		msg := rerr.Error()
		for _, p := range []string{"LOADING", "READONLY", "OOM", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "MOVED", "ASK", "BUSY", "NOREPLICAS", "MISCONF", "NOAUTH", "WRONGPASS", "NOPERM"} {
			if strings.HasPrefix(msg, p) {
				return true
			}
		}
		// WAIT (replica acks) on a master a failover has just made a
		// replica, after a script that wrote nothing: as READONLY.
		return strings.HasPrefix(msg, "ERR WAIT cannot be used with replica")
	}
	// The connection failed: a network error (a refused or reset
	// connection is a *net.OpError), or the server closed it.
	var nerr net.Error
	return errors.As(err, &nerr) || errors.Is(err, redis.ErrClosed) || errors.Is(err, redis.ErrPoolTimeout) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, net.ErrClosed) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.EPIPE)
}

// isReply says whether err is Redis's error reply msg (a redis.Error), not
// an error of the connection or of lockd's own.
func isReply(err error, msg string) bool {
	var rerr redis.Error
	return errors.As(err, &rerr) && rerr.Error() == msg
}
