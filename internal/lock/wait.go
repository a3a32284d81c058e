package lock

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"time"
)

const (
	// backoffMin and backoffMax bound how soon a queue retries after a
	// Redis error: its waiters keep waiting through a blip.
	backoffMin = 50 * time.Millisecond
	backoffMax = 500 * time.Millisecond
	// confirmTimeout is how long a new queue waits for Redis to confirm its
	// subscription before it retries anyway.
	confirmTimeout = time.Second
	// idleQueue is how long an empty queue keeps its subscription, so a
	// steady hand-off does not SUBSCRIBE/UNSUBSCRIBE on every grant.
	idleQueue     = 30 * time.Second
	sweepInterval = 10 * time.Second
	// aliveEvery is how often a process with waiters says in Redis that it
	// is alive; aliveFor how long that stays true. A process that dies
	// leaves its waiters queued in Redis at most aliveFor: those behind
	// them retry when it ends (lib.lua, the wait queue).
	aliveEvery = 400 * time.Millisecond
	aliveFor   = 1600 * time.Millisecond
)

// attemptFunc runs one try for a waiter: a grant, a *HeldError, or another
// error. The hub knows nothing else about the primitive it waits for.
type attemptFunc func(ctx context.Context) (Lease, error)

// hub queues the waiters of this process, one FIFO per key, and retries for
// the head of a queue when the key's channel says it was released or when
// the holder's lease should have expired. Only the head retries, so a
// release costs one Redis call per process however many wait here. The
// order is the order of the key's queue in Redis (the waiters' places), so
// the head here is the one of this process that Redis grants first.
//
// Every queue keeps one invariant, decided in one place (next): while it
// has waiters, an attempt is in flight, a timer is pending, or it waits for
// its subscription to be confirmed (whose confirmation retries). Anything
// that may have freed the key (a message, a confirmation, a joiner that may
// have missed a message, a timer) pokes the queue; next starts the attempt.
type hub struct {
	id     string // this process, in the queues in Redis
	wakeOf func(key string) string
	alive  func(ctx context.Context, keys []string) error
	bound  time.Duration // one attempt's deadline

	maxTotal, maxPerKey int // waiters allowed in this process, in all and per key

	sub   subscription
	subMu sync.Mutex // keeps SUBSCRIBE and UNSUBSCRIBE in order on the wire

	mu     sync.Mutex
	queues map[string]*queue
	total  int
	closed bool

	ctx     context.Context // ends when the hub closes
	done    chan struct{}
	cancel  context.CancelFunc
	loops   sync.WaitGroup // receive, sweep and alive loops
	working sync.WaitGroup // attempts in flight
}

type queue struct {
	key     string
	channel string
	waiters []*waiter // queued, in arrival order; the head is tried next
	count   int       // queued + in flight
	busy    bool      // an attempt is in flight
	trying  *waiter   // whose attempt
	poked   bool      // something may have freed the key: try now
	ready   bool      // Redis confirmed the subscription (or gave up waiting)
	timer   *time.Timer
	due     time.Time // when timer fires
	wakes   uint64    // pokes so far: a joiner compares it with its own snapshot
	backoff time.Duration
	failed  error // the last attempt's Redis error, until one succeeds
	idle    time.Time
}

type waiter struct {
	id        string       // in the key's queue in Redis
	place     func() int64 // in the key's queue in Redis; 0 when not known
	handed    *Lease       // a release gave it the key while it tried
	try       attemptFunc
	result    chan outcome
	inflight  bool
	abandoned bool
}

type outcome struct {
	lease Lease
	err   error
}

// waitSpec is one waiter: how it tries, gives back a grant it no longer
// wants (undo), leaves the key's queue in Redis when it ends without a
// grant (leave, may be nil), and its id and place in that queue (may be
// empty: the queues of Redlock live in each process).
type waitSpec struct {
	try   attemptFunc
	undo  func(Lease)
	leave func()
	id    string
	place func() int64
}

