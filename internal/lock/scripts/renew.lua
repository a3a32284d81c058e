-- renew: extend a live grant if the token is the live one (compare-and-pexpire).
--
-- The call (c, below; protocol.go's renewCall in the same order): lease,
-- renewals (list), queue, sched (the bucket's expiry schedule), hist
-- (history), holders (shared or permits), stream (the bucket's event
-- stream): keys; token, ttl_ms ("" keeps the lease's own), actor, channel
-- (wake); and, each "" when left off the end: trace (the request's trace
-- id), value (JSON, "" keeps the grant's own; an exclusive lease's new
-- value is recorded as a "proclaimed" event), by_session ("1" when the
-- grant's session renews it, session.go: a grant bound to a session lives
-- as long as the session, so any other renewal keeps its expiry and
-- changes only its value; "set" when its lock set renews it, lockset.go:
-- a key of a set is renewed by its set or its session, never alone).
--
-- A renewal goes to its own capped list (packed as history events,
-- events.lua), with how much of the lease was left when it came (left_ms),
-- never to the history: a lease renewed every few hundred ms would
-- otherwise push every lifecycle event out of it. The lease keeps left_ms
-- of its last renewal for the at-risk check (state.lua).
--
-- A lease with a hold window lives at least until the window ends, whatever
-- TTL a renewal asks (exclusive.lua's through_window); the window stays.
--
-- Reply: the grant reply (grant_reply, status "ok") | {"not_found"} (no
-- lease, or a key kept by a hold window after its holder released it:
-- keep_window) | {"lost"} | {"in_set", n}: a key of a lock set of n keys
-- renewed alone
local c = calls.renew
c.lease, c.renewals, c.queue, c.sched = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
c.hist, c.holders, c.stream = KEYS[5], KEYS[6], KEYS[7]
c.token, c.ttl_ms, c.actor, c.channel = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
c.trace, c.value, c.by_session = ARGV[5] or '', ARGV[6] or '', ARGV[7] or ''
c.held_as, c.held_limit = nil, nil
c.key, c.now_ms = lock_of(c.lease), clock()

local cur = exclusive.read(c)
if not cur or cur.token == '' then
  return {'not_found'}
elseif cur.multi then
  return multi.renew(c, cur)
end
return exclusive.renew(c, cur)
