// Package wait is the wait hub of one process: the callers that wait for a
// key queue here, one FIFO per key, and only the head of a queue retries,
// when the key's wake-up channel says it may be free or when the holder's
// grant should have ended. So a release costs each process one try, however
// many of its callers wait. The order is the order of the key's queue in the
// store (each waiter's place), so the head here is the one of this process
// that the store grants first.
//
// The hub knows nothing of what is waited for: a grant is any T, a try is a
// function, and the Config says what a try's error means, when a grant ends
// and which messages tell of a renewal. It imports nothing of lockd.
//
// Every queue keeps one invariant, decided in one place (next): while it has
// waiters, a try is in flight, a timer is pending, or it waits for its
// subscription to be confirmed (whose confirmation retries). Anything that
// may have freed the key (a message, a confirmation, a joiner that may have
// missed a message, a timer) pokes the queue; next starts the try.
package wait

import (
	"context"
	"errors"
	"sync"
	"time"
)

var (
	// ErrClosed answers a waiter when the hub closes, and a Wait after.
	ErrClosed = errors.New("wait: hub closed")
	// ErrTooManyWaiters answers a Wait beyond Config.MaxWaiters or
	// Config.MaxPerKey.
	ErrTooManyWaiters = errors.New("wait: too many waiters")
)

const (
	// backoffMin and backoffMax bound how soon a queue retries after a
	// transient error: its waiters keep waiting through a blip.
	backoffMin = 50 * time.Millisecond
	backoffMax = 500 * time.Millisecond
	// confirmTimeout is how long a new queue waits for the store to
	// confirm its subscription before it retries anyway.
	confirmTimeout = time.Second
	// idleQueue is how long an empty queue keeps its subscription, so a
	// steady hand-off does not subscribe and unsubscribe on every grant.
	idleQueue     = 30 * time.Second
	sweepInterval = 10 * time.Second
)

// Listener hears what the wake-up subscription receives, by key.
type Listener interface {
	// Subscribed: the store confirmed the subscription to the key's
	// channel; a message before it may have been missed.
	Subscribed(key string)
	// Message: a message on the key's channel.
	Message(key, payload string)
	// Reset: the subscription moved (a reconnect, a failover, a slot
	// migration); any key may have missed a message.
	Reset()
}

// Subscription is the process's wake-up subscription, one channel per key
// that has waiters here. It tells its Listener what it hears and follows
// the store's topology by itself (after a move it calls Reset).
type Subscription interface {
	Subscribe(ctx context.Context, key string) error
	Unsubscribe(ctx context.Context, keys ...string) error
	Close() error
}

// Config is what a hub needs from the engine that waits in it.
type Config[T any] struct {
	// Listen opens the process's wake-up subscription, which tells l what
	// it hears. New calls it once.
	Listen func(l Listener) Subscription
	// Expires is when a grant ends if its holder lets it lapse: the
	// queue tries again then, for the next waiter.
	Expires func(T) time.Time
	// Blocked says whether a try's error means that someone else comes
	// first (a holder, earlier waiters), and for how long at most.
	Blocked func(error) (time.Duration, bool)
	// Transient says whether a try's error means that the store is away
	// for a moment: the waiter keeps its place at the head and the queue
	// tries again with backoff.
	Transient func(error) bool
	// Renewed reads a message on a key's channel: whether it says the
	// holder renewed, and for how long nothing frees the key (a release
	// would send another message). Any other message may mean the key is
	// free.
	Renewed func(payload string) (time.Duration, bool)
	// Alive, when set, says in the store every AliveEvery that this
	// process still has waiters on keys (nil: the queues live in this
	// process only).
	Alive      func(ctx context.Context, keys []string) error
	AliveEvery time.Duration
	// Bound is one try's deadline.
	Bound time.Duration
	// MaxWaiters and MaxPerKey cap the waiters of this process, in all
	// and per key.
	MaxWaiters, MaxPerKey int
}

// Waiter is one caller's wait: how it tries, gives back a grant it no
// longer wants (Undo), leaves the key's queue in the store when it ends
// without a grant (Leave, may be nil), and its ID and place in that queue
// (may be empty: with no queue in the store, waiters are served in the
// order they came).
type Waiter[T any] struct {
	Try   func(ctx context.Context) (T, error)
	Undo  func(T)
	Leave func()
	ID    string
	// Place is the waiter's place in the store's queue, 0 while not known.
	Place func() int64
}