// watch is what a caller saw of a key's queue before its own try, so that
// a release published between that try and joining the queue is not lost.
type watch struct {
	q      *queue
	wakes  uint64
	queued bool // others in this process already wait for the key
}

// hubConfig is what a hub needs from its engine.
type hubConfig struct {
	id     string                  // this process, in the queues in Redis
	sub    subscription            // the process's wake-up subscription
	wakeOf func(key string) string // a key's wake-up channel
	// alive says in Redis that this process still has waiters on keys
	// (nil: the queues live in this process only).
	alive func(ctx context.Context, keys []string) error
	bound time.Duration // one attempt's deadline
	// maxTotal and maxPerKey cap the waiters of this process.
	maxTotal, maxPerKey int
}

func newHub(c hubConfig) *hub {
	ctx, cancel := context.WithCancel(context.Background())
	h := &hub{
		id:        c.id,
		wakeOf:    c.wakeOf,
		alive:     c.alive,
		bound:     c.bound,
		maxTotal:  c.maxTotal,
		maxPerKey: c.maxPerKey,
		sub:       c.sub,
		queues:    map[string]*queue{},
		ctx:       ctx,
		done:      make(chan struct{}),
		cancel:    cancel,
	}
	h.loops.Add(3)
	go h.receive(ctx)
	go h.sweep()
	go h.aliveLoop()
	return h
}

func (h *hub) waiting() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.total
}

// watch snapshots the key's queue before the caller's own try.
func (h *hub) watch(key string) watch {
	h.mu.Lock()
	defer h.mu.Unlock()
	q := h.queues[key]
	if q == nil {
		return watch{}
	}
	return watch{q: q, wakes: q.wakes, queued: q.count > 0}
}

// wait queues try until it grants, the deadline passes, ctx ends (ctx's
// error; a grant that races it is given back with undo) or the hub closes
// (ErrClosed). seen is the caller's snapshot from before its own try, and
// first what that try answered (nil when it did not try). At the deadline
// the caller gets the answer of one last try, so a 409 names the holder and
// time left as they are then; if Redis is still failing, its error.
func (h *hub) wait(ctx context.Context, key string, deadline time.Time, spec waitSpec, seen watch, first error) (lease Lease, err error) {
	try, undo := spec.try, spec.undo
	if spec.place == nil {
		spec.place = func() int64 { return 0 }
	}
	w := &waiter{id: spec.id, place: spec.place, try: try, result: make(chan outcome, 1)}
	if spec.leave != nil {
		defer func() {
			if err != nil {
				spec.leave()
			}
		}()
	}

	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return Lease{}, ErrClosed
	}
	q, created, err := h.join(key, w, seen, first)
	h.mu.Unlock()
	if err != nil {
		return Lease{}, err
	}
	if created {
		h.subscribe(q)
	}

	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()

	var gone error // why the caller stops waiting early
	select {
	case o := <-w.result:
		return o.lease, o.err
	case <-timer.C:
	case <-ctx.Done():
		gone = ctx.Err()
	case <-h.done:
		gone = ErrClosed
	}

	h.mu.Lock()
	select {
	case o := <-w.result:
		// A release handed the waiter the key (handOff) as its time ran
		// out: keep it, or give it back if the caller has gone.
		h.mu.Unlock()
		if gone != nil && o.err == nil {
			undo(o.lease)
			return Lease{}, gone
		}
		return o.lease, o.err
	default:
	}
	if !w.inflight {
		h.remove(q, w)
		failed := q.failed
		h.mu.Unlock()
		if gone != nil {
			return Lease{}, gone
		}
		if failed != nil {
			// Redis failed the last attempt: another try now would only
			// keep the caller past its wait.
			return Lease{}, failed
		}
		return h.last(ctx, try, undo)
	}
	// An attempt for this waiter is under way: take its outcome.
	w.abandoned = true
	h.mu.Unlock()
	o := <-w.result
	if gone == nil {
		return o.lease, o.err
	}
	if o.err == nil {
		undo(o.lease)
	}
	return Lease{}, gone
}

