package lock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockd/lockd/internal/lock/store"
	"github.com/lockd/lockd/internal/lock/wait"
)

// Redlock grants leases on N independent Redis masters (no replication
// between them): a grant needs a majority of them within the TTL, and is
// undone on every master otherwise (the Redis distributed-lock page's
// algorithm). Each master runs the same scripts as a single Redis, through
// a node of its own (node.go); Redlock decides by quorum over their
// answers. Beside the nodes it runs one wait hub, one sweeper (for every
// master: redlock_sweep.go) and an epoch refresher per master (the
// restart quarantine, epoch.go).
//
// Fences stay strictly increasing per key, also with one master down,
// paused or restarted empty: after a majority granted, the largest fence
// they returned, F, is written back to every master's fence counter, and F
// is handed out only once a majority confirmed it. Any later grant needs a
// majority too, which shares at least one master with that write-back, so
// its largest fence is at least F+1. A master that restarted empty lost its
// counter, but it refuses grants until every lease it may have held has
// expired (the restart quarantine), and afterwards any majority it joins
// holds a master that has the counter. (Every fence is also floored at the
// masters' clocks in microseconds.) docs/safety.md has the argument.
//
// What needs one Redis's view of every holder or every event answers
// ErrUnsupported (ErrNoSemaphores, ErrNoEventStream), never an empty
// answer: shared holds, semaphores, the event stream. Replica acks are
// refused at the start.
type Redlock struct {
	nodes  []*node
	quorum int
	opts   Options
	hub    *wait.Hub[Lease]
	id     string // this process, in the Redlock sweeper lease
	lapses *lapseTally
	stop   chan struct{} // ends sweepLoop and the epoch refreshers
	bg     sync.WaitGroup
	closed sync.Once
}

// NewRedlock returns a quorum engine over clients, an odd number (at least
// three) of independent masters, and starts its waiter hub, an epoch
// refresher per master and (unless opts.NoSweep) its sweeper.
func NewRedlock(clients []*redis.Client, opts Options) (*Redlock, error) {
	if len(clients) < 3 || len(clients)%2 == 0 {
		return nil, fmt.Errorf("lock: redlock needs an odd number of masters, at least 3, not %d", len(clients))
	}
	if opts.ReplicaAcks > 0 {
		// Each master would wait for replicas of its own, and a master that
		// missed them would count as a no: not what the setting promises.
		return nil, fmt.Errorf("lock: replica acks do not apply to redlock's independent masters")
	}
	opts = opts.withDefaults()
	opts.redlockMaster = true
	r := &Redlock{quorum: len(clients)/2 + 1, opts: opts, stop: make(chan struct{})}
	for _, c := range clients {
		// Each master's store batches (store.New), as one Redis's does: the
		// calls that many callers send one master at once share round
		// trips. Sent one by one, 32 callers on 2 cores took 1.8 times as
		// long per cycle, and some calls missed their master's share of
		// the TTL, so grants failed for want of a majority.
		r.nodes = append(r.nodes, newNode(store.New(c, opts.Sentinel), opts))
	}
	r.lapses = newLapseTally(r.quorum, len(r.nodes), 2*opts.CallTimeout+4*opts.SweepInterval)
	var id [8]byte
	_, _ = rand.Read(id[:])
	r.id = hex.EncodeToString(id[:])
	hc := hubConfig(opts)
	hc.Listen = func(l wait.Listener) wait.Subscription {
		// A wake-up from any master is a hint; the quorum decides.
		subs := make(fanOut, len(r.nodes))
		for i, n := range r.nodes {
			subs[i] = n.subscribe(l)
		}
		return subs
	}
	r.hub = wait.New(hc)
	for _, n := range r.nodes {
		n.seedEpoch()
		r.background(n.loadFunctions)
		r.background(func() { n.keepEpochs(r.stop) })
	}
	if !opts.NoSweep {
		r.background(func() { r.sweepLoop(r.stop) })
	}
	return r, nil
}