// Seen is what a caller saw of a key's queue before its own try, so that a
// wake-up between that try and Wait is not lost, and a hand-off between
// them is not refused (Watch).
type Seen struct {
	queue  uint64 // the queue's id, 0 for none
	wakes  uint64
	queued bool
	slot   slotKey // the caller's early slot, id "" for none
}

// slotKey names a caller that has tried but not yet joined the key's
// queue here (Watch with an id).
type slotKey struct{ key, id string }

// early is such a caller's slot: the grant a release of this process
// handed it before it joined, nil for none yet.
type early[T any] struct{ handed *T }

// Queued says whether others in this process already waited for the key.
func (s Seen) Queued() bool { return s.queued }

// Hub queues the waiters of one process; see the package comment.
type Hub[T any] struct {
	cfg Config[T]

	sub   Subscription
	subMu sync.Mutex // keeps Subscribe and Unsubscribe in order on the wire

	mu     sync.Mutex
	queues map[string]*queue[T]
	early  map[slotKey]*early[T] // callers between their first try and Wait
	made   uint64                // queues made so far: the next one's id
	total  int
	closed bool

	ctx     context.Context // ends when the hub closes
	done    chan struct{}
	cancel  context.CancelFunc
	loops   sync.WaitGroup // sweep and alive loops
	working sync.WaitGroup // tries in flight
}

type queue[T any] struct {
	id      uint64
	key     string
	waiters []*entry[T] // queued, in the store's order; the head is tried next
	count   int         // queued + in flight
	busy    bool        // a try is in flight
	trying  *entry[T]   // whose try
	poked   bool        // something may have freed the key: try now
	ready   bool        // the store confirmed the subscription (or the hub gave up waiting)
	timer   *time.Timer
	due     time.Time // when timer fires
	wakes   uint64    // pokes so far: a joiner compares it with its Seen
	backoff time.Duration
	failed  error // the last try's transient error, until one succeeds
	idle    time.Time
}

type entry[T any] struct {
	id        string
	place     func() int64
	try       func(ctx context.Context) (T, error)
	handed    *T // a release gave the waiter the key while it tried
	result    chan outcome[T]
	inflight  bool
	abandoned bool
}

type outcome[T any] struct {
	grant T
	err   error
}

// New starts a hub: its subscription (Config.Listen) and its loops. Close
// it to stop them.
func New[T any](c Config[T]) *Hub[T] {
	ctx, cancel := context.WithCancel(context.Background())
	h := &Hub[T]{
		cfg:    c,
		queues: map[string]*queue[T]{},
		early:  map[slotKey]*early[T]{},
		ctx:    ctx,
		done:   make(chan struct{}),
		cancel: cancel,
	}
	h.sub = c.Listen(listener[T]{h})
	h.loops.Add(2)
	go h.sweep()
	go h.aliveLoop()
	return h
}

// Waiting is the number of callers now waiting in this process.
func (h *Hub[T]) Waiting() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.total
}

// Watch snapshots the key's queue before the caller's own try. With an
// id (the caller's place in the store's queue, which its first try may
// take) the caller can be handed the key from then on: a release of this
// process that runs between that try and Wait hands it over (HandOff)
// instead of being told the waiter is not here, and Wait answers it. A
// caller that does not go on to Wait takes such a grant with Unwatch.
func (h *Hub[T]) Watch(key, id string) Seen {
	h.mu.Lock()
	defer h.mu.Unlock()
	var s Seen
	if id != "" {
		s.slot = slotKey{key, id}
		h.early[s.slot] = &early[T]{}
	}
	if q := h.queues[key]; q != nil {
		s.queue, s.wakes, s.queued = q.id, q.wakes, q.count > 0
	}
	return s
}

// Unwatch ends a Watch whose caller does not Wait: it answers the grant a
// release handed the caller meanwhile, if any, for the caller to keep or
// give back.
func (h *Hub[T]) Unwatch(s Seen) (T, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.takeEarly(s)
}

// takeEarly removes the caller's early slot and answers its grant. Called
// with h.mu.
func (h *Hub[T]) takeEarly(s Seen) (T, bool) {
	var zero T
	if s.slot.id == "" {
		return zero, false
	}
	e := h.early[s.slot]
	delete(h.early, s.slot)
	if e == nil || e.handed == nil {
		return zero, false
	}
	return *e.handed, true
}