// join appends w to the key's queue and decides whether the queue needs a
// try now. Called with h.mu.
func (h *hub) join(key string, w *waiter, seen watch, first error) (q *queue, created bool, err error) {
	q = h.queues[key]
	if h.total >= h.maxTotal || (q != nil && q.count >= h.maxPerKey) {
		return nil, false, ErrTooManyWaiters
	}
	created = q == nil
	if created {
		q = &queue{key: key, channel: h.wakeOf(key), backoff: backoffMin}
		h.queues[key] = q
	}
	h.insert(q, w, false)
	h.adjust(q, +1)

	blocked, isBlocked := blockedFor(first)
	switch {
	case seen.q != q || q.wakes != seen.wakes:
		// The queue is new, or a message came between the caller's try
		// and now: what the try saw may be stale.
		h.poke(q)
	case isBlocked:
		h.retryBy(q, blocked)
	case first != nil:
		q.failed = first
		h.retryBy(q, q.backoff)
	default:
		h.next(q)
	}
	return q, created, nil
}

// insert puts w in the queue by its place in Redis: a waiter of this
// process that Redis queued first is tried first. A waiter with no place
// (Redlock, or Redis did not answer its first try) joins at the end, and
// goes back to the head after its own try (back). Called with h.mu.
func (h *hub) insert(q *queue, w *waiter, back bool) {
	i, p := len(q.waiters), w.place()
	if p == 0 && back {
		i = 0
	}
	if p != 0 {
		for i > 0 && (q.waiters[i-1].place() == 0 || q.waiters[i-1].place() > p) {
			i--
		}
	}
	q.waiters = append(q.waiters, nil)
	copy(q.waiters[i+1:], q.waiters[i:])
	q.waiters[i] = w
}

// last is the final try of a waiter whose time ran out.
func (h *hub) last(ctx context.Context, try attemptFunc, undo func(Lease)) (Lease, error) {
	if ctx.Err() != nil {
		return Lease{}, ctx.Err()
	}
	actx, cancel := context.WithTimeout(ctx, h.bound)
	defer cancel()
	lease, err := try(actx)
	if err == nil && ctx.Err() != nil {
		undo(lease)
		return Lease{}, ctx.Err()
	}
	return lease, err
}

func (h *hub) remove(q *queue, w *waiter) {
	for i, x := range q.waiters {
		if x == w {
			q.waiters = append(q.waiters[:i], q.waiters[i+1:]...)
			h.adjust(q, -1)
			break
		}
	}
	h.next(q)
}

// adjust changes a queue's waiter count. Called with h.mu.
func (h *hub) adjust(q *queue, delta int) {
	q.count += delta
	h.total += delta
	if q.count == 0 {
		q.idle = time.Now()
	}
}

// poke says the key may be free: the queue tries as soon as it can. Called
// with h.mu.
func (h *hub) poke(q *queue) {
	q.wakes++
	q.poked = true
	h.next(q)
}

// retryBy makes sure the queue tries again within d: the holder's lease
// should have ended by then. An earlier timer stays. Called with h.mu.
func (h *hub) retryBy(q *queue, d time.Duration) {
	if q.timer != nil && !q.due.After(time.Now().Add(d)) {
		h.next(q)
		return
	}
	h.arm(q, d)
	h.next(q)
}

// arm sets the queue's timer to d from now, replacing any other. Called with
// h.mu.
func (h *hub) arm(q *queue, d time.Duration) {
	if q.timer != nil {
		q.timer.Stop()
	}
	// One millisecond past the holder's PTTL: Redis has expired it by then.
	d += time.Millisecond
	q.due = time.Now().Add(d)
	q.timer = time.AfterFunc(d, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if q.timer != nil && !time.Now().Before(q.due) {
			q.timer = nil
			h.poke(q)
		}
	})
}