// background runs f on a goroutine of its own, which Close waits for.
func (r *Redlock) background(f func()) {
	r.bg.Add(1)
	go func() {
		defer r.bg.Done()
		f()
	}()
}

// Close wakes every waiting caller with ErrClosed and stops the sweeper,
// the epoch refreshers and the masters' nodes.
func (r *Redlock) Close() error {
	r.closed.Do(func() {
		r.hub.Close()
		close(r.stop)
		r.bg.Wait()
		for _, n := range r.nodes {
			n.close()
		}
	})
	return nil
}

// Waiters is the number of callers now waiting in this process.
func (r *Redlock) Waiters() int { return r.hub.Waiting() }

// perNode bounds one master's part of an operation: about 1 % of the TTL
// (the Redis page's advice: small against the TTL), at least 10 ms, at most
// the call timeout. A master that does not answer in time counts as a no.
func (r *Redlock) perNode(ttl time.Duration) time.Duration {
	return min(max(ttl/100, 10*time.Millisecond), r.opts.CallTimeout)
}

// each runs op on every master at once, each within d, and returns their
// results in the masters' order. It returns as soon as every master
// answered or a majority answered without error; the others' results are
// then left zero with ErrUnavailable (their operation still runs to its
// end: a paused master must not slow every call down).
func each[T any](ctx context.Context, r *Redlock, d time.Duration, op func(context.Context, *node) (T, error)) ([]T, []error) {
	return eachUntil(ctx, r, d, op, func(_ T, err error) bool { return err == nil })
}

// eachUntil is each with its own notion of a good answer: it returns once a
// majority of answers are good.
func eachUntil[T any](ctx context.Context, r *Redlock, d time.Duration, op func(context.Context, *node) (T, error), good func(T, error) bool) ([]T, []error) {
	type result struct {
		i   int
		val T
		err error
	}
	results := make(chan result, len(r.nodes))
	for i, n := range r.nodes {
		go func() {
			nctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d)
			defer cancel()
			v, err := op(nctx, n)
			results <- result{i, v, err}
		}()
	}
	vals := make([]T, len(r.nodes))
	errs := make([]error, len(r.nodes))
	for i := range errs {
		errs[i] = errNoAnswer
	}
	goodN := 0
	for range r.nodes {
		res := <-results
		vals[res.i], errs[res.i] = res.val, res.err
		if good(res.val, res.err) {
			goodN++
		}
		if goodN >= r.quorum {
			break
		}
	}
	return vals, errs
}

// errNoAnswer stands for a master whose answer was not waited for.
var errNoAnswer = fmt.Errorf("%w: no answer yet", ErrUnavailable)

// Acquire takes the key on a majority, re-enters it or waits for it, as
// Engine.Acquire does on one Redis.
func (r *Redlock) Acquire(ctx context.Context, res Resource, req AcquireRequest) (Lease, error) {
	l, err := r.acquire(ctx, res, req)
	if err != nil {
		return Lease{}, err
	}
	l.Proof = r.opts.Proofs.acquiredProof(l, req)
	return l, nil
}

// acquire is Acquire without the proof: the lease the majority agreed on.
func (r *Redlock) acquire(ctx context.Context, res Resource, req AcquireRequest) (Lease, error) {
	if err := res.check(); err != nil {
		return Lease{}, err
	}
	key := res.id()
	if req.LockDelay > 0 {
		return Lease{}, ErrNoLockDelay
	}
	if req.MinHold > 0 {
		return Lease{}, ErrNoMinHold
	}
	if res.Kind == KindElection {
		return Lease{}, ErrNoElections
	}
	if req.Session != "" {
		return Lease{}, ErrNoSessions
	}
	if res.Kind == KindSemaphore || req.Mode == Shared {
		return Lease{}, fmt.Errorf("%w: shared holds and semaphores need one Redis, Sentinel or Cluster, not Redlock", ErrUnsupported)
	}
	token, err := newToken()
	if err != nil {
		return Lease{}, err
	}
	if req.Wait <= 0 || req.Token != "" {
		return r.try(ctx, key, req, token, grantFree)
	}
	seen := r.hub.Watch(key, "")
	i := grantFree
	if seen.Queued() {
		if req.IdempotencyKey == "" {
			return r.wait(ctx, key, req, token, seen, nil)
		}
		i = peek
	}
	lease, err := r.try(ctx, key, req, token, i)
	if err == nil || !waitable(err) {
		return lease, err
	}
	if errors.Is(err, errFree) {
		err = nil
	}
	return r.wait(ctx, key, req, token, seen, err)
}