// Wait queues w until it is granted, the deadline passes, ctx ends (ctx's
// error; a grant that races it is given back with w.Undo) or the hub closes
// (ErrClosed). seen is the caller's snapshot from before its own try, and
// first what that try answered (nil when it did not try). At the deadline
// the caller gets the answer of one last try, so that it learns who comes
// first as things are then; if the store is still failing, its error.
func (h *Hub[T]) Wait(ctx context.Context, key string, deadline time.Time, w Waiter[T], seen Seen, first error) (grant T, err error) {
	var zero T
	place := w.Place
	if place == nil {
		place = func() int64 { return 0 }
	}
	en := &entry[T]{id: w.ID, place: place, try: w.Try, result: make(chan outcome[T], 1)}
	if w.Leave != nil {
		defer func() {
			if err != nil {
				w.Leave()
			}
		}()
	}

	h.mu.Lock()
	if g, ok := h.takeEarly(seen); ok {
		// A release handed the caller the key before it joined.
		h.mu.Unlock()
		return g, nil
	}
	if h.closed {
		h.mu.Unlock()
		return zero, ErrClosed
	}
	q, created, err := h.join(key, en, seen, first)
	h.mu.Unlock()
	if err != nil {
		return zero, err
	}
	if created {
		h.subscribe(q)
	}

	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()

	var gone error // why the caller stops waiting early
	select {
	case o := <-en.result:
		return o.grant, o.err
	case <-timer.C:
	case <-ctx.Done():
		gone = ctx.Err()
	case <-h.done:
		gone = ErrClosed
	}

	return h.stop(ctx, q, en, w, gone)
}

// stop ends en's wait when its time ran out or its caller has gone (gone
// says why; nil at the deadline): it takes a grant that raced the end (and
// gives it back if the caller has gone), the outcome of a try under way,
// or, at the deadline, one last try's answer.
func (h *Hub[T]) stop(ctx context.Context, q *queue[T], en *entry[T], w Waiter[T], gone error) (T, error) {
	var zero T
	h.mu.Lock()
	select {
	case o := <-en.result:
		// A release handed the waiter the key (HandOff) as its time ran
		// out: keep it, or give it back if the caller has gone.
		h.mu.Unlock()
		if gone != nil && o.err == nil {
			w.Undo(o.grant)
			return zero, gone
		}
		return o.grant, o.err
	default:
	}
	if !en.inflight {
		h.remove(q, en)
		failed := q.failed
		h.mu.Unlock()
		if gone != nil {
			return zero, gone
		}
		if failed != nil {
			// The store failed the last try: another try now would only
			// keep the caller past its wait.
			return zero, failed
		}
		return h.last(ctx, w.Try, w.Undo)
	}
	// A try for this waiter is under way: take its outcome.
	en.abandoned = true
	h.mu.Unlock()
	o := <-en.result
	if gone == nil {
		return o.grant, o.err
	}
	if o.err == nil {
		w.Undo(o.grant)
	}
	return zero, gone
}

