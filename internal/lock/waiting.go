package lock

import (
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/lockd/lockd/internal/lock/store"
	"github.com/lockd/lockd/internal/lock/wait"
)

const (
	// aliveEvery is how often a process with waiters says in Redis that it
	// is alive; aliveFor how long that stays true. A process that dies
	// leaves its waiters queued in Redis at most aliveFor: those behind
	// them retry when it ends (scripts/lib/queue.lua).
	aliveEvery = 400 * time.Millisecond
	aliveFor   = 1600 * time.Millisecond
)

// hubConfig is the part of a wait hub's configuration that both engines
// share: what a lease and the engines' errors mean to a waiter.
func hubConfig(opts Options) wait.Config[Lease] {
	return wait.Config[Lease]{
		Expires:    func(l Lease) time.Time { return l.ExpiresAt },
		Blocked:    blockedFor,
		Transient:  transient,
		Renewed:    renewedFor,
		AliveEvery: aliveEvery,
		Bound:      opts.CallTimeout,
		MaxWaiters: opts.MaxWaiters,
		MaxPerKey:  opts.MaxWaitersPerKey,
	}
}

// transient says whether a try failed because Redis is away, or recovering
// from a loss of data: the waiter keeps its place and tries again soon.
func transient(err error) bool {
	return errors.Is(err, ErrUnavailable) || errors.Is(err, ErrRecovering)
}

// renewedFor reads a wake-up message: "renewed:<ttl ms>" says the holder
// renewed; the others (released, expired, …) that the key may be free.
func renewedFor(payload string) (time.Duration, bool) {
	ms, ok := strings.CutPrefix(payload, "renewed:")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(ms, 10, 64)
	if err != nil {
		return 0, false
	}
	return time.Duration(n) * time.Millisecond, true
}

// wakeChannels names a key's wake-up channel, and reads the key back.
var wakeChannels = store.Channels{
	Of:  func(key string) string { return keysOf(key).wake },
	Key: keyOfChannel,
}

// fromHub turns the hub's own errors into the engine's.
func fromHub(err error) error {
	switch {
	case errors.Is(err, wait.ErrClosed):
		return ErrClosed
	case errors.Is(err, wait.ErrTooManyWaiters):
		return ErrTooManyWaiters
	}
	return err
}
