package lock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// attemptTimeout bounds one retry on behalf of a waiter.
	attemptTimeout = 3 * time.Second
	// errorRetry is how soon the next waiter retries after a Redis error.
	errorRetry = 250 * time.Millisecond
	// confirmTimeout is how long a new queue waits for Redis to confirm its
	// subscription before it retries anyway.
	confirmTimeout = time.Second
	// idleQueue is how long an empty queue keeps its subscription, so a
	// steady hand-off does not SUBSCRIBE/UNSUBSCRIBE on every grant.
	idleQueue     = 30 * time.Second
	sweepInterval = 10 * time.Second
	// flushInterval batches waiter-count updates into one pipeline.
	flushInterval = 50 * time.Millisecond
)

// hub queues the waiters of this process, one FIFO per key, and wakes the
// head of a queue when the key's channel says it was released or when the
// holder's lease should have expired. Only the head retries, so a release
// costs one Redis call per process however many wait here.
type hub struct {
	e  *Engine
	id string // this process, in the waiters hash of each key

	ps    *redis.PubSub
	subMu sync.Mutex // keeps SUBSCRIBE and UNSUBSCRIBE in order on the wire

	mu     sync.Mutex
	queues map[string]*queue
	dirty  map[string]int // waiter counts not yet written to Redis
	total  int
	closed bool

	done    chan struct{}
	cancel  context.CancelFunc
	loops   sync.WaitGroup // receive, sweep and flush loops
	working sync.WaitGroup // attempts in flight
}

type queue struct {
	key     string
	channel string
	waiters []*waiter
	count   int // queued + in flight
	busy    bool
	pending bool // woken while busy: retry once the attempt ends
	ready   bool // Redis confirmed the subscription (or gave up waiting)
	timer   *time.Timer
	idle    time.Time
	held    *HeldError // the last holder seen
	heldAt  time.Time
}

type waiter struct {
	req       AcquireRequest
	result    chan outcome
	inflight  bool
	abandoned bool
}

type outcome struct {
	lease Lease
	err   error
}

func newHub(e *Engine) *hub {
	var b [8]byte
	_, _ = rand.Read(b[:])
	ctx, cancel := context.WithCancel(context.Background())
	h := &hub{
		e:      e,
		id:     hex.EncodeToString(b[:]),
		ps:     e.rdb.Subscribe(ctx),
		queues: map[string]*queue{},
		dirty:  map[string]int{},
		done:   make(chan struct{}),
		cancel: cancel,
	}
	h.loops.Add(3)
	go h.receive(ctx)
	go h.sweep()
	go h.flushLoop()
	return h
}

func (h *hub) waiting() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.total
}

func (h *hub) hasQueue(key string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	q := h.queues[key]
	return q != nil && q.count > 0
}

// wait queues the caller until it is granted the key, its wait ends (a
// *HeldError), ctx ends (ctx's error; any grant is released) or the hub
// closes (ErrClosed).
func (h *hub) wait(ctx context.Context, key string, req AcquireRequest, held *HeldError) (Lease, error) {
	start := time.Now()
	w := &waiter{req: req, result: make(chan outcome, 1)}

	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return Lease{}, ErrClosed
	}
	q := h.queues[key]
	if h.total >= h.e.opts.MaxWaiters || (q != nil && q.count >= h.e.opts.MaxWaitersPerKey) {
		h.mu.Unlock()
		return Lease{}, ErrTooManyWaiters
	}
	created := q == nil
	if created {
		q = &queue{key: key, channel: keysOf(key).wake}
		h.queues[key] = q
	}
	if held != nil {
		q.held, q.heldAt = held, start
	}
	q.waiters = append(q.waiters, w)
	h.adjust(q, +1)
	h.mu.Unlock()

	if created {
		h.subscribe(q)
	}

	deadline := time.NewTimer(req.Wait - time.Since(start))
	defer deadline.Stop()

	var gone error // why the caller stops waiting
	select {
	case o := <-w.result:
		return o.lease, o.err
	case <-deadline.C:
	case <-ctx.Done():
		gone = ctx.Err()
	case <-h.done:
		gone = ErrClosed
	}

	h.mu.Lock()
	if !w.inflight {
		h.remove(q, w)
		err := h.timeoutErr(q)
		h.mu.Unlock()
		if gone != nil {
			return Lease{}, gone
		}
		return Lease{}, err
	}
	// An attempt for this waiter is under way: take its outcome.
	w.abandoned = true
	h.mu.Unlock()
	o := <-w.result
	if gone == nil {
		return o.lease, o.err
	}
	if o.err == nil {
		// Granted to a caller that has gone: give it straight back.
		rctx, cancel := context.WithTimeout(context.Background(), attemptTimeout)
		_, _ = h.e.Release(rctx, key, o.lease.Token, req.Actor)
		cancel()
	}
	return Lease{}, gone
}

