package lock

import (
	"context"

	"github.com/lockd/lockd/internal/lock/store"
)

// Sentinel names the sentinels that watch a master, so that lockd can
// follow failovers with its wake-up subscription.
type Sentinel = store.Sentinel

// Topology says what lockd runs on: "redis" (one server), "sentinel",
// "cluster" or "redlock", and the nodes it sees.
type Topology = store.Topology

// Node is one Redis server behind lockd, as /readyz reports it.
type Node = store.Node

// Topology reports the topology and every node's role and reachability.
func (e *Engine) Topology(ctx context.Context) Topology { return e.n.topology(ctx) }

// topology is Topology on the node.
func (n *node) topology(ctx context.Context) Topology {
	ctx, cancel := n.bound(ctx)
	defer cancel()
	return n.st.Topology(ctx)
}