func (h *hub) disarm(q *queue) {
	if q.timer != nil {
		q.timer.Stop()
		q.timer = nil
	}
}

// next is the one place that decides whether a queue starts an attempt.
// Called with h.mu after every change to the queue.
func (h *hub) next(q *queue) {
	switch {
	case h.closed || q.busy:
		return
	case len(q.waiters) == 0:
		h.disarm(q)
		q.poked = false
		return
	case !q.ready:
		return // the subscription's confirmation (or its timeout) pokes
	case !q.poked && q.timer != nil:
		return // nothing frees the key before the timer
	}
	// Poked, or waiters with no timer: nothing would ever retry for them.
	q.poked = false
	h.disarm(q)
	w := q.waiters[0]
	q.waiters = q.waiters[1:]
	w.inflight = true
	q.busy, q.trying = true, w
	h.working.Add(1)
	go h.attempt(q, w)
}

func (h *hub) attempt(q *queue, w *waiter) {
	defer h.working.Done()
	ctx, cancel := context.WithTimeout(h.ctx, h.bound)
	lease, err := w.try(ctx)
	cancel()

	h.mu.Lock()
	defer h.mu.Unlock()
	q.busy, q.trying = false, nil
	if w.handed != nil {
		// Whatever this try saw, a release gave the waiter the key.
		lease, err = *w.handed, nil
	}
	blocked, isBlocked := blockedFor(err)
	switch {
	case err == nil:
		q.failed, q.backoff = nil, backoffMin
		h.adjust(q, -1)
		w.result <- outcome{lease: lease}
		// If the new holder dies, its expiry frees the key for the next.
		h.arm(q, time.Until(lease.ExpiresAt))
	case isBlocked:
		q.failed, q.backoff = nil, backoffMin
		if w.abandoned {
			h.adjust(q, -1)
			w.result <- outcome{err: err}
		} else {
			// Back in its place: a waiter of this process that Redis
			// queued before it may have joined meanwhile, and is the one
			// Redis waits for. It tries now.
			w.inflight = false
			h.insert(q, w, true)
			if q.waiters[0] != w {
				q.poked = true
			}
		}
		h.arm(q, blocked)
	case (errors.Is(err, ErrUnavailable) || errors.Is(err, ErrRecovering)) && !w.abandoned && h.ctx.Err() == nil:
		// Redis is away, or recovering from a loss of data: keep the
		// waiter at the head and try again soon.
		q.failed = err
		w.inflight = false
		h.insert(q, w, true)
		h.arm(q, q.backoff)
		q.backoff = min(2*q.backoff, backoffMax)
	default:
		h.adjust(q, -1)
		w.result <- outcome{err: err}
		h.arm(q, q.backoff)
	}
	h.next(q)
}

// handOff gives the key to the waiter with this id, for which a release of
// this process took it (release.lua). It reports false when the waiter is
// no longer here to take it: the caller gives the key back.
func (h *hub) handOff(key, id string, l Lease) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	q := h.queues[key]
	if q == nil || id == "" {
		return false
	}
	if w := q.trying; w != nil && w.id == id {
		if w.abandoned {
			return false
		}
		w.handed = &l
		return true
	}
	for i, w := range q.waiters {
		if w.id == id {
			q.waiters = append(q.waiters[:i], q.waiters[i+1:]...)
			h.adjust(q, -1)
			w.result <- outcome{lease: l}
			// If the new holder dies, its expiry frees the key for the next.
			h.arm(q, time.Until(l.ExpiresAt))
			h.next(q)
			return true
		}
	}
	return false
}

// receive reads the wake-up subscription. After a reconnect, a failover or
// a slot migration every key may have missed a release: each queue is
// re-checked, as after its own subscription's confirmation.
func (h *hub) receive(ctx context.Context) {
	defer h.loops.Done()
	for {
		var nt notice
		select {
		case <-ctx.Done():
			return
		case nt = <-h.sub.Notices():
		}
		switch nt.kind {
		case noticeSubscribed:
			h.wake(nt.channel, true)
		case noticeReset:
			h.wakeAll()
		case noticeMessage:
			if ttl, ok := strings.CutPrefix(nt.payload, "renewed:"); ok {
				h.renewed(nt.channel, ttl)
			} else {
				h.wake(nt.channel, false)
			}
		}
	}
}