func (r *Redlock) wait(ctx context.Context, key string, req AcquireRequest, token string, seen wait.Seen, first error) (Lease, error) {
	try := func(ctx context.Context) (Lease, error) { return r.try(ctx, key, req, token, grantFree) }
	undo := func(l Lease) {
		rctx, cancel := context.WithTimeout(context.Background(), r.opts.CallTimeout)
		defer cancel()
		_, _ = r.Release(rctx, resourceOf(key), l.Token, req.Actor)
	}
	lease, err := r.hub.Wait(ctx, key, time.Now().Add(req.Wait), wait.Waiter[Lease]{Try: try, Undo: undo}, seen, first)
	return lease, fromHub(err)
}

// try is one quorum attempt; see the type's comment.
func (r *Redlock) try(ctx context.Context, key string, req AcquireRequest, token string, i intent) (Lease, error) {
	start := time.Now()
	// Every master's answer is awaited (each within the per-node bound), so
	// that a failed attempt is undone exactly where it was granted and the
	// fence is written back to every master that granted.
	leases, errs := eachUntil(ctx, r, r.perNode(req.TTL), func(ctx context.Context, n *node) (Lease, error) {
		return n.try(ctx, key, req, token, "x", i, nil)
	}, func(Lease, error) bool { return false })
	t := tallyOf(leases, errs)
	granted, reentered, replayed, grantedOn, reenteredOn := t.granted, t.reentered, t.replayed, t.grantedOn, t.reenteredOn
	held, lost, mismatch, free, recovering, failed := t.held, t.lost, t.mismatch, t.free, t.recovering, t.failed
	switch {
	case len(replayed) >= r.quorum:
		// The replay stands; this attempt's own fresh grants go.
		r.undo(key, token, req.Actor, grantedOn)
		r.undoUnanswered(key, token, req.Actor, t.failedOn)
		return newest(replayed), nil
	case len(reentered) >= r.quorum:
		return newest(reentered), nil
	case len(granted) >= r.quorum:
		l, err := r.confirm(ctx, key, req, token, start, granted)
		if err != nil {
			r.undo(key, token, req.Actor, grantedOn)
			r.undoUnanswered(key, token, req.Actor, t.failedOn)
			return Lease{}, err
		}
		return l, nil
	}
	// No majority: give back what some masters granted or re-entered,
	// and what those that did not answer in time may have granted.
	r.undo(key, token, req.Actor, grantedOn)
	r.undo(key, req.Token, req.Actor, reenteredOn)
	r.undoUnanswered(key, token, req.Actor, t.failedOn)
	switch {
	case mismatch >= r.quorum:
		return Lease{}, ErrIdempotencyMismatch
	case lost >= r.quorum:
		return Lease{}, ErrLeaseLost
	case i == peek && free+len(granted) >= r.quorum:
		return Lease{}, errFree
	case len(held) > 0 && len(held)+len(granted)+free+len(reentered) >= r.quorum:
		return Lease{}, heldByQuorum(key, held, len(r.nodes)-len(held), r.quorum)
	case recovering != nil:
		return Lease{}, recovering
	case failed != nil:
		return Lease{}, wrap("acquire", fmt.Errorf("%w: no majority of the redlock masters answered: %w", ErrUnavailable, failed))
	case len(held) > 0:
		return Lease{}, heldByQuorum(key, held, len(r.nodes)-len(held), r.quorum)
	default:
		return Lease{}, fmt.Errorf("%w: no majority of the redlock masters granted %s", ErrUnavailable, key)
	}
}

