package lock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
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

// entry is a waiter's place in a key's queue in Redis (lib.lua): an id of
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

// leave takes a waiter that stopped waiting off the key's queue, in the
// background: its caller has its answer already. Should Redis not answer,
// the entry stops counting when its deadline passes.
func (e *Engine) leave(key, id string) {
	k := keysOf(key)
	e.leaveMu.Lock()
	defer e.leaveMu.Unlock()
	if e.closing {
		return
	}
	e.leaving.Add(1)
	go func() {
		defer e.leaving.Done()
		ctx, cancel := context.WithTimeout(context.Background(), e.opts.CallTimeout)
		defer cancel()
		_, _ = e.st.Run(ctx, e.scripts.leave, []string{k.queue, k.qinfo, k.lease}, id, k.wake)
	}()
}

// alive says in Redis that this process is alive, once per bucket of the
// keys it has waiters on (one script per bucket, in one pipeline).
func (e *Engine) alive(ctx context.Context, keys []string) error {
	buckets := map[string]bool{}
	for _, key := range keys {
		buckets[e.bucket(key)] = true
	}
	err := e.st.Pipelined(ctx, func(p redis.Pipeliner) error {
		for b := range buckets {
			e.scripts.alive.Run(ctx, p, []string{b + "replicas"}, e.id, aliveFor.Milliseconds())
		}
		return nil
	})
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		_ = e.st.Load(ctx, e.scripts.alive)
	}
	return err
}

func (e *Engine) sharedOf(key string) *sharedKeys {
	if e.slotShared == nil {
		return e.shared[0]
	}
	slot := store.SlotOf(key)
	p := &e.slotShared[slot]
	if sh := p.Load(); sh != nil {
		return sh
	}
	sh := e.newShared(store.SlotTags()[slot])
	p.Store(sh)
	return sh
}

// args are the arguments every call passes the same, boxed once: an int
// or a string passed as an argument is boxed (allocated) on every call.
type args struct {
	historyMax, retention, eventsMax, renewalsMax, replica, alive, queueTTL any
}