func (h *hub) wakeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, q := range h.queues {
		q.ready = true
		h.poke(q)
	}
}

func (h *hub) wake(channel string, confirmed bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	q := h.queues[keyOfChannel(channel)]
	if q == nil {
		return
	}
	if confirmed {
		q.ready = true
	}
	h.poke(q)
}

// renewed moves the expiry timer: the holder renewed, so nothing frees the
// key before the new TTL ends (a release would publish).
func (h *hub) renewed(channel, ttl string) {
	ms, err := strconv.ParseInt(ttl, 10, 64)
	if err != nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if q := h.queues[keyOfChannel(channel)]; q != nil && !q.busy && !q.poked && len(q.waiters) > 0 {
		h.arm(q, time.Duration(ms)*time.Millisecond)
	}
}

// subscribe subscribes to the queue's channel. The first try waits for Redis
// to confirm the subscription, so that a release between the caller's try
// and the subscription cannot be missed.
func (h *hub) subscribe(q *queue) {
	h.subMu.Lock()
	err := h.sub.Subscribe(h.ctx, q.channel)
	h.subMu.Unlock()
	if err != nil {
		// go-redis keeps the channel and subscribes again when it
		// reconnects; until then the queue retries on its own.
		h.markReady(q)
		return
	}
	time.AfterFunc(confirmTimeout, func() { h.markReady(q) })
}

func (h *hub) markReady(q *queue) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !q.ready {
		q.ready = true
		h.poke(q)
	}
}

// sweep drops queues that stayed empty, and their subscriptions.
func (h *hub) sweep() {
	defer h.loops.Done()
	t := time.NewTicker(sweepInterval)
	defer t.Stop()
	for {
		select {
		case <-h.done:
			return
		case <-t.C:
		}
		// subMu first: a new queue for a swept key must SUBSCRIBE after
		// this UNSUBSCRIBE, never before it.
		h.subMu.Lock()
		var channels []string
		h.mu.Lock()
		for key, q := range h.queues {
			if q.count == 0 && !q.busy && time.Since(q.idle) > idleQueue {
				h.disarm(q)
				delete(h.queues, key)
				channels = append(channels, q.channel)
			}
		}
		h.mu.Unlock()
		if len(channels) > 0 {
			_ = h.sub.Unsubscribe(h.ctx, channels...)
		}
		h.subMu.Unlock()
	}
}

// aliveLoop says in Redis that this process is alive, for the keys it has
// waiters on, every aliveEvery: not per waiter, so idle waiters cost Redis
// nothing more.
func (h *hub) aliveLoop() {
	defer h.loops.Done()
	if h.alive == nil {
		return
	}
	t := time.NewTicker(aliveEvery)
	defer t.Stop()
	for {
		select {
		case <-h.done:
			return
		case <-t.C:
		}
		h.mu.Lock()
		var keys []string
		for key, q := range h.queues {
			if q.count > 0 {
				keys = append(keys, key)
			}
		}
		h.mu.Unlock()
		if len(keys) > 0 {
			ctx, cancel := context.WithTimeout(h.ctx, h.bound)
			_ = h.alive(ctx, keys)
			cancel()
		}
	}
}

// close wakes every waiter with ErrClosed and waits for attempts in flight.
func (h *hub) close() {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return
	}
	h.closed = true
	for _, q := range h.queues {
		h.disarm(q)
	}
	close(h.done)
	h.mu.Unlock()
	// Attempts in flight end at once: their context is the hub's.
	h.cancel()
	h.working.Wait()
	_ = h.sub.Close()
	h.loops.Wait()
}