// tally is what the masters answered one acquire attempt.
type tally struct {
	granted, reentered, replayed []Lease
	grantedOn, reenteredOn       []int // which masters
	// failedOn are the masters that did not answer in time: the script
	// may have run there all the same.
	failedOn             []int
	held                 []*HeldError
	lost, mismatch, free int
	recovering           *RecoveringError // the shortest
	failed               error
}

func tallyOf(leases []Lease, errs []error) tally {
	var t tally
	for i, err := range errs {
		var he *HeldError
		var re *RecoveringError
		switch {
		case err == nil && leases[i].Outcome == Granted:
			t.granted = append(t.granted, leases[i])
			t.grantedOn = append(t.grantedOn, i)
		case err == nil && leases[i].Outcome == Reentered:
			t.reentered = append(t.reentered, leases[i])
			t.reenteredOn = append(t.reenteredOn, i)
		case err == nil && leases[i].Outcome == Replayed:
			t.replayed = append(t.replayed, leases[i])
		case errors.As(err, &he):
			t.held = append(t.held, he)
		case errors.Is(err, ErrLeaseLost):
			t.lost++
		case errors.Is(err, ErrIdempotencyMismatch):
			t.mismatch++
		case errors.Is(err, errFree):
			t.free++
		case errors.As(err, &re):
			if t.recovering == nil || re.Remaining < t.recovering.Remaining {
				t.recovering = re
			}
		default:
			t.failed = err
			t.failedOn = append(t.failedOn, i)
		}
	}
	return t
}

// heldByQuorum is the 409 for a key held on enough masters: it becomes free
// when enough of them have let go, so the time left is that of the
// (quorum − free)-th holder to expire.
func heldByQuorum(key string, held []*HeldError, free, quorum int) *HeldError {
	slices.SortFunc(held, func(a, b *HeldError) int { return int(a.Remaining - b.Remaining) })
	i := min(max(quorum-free, 1), len(held)) - 1
	owners := map[string]int{}
	owner := held[i].Owner
	for _, h := range held {
		if owners[h.Owner]++; owners[h.Owner] > owners[owner] {
			owner = h.Owner
		}
	}
	return &HeldError{Resource: resourceOf(key), Owner: owner, Remaining: held[i].Remaining}
}

// newest is the lease most masters agree on: the fence that most of them
// report (after a grant's write-back, the majority's), the highest on a
// tie.
func newest(ls []Lease) Lease {
	votes := map[int64]int{}
	for _, l := range ls {
		votes[l.Fence]++
	}
	best := ls[0]
	for _, l := range ls[1:] {
		if v, b := votes[l.Fence], votes[best.Fence]; v > b || (v == b && l.Fence > best.Fence) {
			best = l
		}
	}
	return best
}

// confirm checks that the grant is still valid and writes its fence back to
// a majority before it is handed out.
func (r *Redlock) confirm(ctx context.Context, key string, req AcquireRequest, token string, start time.Time, granted []Lease) (Lease, error) {
	drift := req.TTL/100 + 2*time.Millisecond
	validity := req.TTL - time.Since(start) - drift
	if validity <= 0 {
		return Lease{}, fmt.Errorf("%w: the majority of grants took longer than the TTL", ErrUnavailable)
	}
	l := granted[0]
	for _, g := range granted[1:] {
		if g.Fence > l.Fence {
			l = g
		}
	}
	_, errs := each(ctx, r, r.perNode(req.TTL), func(ctx context.Context, n *node) (struct{}, error) {
		return struct{}{}, n.writeFence(ctx, key, l.Fence, token)
	})
	ok := 0
	for _, err := range errs {
		if err == nil {
			ok++
		}
	}
	if ok < r.quorum {
		return Lease{}, fmt.Errorf("%w: the fence reached only %d of %d redlock masters", ErrUnavailable, ok, len(r.nodes))
	}
	l.ExpiresAt = start.Add(req.TTL - drift)
	return l, nil
}