// join appends en to the key's queue and decides whether the queue needs a
// try now. Called with h.mu.
func (h *Hub[T]) join(key string, en *entry[T], seen Seen, first error) (q *queue[T], created bool, err error) {
	q = h.queues[key]
	if h.total >= h.cfg.MaxWaiters || (q != nil && q.count >= h.cfg.MaxPerKey) {
		return nil, false, ErrTooManyWaiters
	}
	created = q == nil
	if created {
		h.made++
		q = &queue[T]{id: h.made, key: key, backoff: backoffMin}
		h.queues[key] = q
	}
	h.insert(q, en, false)
	h.adjust(q, +1)

	blocked, isBlocked := h.blocked(first)
	switch {
	case seen.queue != q.id || q.wakes != seen.wakes:
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

func (h *Hub[T]) blocked(err error) (time.Duration, bool) {
	if err == nil {
		return 0, false
	}
	return h.cfg.Blocked(err)
}

// insert puts en in the queue by its place in the store: a waiter of this
// process that the store queued first is tried first. A waiter with no
// place (none in the store, or the store did not answer its first try)
// joins at the end, and goes back to the head after its own try (back).
// Called with h.mu.
func (h *Hub[T]) insert(q *queue[T], en *entry[T], back bool) {
	i, p := len(q.waiters), en.place()
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
	q.waiters[i] = en
}

// last is the final try of a waiter whose time ran out.
func (h *Hub[T]) last(ctx context.Context, try func(context.Context) (T, error), undo func(T)) (T, error) {
	var zero T
	if ctx.Err() != nil {
		return zero, ctx.Err()
	}
	actx, cancel := context.WithTimeout(ctx, h.cfg.Bound)
	defer cancel()
	grant, err := try(actx)
	if err == nil && ctx.Err() != nil {
		undo(grant)
		return zero, ctx.Err()
	}
	return grant, err
}

func (h *Hub[T]) remove(q *queue[T], en *entry[T]) {
	for i, x := range q.waiters {
		if x == en {
			q.waiters = append(q.waiters[:i], q.waiters[i+1:]...)
			h.adjust(q, -1)
			break
		}
	}
	h.next(q)
}

// adjust changes a queue's waiter count. Called with h.mu.
func (h *Hub[T]) adjust(q *queue[T], delta int) {
	q.count += delta
	h.total += delta
	if q.count == 0 {
		q.idle = time.Now()
	}
}

// poke says the key may be free: the queue tries as soon as it can. Called
// with h.mu.
func (h *Hub[T]) poke(q *queue[T]) {
	q.wakes++
	q.poked = true
	h.next(q)
}

// retryBy makes sure the queue tries again within d: the holder's grant
// should have ended by then. An earlier timer stays. Called with h.mu.
func (h *Hub[T]) retryBy(q *queue[T], d time.Duration) {
	if q.timer != nil && !q.due.After(time.Now().Add(d)) {
		h.next(q)
		return
	}
	h.arm(q, d)
	h.next(q)
}

// arm sets the queue's timer to d from now, replacing any other. Called with
// h.mu.
func (h *Hub[T]) arm(q *queue[T], d time.Duration) {
	if q.timer != nil {
		q.timer.Stop()
	}
	// One millisecond past the holder's TTL: the store has expired it by
	// then.
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

func (h *Hub[T]) disarm(q *queue[T]) {
	if q.timer != nil {
		q.timer.Stop()
		q.timer = nil
	}
}

// next is the one place that decides whether a queue starts a try. Called
// with h.mu after every change to the queue.
func (h *Hub[T]) next(q *queue[T]) {
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
	en := q.waiters[0]
	q.waiters = q.waiters[1:]
	en.inflight = true
	q.busy, q.trying = true, en
	h.working.Add(1)
	go h.attempt(q, en)
}

func (h *Hub[T]) attempt(q *queue[T], en *entry[T]) {
	defer h.working.Done()
	ctx, cancel := context.WithTimeout(h.ctx, h.cfg.Bound)
	grant, err := en.try(ctx)
	cancel()

	h.mu.Lock()
	defer h.mu.Unlock()
	q.busy, q.trying = false, nil
	if en.handed != nil {
		// Whatever this try saw, a release gave the waiter the key.
		grant, err = *en.handed, nil
	}
	blocked, isBlocked := h.blocked(err)
	switch {
	case err == nil:
		q.failed, q.backoff = nil, backoffMin
		h.adjust(q, -1)
		en.result <- outcome[T]{grant: grant}
		// If the new holder dies, its expiry frees the key for the next.
		h.arm(q, time.Until(h.cfg.Expires(grant)))
	case isBlocked:
		q.failed, q.backoff = nil, backoffMin
		if en.abandoned {
			h.adjust(q, -1)
			en.result <- outcome[T]{err: err}
		} else {
			// Back in its place: a waiter of this process that the store
			// queued before it may have joined meanwhile, and is the one
			// the store waits for. It tries now.
			en.inflight = false
			h.insert(q, en, true)
			if q.waiters[0] != en {
				q.poked = true
			}
		}
		h.arm(q, blocked)
	case h.cfg.Transient(err) && !en.abandoned && h.ctx.Err() == nil:
		// The store is away, or recovering from a loss of data: keep the
		// waiter at the head and try again soon.
		q.failed = err
		en.inflight = false
		h.insert(q, en, true)
		h.arm(q, q.backoff)
		q.backoff = min(2*q.backoff, backoffMax)
	default:
		h.adjust(q, -1)
		en.result <- outcome[T]{err: err}
		h.arm(q, q.backoff)
	}
	h.next(q)
}

// HandOff gives the key to the waiter with this id, for which a release of
// this process took it. It reports false when the waiter is no longer here
// to take it: the caller gives the key back.
func (h *Hub[T]) HandOff(key, id string, grant T) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if id == "" {
		return false
	}
	if e := h.early[slotKey{key, id}]; e != nil && e.handed == nil {
		// The waiter has tried, and not yet joined the queue: Wait (or
		// Unwatch) answers the grant.
		e.handed = &grant
		return true
	}
	q := h.queues[key]
	if q == nil {
		return false
	}
	if en := q.trying; en != nil && en.id == id {
		if en.abandoned {
			return false
		}
		en.handed = &grant
		return true
	}
	for i, en := range q.waiters {
		if en.id == id {
			q.waiters = append(q.waiters[:i], q.waiters[i+1:]...)
			h.adjust(q, -1)
			en.result <- outcome[T]{grant: grant}
			// If the new holder dies, its expiry frees the key for the next.
			h.arm(q, time.Until(h.cfg.Expires(grant)))
			h.next(q)
			return true
		}
	}
	return false
}

// listener is the hub's ear on its subscription. After a reconnect, a
// failover or a slot migration every key may have missed a release: each
// queue is re-checked, as after its own subscription's confirmation.
type listener[T any] struct{ h *Hub[T] }

func (l listener[T]) Subscribed(key string) { l.h.wake(key, true) }

func (l listener[T]) Message(key, payload string) {
	if ttl, ok := l.h.cfg.Renewed(payload); ok {
		l.h.renewed(key, ttl)
	} else {
		l.h.wake(key, false)
	}
}

func (l listener[T]) Reset() { l.h.wakeAll() }

func (h *Hub[T]) wakeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, q := range h.queues {
		q.ready = true
		h.poke(q)
	}
}

func (h *Hub[T]) wake(key string, confirmed bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	q := h.queues[key]
	if q == nil {
		return
	}
	if confirmed {
		q.ready = true
	}
	h.poke(q)
}

// renewed moves the expiry timer: the holder renewed, so nothing frees the
// key before the new TTL ends (a release would send a message).
func (h *Hub[T]) renewed(key string, ttl time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if q := h.queues[key]; q != nil && !q.busy && !q.poked && len(q.waiters) > 0 {
		h.arm(q, ttl)
	}
}

// subscribe subscribes to the queue's key. The first try waits for the
// store to confirm the subscription, so that a release between the
// caller's try and the subscription cannot be missed.
func (h *Hub[T]) subscribe(q *queue[T]) {
	h.subMu.Lock()
	err := h.sub.Subscribe(h.ctx, q.key)
	h.subMu.Unlock()
	if err != nil {
		// The subscription keeps the key and subscribes again when it
		// reconnects; until then the queue retries on its own.
		h.markReady(q)
		return
	}
	time.AfterFunc(confirmTimeout, func() { h.markReady(q) })
}

func (h *Hub[T]) markReady(q *queue[T]) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !q.ready {
		q.ready = true
		h.poke(q)
	}
}

