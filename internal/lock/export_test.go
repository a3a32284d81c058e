package lock

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// ForceRelease breaks key's lease whoever holds it: ForceReleaseFence with
// fence 0, for the tests. lockd itself always names the fence (the
// dashboard) or passes 0 explicitly (the API), so the engine has no such
// method.
func (e *Engine) ForceRelease(ctx context.Context, key, actor, reason string) (Broken, error) {
	return e.ForceReleaseFence(ctx, key, 0, actor, reason)
}

// SweeperID is the id with which the engine of master i takes that
// master's sweeper lease (sweep.lua).
func (r *Redlock) SweeperID(i int) string { return r.nodes[i].hub.id }

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