// undo gives back, on the masters numbered in on, the level that token
// got there.
func (r *Redlock) undo(key, token, actor string, on []int) {
	if len(on) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.opts.CallTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, i := range on {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = release(ctx, r.nodes[i], key, token, actor)
		}()
	}
	wg.Wait()
}

// undoUnanswered gives back, in the background, what masters that did not
// answer in time (a slow or paused one) may have granted token: their
// script may have run after its bound. Released with the token, a grant
// that never happened is a no-op; one that did would otherwise last its
// TTL on a minority of masters. The caller is not kept waiting for
// masters that are slow already.
func (r *Redlock) undoUnanswered(key, token, actor string, on []int) {
	if len(on) == 0 {
		return
	}
	r.background(func() { r.undo(key, token, actor, on) })
}

// release gives back one level of the lease on master n. No waiter of a
// Redlock waits in a master's queue (they wait in their process, in the
// hub), so a master hands the key to nobody; should it, the key is given
// back.
func release(ctx context.Context, n *node, key, token, actor string) (Released, error) {
	return n.releaseTo(ctx, key, token, actor, nil)
}

// Renew extends the lease on every master; a majority must confirm.
func (r *Redlock) Renew(ctx context.Context, res Resource, req RenewRequest) (Lease, error) {
	key := res.id()
	if err := onlyLocks(res); err != nil {
		return Lease{}, err
	}
	leases, errs := each(ctx, r, r.opts.CallTimeout, func(ctx context.Context, n *node) (Lease, error) {
		return n.renewBy(ctx, key, req, false)
	})
	var ok []Lease
	for i, err := range errs {
		if err == nil {
			ok = append(ok, leases[i])
		}
	}
	if len(ok) >= r.quorum {
		l := newest(ok)
		l.Proof = r.opts.Proofs.renewedProof(l, req)
		return l, nil
	}
	return Lease{}, r.lostOr(errs, "renew")
}

// GiveBack is Release: Redlock has no hold windows.
func (r *Redlock) GiveBack(ctx context.Context, res Resource, token, actor string) (Released, error) {
	return r.Release(ctx, res, token, actor)
}

// Release gives back one level of the lease on every master; a majority
// must confirm.
func (r *Redlock) Release(ctx context.Context, res Resource, token, actor string) (Released, error) {
	key := res.id()
	if err := onlyLocks(res); err != nil {
		return Released{}, err
	}
	rels, errs := each(ctx, r, r.opts.CallTimeout, func(ctx context.Context, n *node) (Released, error) {
		return release(ctx, n, key, token, actor)
	})
	var ok []Released
	for i, err := range errs {
		if err == nil {
			ok = append(ok, rels[i])
		}
	}
	if len(ok) >= r.quorum {
		slices.SortFunc(ok, func(a, b Released) int { return a.Count - b.Count })
		return ok[len(ok)-r.quorum], nil
	}
	return Released{}, r.lostOr(errs, "release")
}

// lostOr is the error of a renew or release that no majority confirmed:
// the lease is lost (or gone) on a majority, or the masters did not answer.
func (r *Redlock) lostOr(errs []error, op string) error {
	lost, notFound := 0, 0
	var failed error
	for _, err := range errs {
		switch {
		case err == nil:
		case errors.Is(err, ErrLeaseLost):
			lost++
		case errors.Is(err, ErrNotFound):
			notFound++
		default:
			failed = err
		}
	}
	switch {
	case lost > 0 && lost+notFound >= r.quorum:
		return ErrLeaseLost
	case notFound >= r.quorum:
		return ErrNotFound
	case lost+notFound >= r.quorum:
		return ErrLeaseLost
	case failed != nil:
		return fmt.Errorf("%w: %s: no majority of the redlock masters answered: %w", ErrUnavailable, op, failed)
	default:
		return fmt.Errorf("%w: %s: no majority of the redlock masters confirmed", ErrUnavailable, op)
	}
}

