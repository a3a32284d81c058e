package lock

import "context"

// ForceRelease breaks key's lease whoever holds it: ForceReleaseFence with
// fence 0, for the tests. lockd itself always names the fence (the
// dashboard) or passes 0 explicitly (the API), so the engine has no such
// method.
func (e *Engine) ForceRelease(ctx context.Context, key, actor, reason string) (Broken, error) {
	return e.ForceReleaseFence(ctx, key, 0, actor, reason)
}

// SweeperID is the id with which the engine of master i takes that
// master's sweeper lease (sweep.lua).
func (r *Redlock) SweeperID(i int) string { return r.nodes[i].id }
