package lock

import (
	"context"
	"strconv"
	"time"
)

// HeldKeys counts the keys (locks, semaphores, elections) that hold at
// least one lease now, store-wide: the members of the expiry schedule
// (expiry.go) whose expiry is still ahead, one ZCOUNT. It answers
// ErrUnsupported on a Cluster, where every slot has a schedule of its own
// (16,384 calls would be no gauge to scrape).
func (e *Engine) HeldKeys(ctx context.Context) (int64, error) {
	if e.n.st.Sharded() {
		return 0, ErrUnsupported
	}
	// The schedule's scores are Redis's clock; this host's can only be
	// near it, which a gauge can bear.
	now := strconv.FormatInt(time.Now().UnixMilli(), 10)
	n, err := e.n.st.Cmd().ZCount(ctx, newShared("").expiries, "("+now, "+inf").Result()
	return n, wrap("held keys", err)
}

// HeldKeys answers ErrUnsupported: each master keeps its own schedule, and
// a key counts where a majority holds it.
func (r *Redlock) HeldKeys(context.Context) (int64, error) { return 0, ErrUnsupported }