// ForceReleaseFence breaks the lease (with this fence only, unless 0) on
// every master; a majority must confirm.
func (r *Redlock) ForceReleaseFence(ctx context.Context, res Resource, fence int64, actor, reason string) (Broken, error) {
	key := res.id()
	if err := onlyLocks(res); err != nil {
		return Broken{}, err
	}
	// Every master's answer is waited for (each within the call's
	// timeout), not only a majority's: a force-release is a person's act,
	// rare and not in a hurry, and the caller's next operation on the key
	// (another force-release, an acquire) must not reach a slow master
	// before this one and be recorded there out of order.
	bs, errs := eachUntil(ctx, r, r.opts.CallTimeout, func(ctx context.Context, n *node) (Broken, error) {
		return n.forceReleaseFence(ctx, key, fence, actor, reason)
	}, func(Broken, error) bool { return false })
	var ok []Broken
	for i, err := range errs {
		if err == nil {
			ok = append(ok, bs[i])
		}
	}
	if len(ok) >= r.quorum {
		best := ok[0]
		for _, b := range ok[1:] {
			if b.Fence > best.Fence {
				best = b
			}
		}
		return best, nil
	}
	return Broken{}, r.lostOr(errs, "force-release")
}

// State is the lease as a majority of masters has it: the newest holder,
// with the time left until a majority no longer has it.
func (r *Redlock) State(ctx context.Context, res Resource) (State, error) {
	key := res.id()
	if err := onlyLocks(res); err != nil {
		return State{}, err
	}
	sts, errs := each(ctx, r, r.opts.CallTimeout, func(ctx context.Context, n *node) (State, error) {
		return n.state(ctx, key)
	})
	var found []State
	notFound := 0
	var failed error
	for i, err := range errs {
		switch {
		case err == nil:
			found = append(found, sts[i])
		case errors.Is(err, ErrNotFound):
			notFound++
		default:
			failed = err
		}
	}
	if len(found) < r.quorum {
		if failed != nil && notFound < r.quorum {
			return State{}, fmt.Errorf("%w: state: %w", ErrUnavailable, failed)
		}
		return State{}, ErrNotFound
	}
	return mergeStates(found, r.quorum), nil
}

// mergeStates merges a majority's view of one lease: the newest holder's
// fields; the time left until fewer than quorum masters hold it; the most
// waiters any master counted.
func mergeStates(found []State, quorum int) State {
	best := found[0]
	waiters := 0
	for _, s := range found {
		if s.Fence > best.Fence {
			best = s
		}
		waiters = max(waiters, s.Waiters)
	}
	rem := make([]time.Duration, len(found))
	for i, s := range found {
		rem[i] = s.Remaining
	}
	slices.Sort(rem)
	best.Remaining = rem[len(rem)-quorum]
	best.ExpiresAt = time.Now().Add(best.Remaining)
	best.Waiters = waiters
	return best
}

// History reads the key's history from every master and returns the
// fullest (each master records the events it took part in).
func (r *Redlock) History(ctx context.Context, res Resource, limit int) ([]Event, error) {
	key := res.id()
	if err := onlyLocks(res); err != nil {
		return nil, err
	}
	hs, errs := each(ctx, r, r.opts.CallTimeout, func(ctx context.Context, n *node) ([]Event, error) {
		return n.readHistory(ctx, key, limit, false)
	})
	return fullest(hs, errs, r.quorum, "history")
}

// Renewals reads the key's renewals as History does.
func (r *Redlock) Renewals(ctx context.Context, res Resource, limit int) ([]Event, error) {
	key := res.id()
	if err := onlyLocks(res); err != nil {
		return nil, err
	}
	hs, errs := each(ctx, r, r.opts.CallTimeout, func(ctx context.Context, n *node) ([]Event, error) {
		return n.readHistory(ctx, key, limit, true)
	})
	return fullest(hs, errs, r.quorum, "renewals")
}

func fullest(hs [][]Event, errs []error, quorum int, op string) ([]Event, error) {
	var best []Event
	ok := 0
	var failed error
	for i, err := range errs {
		if err != nil {
			failed = err
			continue
		}
		ok++
		if len(hs[i]) > len(best) {
			best = hs[i]
		}
	}
	if ok < quorum {
		return nil, fmt.Errorf("%w: %s: %w", ErrUnavailable, op, failed)
	}
	if best == nil {
		best = []Event{}
	}
	return best, nil
}