// sweep drops queues that stayed empty, and their subscriptions.
func (h *Hub[T]) sweep() {
	defer h.loops.Done()
	t := time.NewTicker(sweepInterval)
	defer t.Stop()
	for {
		select {
		case <-h.done:
			return
		case <-t.C:
		}
		// subMu first: a new queue for a swept key must subscribe after
		// this unsubscribe, never before it.
		h.subMu.Lock()
		var keys []string
		h.mu.Lock()
		for key, q := range h.queues {
			if q.count == 0 && !q.busy && time.Since(q.idle) > idleQueue {
				h.disarm(q)
				delete(h.queues, key)
				keys = append(keys, key)
			}
		}
		h.mu.Unlock()
		if len(keys) > 0 {
			_ = h.sub.Unsubscribe(h.ctx, keys...)
		}
		h.subMu.Unlock()
	}
}

// aliveLoop says in the store that this process is alive, for the keys it
// has waiters on, every AliveEvery: not per waiter, so idle waiters cost
// the store nothing more.
func (h *Hub[T]) aliveLoop() {
	defer h.loops.Done()
	if h.cfg.Alive == nil {
		return
	}
	t := time.NewTicker(h.cfg.AliveEvery)
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
			ctx, cancel := context.WithTimeout(h.ctx, h.cfg.Bound)
			_ = h.cfg.Alive(ctx, keys)
			cancel()
		}
	}
}

// Close wakes every waiter with ErrClosed, waits for the tries in flight
// and closes the subscription.
func (h *Hub[T]) Close() {
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
	// Tries in flight end at once: their context is the hub's.
	h.cancel()
	h.working.Wait()
	_ = h.sub.Close()
	h.loops.Wait()
}
