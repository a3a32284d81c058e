package lock

// The scripts' protocol: one Go type per script call, its fields in the
// order of the script's header (KEYS, then ARGV), so that a reader holds
// one call in their head and TestScriptHeaders holds each type to its
// script. Engine-wide values (caps, retention, replica id) come from
// Engine.arg; the rest is the request's.

// acquireCall is acquire.lua's call.
type acquireCall struct {
	keys     keys
	shared   *sharedKeys
	token    string // the new lease's, the same on every try of one waiter
	owner    string
	ttlMS    int64
	reentry  string // the holder's token for a re-entry, or ""
	idem     string // the idempotency tag, or ""
	actor    string
	intent   string // grantFree, or peek
	seen     string // epochArgs
	liveMS   int64
	newEpoch string
	minMS    int64
	mode     string // "x", "s" or "p"
	limit    int
	waiter   string // the waiter's queue id, or "" for a try-once request
	deadline int64  // ms from now
	place    string // the waiter's place from an earlier try, or ""
	quar     string // quarantineOff
	named    string // named
	redlock  string // Engine.redlockMaster
}

func (c acquireCall) run(e *Engine) ([]string, []any) {
	k, sh := c.keys, c.shared
	return []string{k.lease, k.hist, k.queue, sh.epoch, sh.expiries, sh.events, k.qinfo, k.holders, sh.replicas},
		[]any{c.token, c.owner, c.ttlMS, c.reentry, c.idem, c.actor,
			e.arg.historyMax, e.arg.retention, k.wake, c.intent,
			c.seen, c.liveMS, c.newEpoch, c.minMS, e.arg.eventsMax,
			c.mode, c.limit, c.waiter, e.arg.replica, e.arg.alive, c.deadline, c.place, e.arg.queueTTL,
			c.quar, c.named, e.opts.MaxHoldersPerKey, c.redlock}
}

// renewCall is renew.lua's call.
type renewCall struct {
	keys   keys
	shared *sharedKeys
	token  string
	ttl    string // ms, or "" to keep the lease's own
	actor  string
}

func (c renewCall) run(e *Engine) ([]string, []any) {
	k, sh := c.keys, c.shared
	return []string{k.lease, k.renewals, k.queue, sh.expiries, k.hist, k.holders, sh.events},
		[]any{c.token, c.ttl, c.actor, e.arg.renewalsMax, e.arg.retention, k.wake, e.arg.historyMax, e.arg.eventsMax}
}

// releaseCall is release.lua's call.
type releaseCall struct {
	keys      keys
	shared    *sharedKeys
	token     string
	actor     string
	handOff   bool   // hand the key to the next waiter if it waits in this lockd
	unclaimed string // giveBack
	redlock   string // Engine.redlockMaster
}

func (c releaseCall) run(e *Engine) ([]string, []any) {
	k, sh := c.keys, c.shared
	var handTo any = ""
	if c.handOff {
		handTo = e.arg.replica
	}
	return []string{k.lease, k.hist, sh.expiries, sh.events, k.holders, k.queue, k.qinfo, sh.replicas},
		[]any{c.token, c.actor, e.arg.historyMax, k.wake, e.arg.eventsMax, handTo, e.arg.retention, c.unclaimed, c.redlock}
}

// forceReleaseCall is force_release.lua's call.
type forceReleaseCall struct {
	keys   keys
	shared *sharedKeys
	actor  string
	reason string
	fence  string // the fence to break, or "" for every holder
}

func (c forceReleaseCall) run(e *Engine) ([]string, []any) {
	k, sh := c.keys, c.shared
	return []string{k.lease, k.hist, sh.expiries, sh.events, k.holders},
		[]any{c.actor, c.reason, e.arg.historyMax, k.wake, c.fence, e.arg.eventsMax, e.arg.retention}
}

// historyCall is history.lua's call.
type historyCall struct {
	keys     keys
	shared   *sharedKeys
	renewals bool // read the renewals, not the history
	limit    int
}

func (c historyCall) run(e *Engine) ([]string, []any) {
	k, sh := c.keys, c.shared
	read := k.hist
	if c.renewals {
		read = k.renewals
	}
	return []string{k.lease, k.hist, sh.expiries, sh.events, read, k.holders},
		[]any{c.limit, e.arg.historyMax, e.arg.retention, e.arg.eventsMax}
}