// onlyLocks is ErrNoSemaphores for any resource but a lock: Redlock grants
// no permits, and a 404, an empty history or an empty page would read as
// "not in use now", not "never here".
func onlyLocks(res Resource) error {
	if err := res.check(); err != nil {
		return err
	}
	switch res.Kind {
	case KindLock:
	case KindElection:
		return ErrNoElections
	default:
		return ErrNoSemaphores
	}
	return nil
}

// List walks the masters one after another and lists each lock that a
// majority holds, once: on the first master that has it.
func (r *Redlock) List(ctx context.Context, kind Kind, prefix string, limit int, after string) (Page, error) {
	if err := onlyLocks(Resource{Kind: kind}); err != nil {
		return Page{}, err
	}
	first := r.nodes[0]
	cur, err := first.decodeCursor(ctx, after)
	if err != nil {
		return Page{}, err
	}
	cands, err := r.candidates(ctx, &cur, prefix, limit)
	if err != nil {
		return Page{}, err
	}
	page := Page{Locks: r.quorumStates(ctx, cands)}
	if !cur.Scan.Done || len(cur.Pending) > 0 {
		if page.NextCursor, err = first.encodeCursor(ctx, cur); err != nil {
			return Page{}, err
		}
	}
	return page, nil
}

// candidate is a key a listing found on one master.
type candidate struct {
	key  string
	node int
}

// candidates are up to limit keys under prefix, from the cursor's pending
// keys and then from scanning the masters one after another; the cursor
// moves past them and keeps the surplus as pending.
func (r *Redlock) candidates(ctx context.Context, cur *cursor, prefix string, limit int) ([]candidate, error) {
	match := leaseMatch(prefix)
	var cands []candidate
	for _, p := range cur.Pending {
		i, k, ok := strings.Cut(p, "/")
		n, err := strconv.Atoi(i)
		if !ok || err != nil || n < 0 || n >= len(r.nodes) || !strings.HasPrefix(k, prefix) {
			return nil, fmt.Errorf("%w: pending key", ErrInvalidCursor)
		}
		cands = append(cands, candidate{k, n})
	}
	scanned := int64(0)
	for !cur.Scan.Done && len(cands) < limit && scanned < scanBudget {
		node := cur.Scan.Node
		if node >= len(r.nodes) {
			cur.Scan.Done = true
			break
		}
		count := int64(max(limit-len(cands), 10) * 3)
		batch, next, err := r.nodes[node].scan(ctx, store.ScanPos{Cursor: cur.Scan.Cursor}, match, count)
		scanned += count
		if err != nil {
			// A master that does not answer is skipped: every key a
			// majority holds is on another one too.
			next = store.ScanPos{Done: true}
		}
		slices.Sort(batch)
		for _, rk := range batch {
			if k := lockKeyOf(rk); listed(k, prefix) {
				cands = append(cands, candidate{k, node})
			}
		}
		cur.Scan = store.ScanPos{Node: node, Cursor: next.Cursor}
		if next.Done {
			cur.Scan = store.ScanPos{Node: node + 1}
		}
		cur.Scan.Done = cur.Scan.Node >= len(r.nodes)
	}
	cur.Pending = nil
	if len(cands) > limit {
		for _, c := range cands[limit:] {
			cur.Pending = append(cur.Pending, strconv.Itoa(c.node)+"/"+c.key)
		}
		cands = cands[:limit]
	}
	return cands, nil
}

