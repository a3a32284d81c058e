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
// quarantine it is a *RecoveringError, unless the quarantine is off in
// this process (Options.NoQuarantine), which then grants: readiness says
// what this process does, so that a load balancer that follows it sends
// traffic to a replica started with the quarantine off.
func (e *Engine) Ready(ctx context.Context) error { return e.n.ready(ctx) }

// ready is Ready on the node.
func (n *node) ready(ctx context.Context) error {
	if left := n.recovering(); left > 0 && !n.opts.NoQuarantine {
		return &RecoveringError{Remaining: left}
	}
	return wrap("ready", n.st.Writable(ctx, readyKey))
}
