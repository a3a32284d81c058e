// Package lock is lockd's lock engine: leases on Redis, each operation one
// atomic Lua script and one round trip.
//
// An exclusive lease is a Redis string with a TTL (`lockd:{K}:lease`), its
// fields packed into one value. Acquire creates it only when the key is
// free; renew, release and re-entry compare the holder's secret token
// inside the script, so a stale token never touches another holder's lease.
// Every grant gets a fence, a number that strictly increases per key: past
// the fence of the key's newest event, and floored at the Redis clock in
// microseconds, so fences keep increasing across expiry, lockd restarts and
// the history's lapse. Events go to a capped list per key
// (`lockd:{K}:history`), one packed string each, so a key locked once
// keeps a few hundred bytes for the retention. All keys of one lock share
// a hash tag, so one script can touch them all on Redis Cluster.
//
// Waiting is push, not poll: release and force-release PUBLISH on the key's
// channel; a timer at the holder's PTTL covers expiry. Each key has one FIFO
// queue in Redis (`lockd:{K}:queue`, queue.go): a waiter's first try puts it
// there, and a grant goes only to a request that no live waiter queued
// before it is blocked by, whichever lockd each came through. A waiter
// counts while its deadline has not passed and its lockd says it is alive
// (one call per bucket every 400 ms, whatever the number of waiters), so a
// dead lockd's waiters stop blocking the queue within 1.6 s. A release
// hands the key straight to the next waiter when that one waits in the
// same lockd, without another call. Waiters of one key in one process
// queue locally in their Redis order and only the head retries, so a
// release costs each process one retry, not one per waiter (the wait hub,
// package wait). One function decides when a queue tries, so a queue with
// waiters always has a try in flight, a timer pending or a subscription
// about to be confirmed.
//
// Shared holds and semaphores keep their holders in the lease hash (one
// field per holder, JSON) and a sorted set by expiry; each holder has its
// own token, fence and TTL. Every operation names a Resource, a kind (lock
// or semaphore) and a name; each resource has its own keys, history,
// fences and queue, and keys.go alone maps it to Redis key names.
//
// The lock semantics talk to Redis through package store, which knows
// nothing of locks: one Store covers one server, Sentinel or Cluster, with
// wake-up subscriptions that follow failovers and slot moves. A node
// (node.go) runs the scripts on one Store, one call and one decoded reply
// per operation. The Engine is one node with the wait hub, the sweeper,
// the epoch refresher and the event feed beside it; Redlock (redlock.go)
// is a node per independent master with one wait hub and one sweeper, and
// decides by majority, writing fences back so that they stay strictly
// increasing. The
// restart quarantine (epoch.go) keeps a Redis that lost its data from
// granting keys whose forgotten leases may still be held.
//
// Caveats. A lease is only as safe as its TTL: a holder that pauses (GC,
// swap, a stopped VM) past its TTL loses the lease without noticing, which is
// what fences are for. Redis replicates asynchronously: a failover can lose
// a grant its replica never saw (Options.ReplicaAcks narrows that window).
// The quarantine needs a lockd that saw the marker before the loss: if every
// lockd restarts together with an empty Redis, none can tell. Timestamps come
// from the Redis clock.
package lock