// quorumStates are the candidates a majority of masters hold, each once:
// listed by the first master that found it.
func (r *Redlock) quorumStates(ctx context.Context, cands []candidate) []State {
	keys := make([]string, len(cands))
	for i, c := range cands {
		keys[i] = c.key
	}
	perNode, errs := each(ctx, r, r.opts.CallTimeout, func(ctx context.Context, n *node) ([]State, error) {
		return n.states(ctx, keys)
	})
	live := make([]map[string]State, len(r.nodes))
	for i := range r.nodes {
		live[i] = map[string]State{}
		if errs[i] == nil {
			for _, s := range perNode[i] {
				live[i][s.Resource.id()] = s
			}
		}
	}
	out := []State{}
	seen := map[string]bool{}
	for _, c := range cands {
		if seen[c.key] {
			continue
		}
		var found []State
		earlier := false
		for i := range r.nodes {
			if s, ok := live[i][c.key]; ok {
				found = append(found, s)
				earlier = earlier || i < c.node
			}
		}
		if len(found) < r.quorum || earlier {
			continue
		}
		seen[c.key] = true
		out = append(out, mergeStates(found, r.quorum))
	}
	return out
}

// Ready reports whether a majority of masters can grant.
func (r *Redlock) Ready(ctx context.Context) error {
	_, errs := each(ctx, r, r.opts.CallTimeout, func(ctx context.Context, n *node) (struct{}, error) {
		return struct{}{}, n.ready(ctx)
	})
	ok := 0
	var failed error
	for _, err := range errs {
		if err == nil {
			ok++
		} else {
			failed = err
		}
	}
	if ok < r.quorum {
		return fmt.Errorf("only %d of %d redlock masters can grant: %w", ok, len(r.nodes), failed)
	}
	return nil
}

// Topology reports every master and whether it answers.
func (r *Redlock) Topology(ctx context.Context) Topology {
	ts, _ := eachUntil(ctx, r, r.opts.CallTimeout, func(ctx context.Context, n *node) (Topology, error) {
		return n.topology(ctx), nil
	}, func(Topology, error) bool { return false })
	t := Topology{Kind: "redlock"}
	for _, nt := range ts {
		if len(nt.Nodes) > 0 {
			t.Nodes = append(t.Nodes, nt.Nodes[0])
		}
	}
	return t
}

// Recovering is the longest restart quarantine a master is in.
func (r *Redlock) Recovering() time.Duration {
	var d time.Duration
	for _, n := range r.nodes {
		d = max(d, n.recovering())
	}
	return d
}

// EndQuarantine ends the restart quarantine on every master
// (Engine.EndQuarantine) and returns the longest it ended. A master it
// cannot reach keeps its quarantine: the error says so, after every other
// master's ended.
func (r *Redlock) EndQuarantine(ctx context.Context) (time.Duration, error) {
	var left time.Duration
	var errs []error
	for _, n := range r.nodes {
		d, err := n.endQuarantine(ctx)
		if err != nil {
			errs = append(errs, err)
		}
		left = max(left, d)
	}
	return left, errors.Join(errs...)
}

// fanOut is one subscription over several masters' subscriptions, which
// all tell the same listener.
type fanOut []store.Subscription

// Subscribe subscribes on every master; it fails only when all of them do.
func (f fanOut) Subscribe(ctx context.Context, key string) error {
	var errs []error
	for _, s := range f {
		if err := s.Subscribe(ctx, key); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == len(f) {
		return errors.Join(errs...)
	}
	return nil
}

func (f fanOut) Unsubscribe(ctx context.Context, keys ...string) error {
	var errs []error
	for _, s := range f {
		errs = append(errs, s.Unsubscribe(ctx, keys...))
	}
	return errors.Join(errs...)
}

func (f fanOut) Close() error {
	var errs []error
	for _, s := range f {
		errs = append(errs, s.Close())
	}
	return errors.Join(errs...)
}

// Subscribe answers ErrNoEventStream. Each master records the events it
// took part in: a grant that got no majority is an acquired and a released
// event on the masters that granted it, a master that was down misses
// events, and the masters' event IDs differ, so no one master's stream
// (nor a merge of them) is the true and whole story that GET /v1/events
// and webhooks promise.
func (r *Redlock) Subscribe(ctx context.Context, after string) (*Subscription, error) {
	return nil, ErrNoEventStream
}
