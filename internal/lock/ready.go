package lock

import (
	"context"
)

// Ready reports whether Redis can grant right now: it answers, and it
// takes a write. A PING alone answers on a read-only replica, on a server
// out of memory (maxmemory with noeviction) and, for some commands, while
// loading, when every acquire fails; one small SET with a short expiry
// fails in exactly those cases, with the same errors as an acquire
// (ErrUnavailable). It costs one round trip. During the restart
// quarantine it is a *RecoveringError.
func (e *Engine) Ready(ctx context.Context) error { return e.n.ready(ctx) }

// ready is Ready on the node.
func (n *node) ready(ctx context.Context) error {
	if left := n.recovering(); left > 0 {
		return &RecoveringError{Remaining: left}
	}
	return wrap("ready", n.st.Writable(ctx, readyKey))
}