// timeoutErr is the 409 for a waiter whose time ran out. Called with h.mu.
func (h *hub) timeoutErr(q *queue) error {
	if q.held == nil {
		return &HeldError{Key: q.key}
	}
	e := *q.held
	e.Remaining = max(0, e.Remaining-time.Since(q.heldAt))
	return &e
}

func (h *hub) remove(q *queue, w *waiter) {
	for i, x := range q.waiters {
		if x == w {
			q.waiters = append(q.waiters[:i], q.waiters[i+1:]...)
			h.adjust(q, -1)
			break
		}
	}
}

// adjust changes a queue's waiter count. Called with h.mu.
func (h *hub) adjust(q *queue, delta int) {
	q.count += delta
	h.total += delta
	h.dirty[q.key] = q.count
	if q.count == 0 {
		q.idle = time.Now()
	}
}

// subscribe subscribes to the queue's channel. The first retry waits for
// Redis to confirm the subscription, so that a release between the failed
// try and the subscription cannot be missed.
func (h *hub) subscribe(q *queue) {
	h.subMu.Lock()
	err := h.ps.Subscribe(context.Background(), q.channel)
	h.subMu.Unlock()
	if err != nil {
		h.markReady(q.key)
		return
	}
	time.AfterFunc(confirmTimeout, func() { h.markReady(q.key) })
}

func (h *hub) markReady(key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if q := h.queues[key]; q != nil && !q.ready {
		q.ready = true
		h.kick(q)
	}
}

// kick starts a retry for the queue's head if none is under way. Called with h.mu.
func (h *hub) kick(q *queue) {
	if h.closed || !q.ready {
		return
	}
	if q.busy {
		q.pending = true
		return
	}
	if len(q.waiters) == 0 {
		return
	}
	w := q.waiters[0]
	q.waiters = q.waiters[1:]
	w.inflight = true
	q.busy = true
	if q.timer != nil {
		q.timer.Stop()
	}
	h.working.Add(1)
	go h.attempt(q, w)
}

func (h *hub) attempt(q *queue, w *waiter) {
	defer h.working.Done()
	ctx, cancel := context.WithTimeout(context.Background(), attemptTimeout)
	lease, err := h.e.try(ctx, q.key, w.req)
	cancel()

	h.mu.Lock()
	defer h.mu.Unlock()
	q.busy = false
	var held *HeldError
	switch {
	case err == nil:
		h.adjust(q, -1)
		w.result <- outcome{lease: lease}
		// If the new holder dies, its expiry wakes the next waiter.
		h.arm(q, time.Until(lease.ExpiresAt))
	case errors.As(err, &held):
		q.held, q.heldAt = held, time.Now()
		if w.abandoned {
			h.adjust(q, -1)
			w.result <- outcome{err: err}
		} else {
			w.inflight = false
			q.waiters = append([]*waiter{w}, q.waiters...)
		}
		h.arm(q, held.Remaining)
	default:
		h.adjust(q, -1)
		w.result <- outcome{err: err}
		h.arm(q, errorRetry)
	}
	if q.pending {
		q.pending = false
		h.kick(q)
	}
}

