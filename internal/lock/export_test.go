package lock

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// ForceRelease breaks key's lease whoever holds it: ForceReleaseFence with
// fence 0, for the tests. lockd itself always names the fence (the
// dashboard) or passes 0 explicitly (the API), so the engine has no such
// method.
func (e *Engine) ForceRelease(ctx context.Context, res Resource, actor, reason string) (Broken, error) {
	return e.ForceReleaseFence(ctx, res, 0, actor, reason)
}

// SweeperID is the id with which the node of master i takes that
// master's sweeper lease (sweep.lua).
func (r *Redlock) SweeperID(i int) string { return r.nodes[i].id }

// WakeChannel is the pub/sub channel on which a lock's waiters are woken.
func WakeChannel(key string) string { return keysOf(key).wake }

// HistoryKey is the Redis key of a lock's history list.
func HistoryKey(key string) string { return keysOf(key).hist }

// RawHistory reads a lock's history straight from Redis, oldest first,
// without the lapse a History call records first.
func RawHistory(ctx context.Context, rdb redis.Cmdable, key string) ([]Event, error) {
	packed, err := rdb.LRange(ctx, keysOf(key).hist, 0, -1).Result()
	if err != nil {
		return nil, err
	}
	out := make([]Event, 0, len(packed))
	for _, p := range packed {
		ev, err := unpackEvent(p)
		if err != nil {
			return nil, err
		}
		out = append(out, ev)
	}
	return out, nil
}

// SetLeaseOwner rewrites the owner of key's exclusive lease straight in
// Redis, with a new TTL: a change of hands that no script announced.
func SetLeaseOwner(ctx context.Context, rdb redis.Cmdable, key, owner string, ttl time.Duration) error {
	raw, err := rdb.Get(ctx, keysOf(key).lease).Result()
	if err != nil {
		return err
	}
	f := strings.Split(raw, eventSep)
	f[1] = owner
	f[11] = strconv.FormatInt(time.Now().Add(ttl).UnixMilli(), 10) // exp
	return rdb.Set(ctx, keysOf(key).lease, strings.Join(f, eventSep), ttl).Err()
}

// LeaseToken is the token of key's exclusive lease as Redis holds it, or
// "" when there is none.
func LeaseToken(ctx context.Context, rdb redis.Cmdable, key string) string {
	raw, err := rdb.Get(ctx, keysOf(key).lease).Result()
	if err != nil {
		return ""
	}
	token, _, _ := strings.Cut(raw, eventSep)
	return token
}

// MarkWaiting says in Redis, as a queued waiter's try does, that key may
// have waiters (scripts/lib/gate.lua, flag): on its exclusive lease if held, else on
// its newest event.
func MarkWaiting(ctx context.Context, rdb redis.Cmdable, key string) error {
	k := keysOf(key)
	if raw, err := rdb.Get(ctx, k.lease).Result(); err == nil {
		f := strings.Split(raw, eventSep)
		f[13] = "1"
		return rdb.SetArgs(ctx, k.lease, strings.Join(f, eventSep), redis.SetArgs{KeepTTL: true}).Err()
	}
	last, err := rdb.LIndex(ctx, k.hist, -1).Result()
	if err == redis.Nil {
		return nil // no history: the next grant looks at the queue
	}
	if err != nil {
		return err
	}
	f := strings.Split(last, eventSep)
	f[10] = "1"
	return rdb.LSet(ctx, k.hist, -1, strings.Join(f, eventSep)).Err()
}

// OnSetGathering makes f run, in the acquire of a lock set with keys in
// several slots, after its first slot's grant and before the others'.
func (e *Engine) OnSetGathering(f func(keys []string)) { e.gathered = f }
