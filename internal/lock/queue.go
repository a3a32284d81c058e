package lock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockd/lockd/internal/lock/store"
)

// entrySlack is how long a waiter's entry outlives its wait in Redis: the
// waiter's last try comes at its deadline, and a waiter that could not
// take itself off the queue (Redis was away) stops blocking others this
// long after.
const entrySlack = time.Second

// entry is a waiter's place in a key's queue in Redis (scripts/lib/queue.lua): an id of
// its own, and once a try queued it, its place, which it keeps if Redis
// drops it for a moment (its process seemed dead).
type entry struct {
	id   string
	wait time.Duration

	mu  sync.Mutex
	at  string
	num int64
}

func newEntry(wait time.Duration) (*entry, error) {
	var b [9]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("lock: waiter id: %w", err)
	}
	return &entry{id: hex.EncodeToString(b[:]), wait: wait}, nil
}

func (en *entry) place() string {
	en.mu.Lock()
	defer en.mu.Unlock()
	return en.at
}

// placed is the place as a number, for the order of the hub's queue; 0
// when not queued yet.
func (en *entry) placed() int64 {
	en.mu.Lock()
	defer en.mu.Unlock()
	return en.num
}

func (en *entry) setPlace(at string) {
	// A sorted set's score may come back in exponent notation.
	f, err := strconv.ParseFloat(at, 64)
	if err != nil || f <= 0 {
		return
	}
	n := int64(f)
	at = strconv.FormatInt(n, 10)
	en.mu.Lock()
	defer en.mu.Unlock()
	en.at, en.num = at, n
}

// leave takes a waiter that stopped waiting off the key's queue and marks
// it ended (leave.lua): from then on no try of the waiter that Redis runs
// late queues or grants it, and the next round of the same request (its
// Idempotency-Key) finds its place. With now set, the first attempt runs
// before the caller has its answer: a refusal (409) must not go out while
// a late try may still be granted, nor the next round arrive before the
// place is kept. Otherwise (Redis did not answer the wait's last try)
// it runs in the background. A waiter left behind would count as live,
// ahead of those after it, until its deadline, so a leave that Redis did
// not answer is tried again in the background, with backoff, until then
// (or the engine closes); past it the entry stops counting anyway. It
// says whether the waiter has left (now, and Redis answered).
func (e *Engine) leave(key, id string, deadline time.Time, now, hold bool) bool {
	if now {
		ctx, cancel := context.WithTimeout(context.Background(), e.n.opts.CallTimeout)
		err := e.n.leave(ctx, key, id, hold)
		cancel()
		if err == nil {
			return true
		}
		if errors.Is(err, store.ErrClosed) {
			return false
		}
	}
	e.leaveMu.Lock()
	defer e.leaveMu.Unlock()
	if e.closing {
		return false
	}
	e.leaving.Add(1)
	go func() {
		defer e.leaving.Done()
		for attempt := 0; ; attempt++ {
			ctx, cancel := context.WithTimeout(context.Background(), e.n.opts.CallTimeout)
			err := e.n.leave(ctx, key, id, hold)
			cancel()
			if err == nil || errors.Is(err, store.ErrClosed) {
				return
			}
			d := min(50*time.Millisecond<<min(attempt, 5), time.Second)
			if time.Now().Add(d).After(deadline) {
				return
			}
			select {
			case <-time.After(d):
			case <-e.leaveStop:
				return
			}
		}
	}()
	return false
}

// leave runs leave.lua: the waiter id leaves key's queue.
func (n *node) leave(ctx context.Context, key, id string, hold bool) error {
	k := keysOf(key)
	holdArg := ""
	if hold {
		holdArg = "hold"
	}
	_, err := n.st.Run(ctx, n.scripts.leave, []string{k.queue, k.qinfo, k.lease}, id, k.wake, holdArg)
	return err
}

// alive says in Redis that this process is alive, once per bucket of the
// keys it has waiters on (one script per bucket, in one pipeline).
func (n *node) alive(ctx context.Context, keys []string) error {
	buckets := map[string]bool{}
	for _, key := range keys {
		buckets[n.bucket(key)] = true
	}
	err := n.st.Pipelined(ctx, func(p redis.Pipeliner) error {
		for b := range buckets {
			n.scripts.alive.Run(ctx, p, []string{b + "replicas"}, n.id, aliveFor.Milliseconds())
		}
		return nil
	})
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		_ = n.st.Load(ctx, n.scripts.alive)
	}
	return err
}

// sharedOf is the shared keys of key's bucket.
func (n *node) sharedOf(key string) *sharedKeys {
	if n.slotShared == nil {
		return n.shared[0]
	}
	slot := store.SlotOf(key)
	p := &n.slotShared[slot]
	if sh := p.Load(); sh != nil {
		return sh
	}
	sh := newShared(store.SlotTags()[slot])
	p.Store(sh)
	return sh
}

// args are the arguments every call passes the same, boxed once: an int
// or a string passed as an argument is boxed (allocated) on every call.
type args struct {
	historyMax, retention, eventsMax, renewalsMax, replica, alive, queueTTL any
}