// arm sets the queue's timer: the retry for a lease that expires unreleased.
// Called with h.mu.
func (h *hub) arm(q *queue, d time.Duration) {
	if q.timer != nil {
		q.timer.Stop()
	}
	if len(q.waiters) == 0 {
		return
	}
	q.timer = time.AfterFunc(d+time.Millisecond, func() {
		h.mu.Lock()
		h.kick(q)
		h.mu.Unlock()
	})
}

// receive reads the hub's pub/sub connection. go-redis reconnects and
// resubscribes after an error; the confirmations that follow wake every
// queue, since a release may have been missed meanwhile.
func (h *hub) receive(ctx context.Context) {
	defer h.loops.Done()
	backoff := 50 * time.Millisecond
	for {
		msg, err := h.ps.ReceiveTimeout(ctx, 30*time.Second)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			var nerr net.Error
			if errors.As(err, &nerr) && nerr.Timeout() {
				// Quiet connection: a PING finds out whether it is dead.
				_ = h.ps.Ping(ctx)
				continue
			}
			select {
			case <-time.After(backoff):
			case <-ctx.Done():
				return
			}
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 50 * time.Millisecond
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				h.wake(m.Channel, true)
			}
		case *redis.Message:
			if ttl, ok := strings.CutPrefix(m.Payload, "renewed:"); ok {
				h.renewed(m.Channel, ttl)
			} else {
				h.wake(m.Channel, false)
			}
		}
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
	h.kick(q)
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
	if q := h.queues[keyOfChannel(channel)]; q != nil && !q.busy {
		h.arm(q, time.Duration(ms)*time.Millisecond)
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
				if q.timer != nil {
					q.timer.Stop()
				}
				delete(h.queues, key)
				channels = append(channels, q.channel)
			}
		}
		h.mu.Unlock()
		if len(channels) > 0 {
			_ = h.ps.Unsubscribe(context.Background(), channels...)
		}
		h.subMu.Unlock()
	}
}

// flushLoop writes this process's waiter counts to Redis, batched: a key's
// count is written when it changed, never while waiters only wait.
func (h *hub) flushLoop() {
	defer h.loops.Done()
	t := time.NewTicker(flushInterval)
	defer t.Stop()
	for {
		select {
		case <-h.done:
			h.flush()
			return
		case <-t.C:
			h.flush()
		}
	}
}

func (h *hub) flush() {
	h.mu.Lock()
	if len(h.dirty) == 0 {
		h.mu.Unlock()
		return
	}
	counts := h.dirty
	h.dirty = map[string]int{}
	h.mu.Unlock()

	valid := (h.e.opts.MaxWait + 10*time.Second).Milliseconds()
	ctx, cancel := context.WithTimeout(context.Background(), attemptTimeout)
	defer cancel()
	_, err := h.e.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for key, n := range counts {
			h.e.scripts.waiters.Run(ctx, p, []string{keysOf(key).waiters}, h.id, n, valid)
		}
		return nil
	})
	if err != nil {
		if redis.HasErrorPrefix(err, "NOSCRIPT") {
			_ = h.e.scripts.waiters.Load(ctx, h.e.rdb).Err()
		}
		// Write them again next time, unless newer counts came meanwhile.
		h.mu.Lock()
		for key, n := range counts {
			if _, ok := h.dirty[key]; !ok {
				h.dirty[key] = n
			}
		}
		h.mu.Unlock()
	}
}

// close wakes every waiter with ErrClosed, waits for attempts in flight and
// clears this process's waiter counts.
func (h *hub) close() {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return
	}
	h.closed = true
	for _, q := range h.queues {
		if q.timer != nil {
			q.timer.Stop()
		}
	}
	close(h.done)
	h.mu.Unlock()
	h.working.Wait()
	// Closing the connection ends the blocked read; the context alone does not.
	h.cancel()
	_ = h.ps.Close()
	h.loops.Wait()
}
