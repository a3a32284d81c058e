-- release: give back one re-entry level; at zero delete the grant
-- (compare-and-delete), take it off the expiry schedule and wake waiters.
--
-- The call (c, below; protocol.go's releaseCall in the same order): lease,
-- hist (history), sched (the bucket's expiry schedule), stream (its event
-- stream), holders (shared or permits), queue, qinfo (the queue's
-- entries), replicas (the bucket's replica liveness set): keys; token,
-- actor, channel (wake); and, each "" when left off the end: hand_to
-- (this lockd's replica id, or "" to hand the key to nobody), trace (the
-- request's trace id; a hand-off's grant keeps the waiter's), unclaimed
-- ("unclaimed": release only a key handed to a waiter that the waiter did
-- not claim with a try of its own, exclusive.release; "back": a grant its
-- caller never had; either keeps no hold window; "set": its lock set's
-- release, the only one a key of a set takes), to (an election's
-- handover: the candidate that leads next, ahead of the queue).
--
-- Reply: {"ok", count_left, acquired_at_ms}
--      | {"ok", 0, acquired_at_ms, waiter id, owner, token, fence, ttl_ms, now_ms}
--        when the key went to the next waiter, of this lockd (exclusive.hand_off)
--      | {"claimed"} (unclaimed) | {"not_found"} | {"lost"}
--      | {"in_set", n} (a key of a lock set of n keys released alone:
--        nothing was released)
--      | {"not_candidate"} (to is not waiting: nothing was released)
local c = calls.release
c.lease, c.hist, c.sched, c.stream = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
c.token, c.actor, c.channel = ARGV[1], ARGV[2], ARGV[3]
c.trace, c.unclaimed, c.to = ARGV[5] or '', ARGV[6] or '', ARGV[7] or ''
c.key, c.now_ms, c.now_us = lock_of(c.lease), clock()
if c.to ~= '' then
  -- A handover: to's live exclusive entry goes first in the queue, so
  -- that the release below hands the key to it (or wakes it first);
  -- refused with nothing changed when the token does not lead or to is
  -- not waiting. Inline, not a module function: every script of the
  -- library would define it on every call.
  c.holders, c.queue, c.qinfo, c.replicas = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
  local cur, to = exclusive.read(c), c.to
  if not cur then
    return {'not_found'}
  elseif cur.multi or cur.token ~= c.token then
    return {'lost'}
  end
  local q = queue.of(c)
  local id = queue.walk(q, c.now_ms, function(id, e)
    if e.owner == to and e.mode == 'x' then
      return id
    end
  end)
  if not id then
    return {'not_candidate'}
  end
  local head = redis.call('ZRANGE', q.queue, 0, 0, 'WITHSCORES')
  redis.call('ZADD', q.queue, int(tonumber(head[2]) - 1), id)
end

-- The common case in one command: an exclusive lease, released by its
-- holder.
local cur, raw = exclusive.take_lease(c)
if not cur then
  return {'not_found'}
elseif not cur.multi then
  local r = exclusive.release(c, cur, raw)
  if r then
    return r
  end
end
-- The rest of the call, read only by a hand-off or shared holders.
c.holders, c.queue, c.qinfo, c.replicas = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
c.hand_to = ARGV[4] or ''
if cur.multi then
  return multi.release(c, cur)
end
return exclusive.hand_off(c, cur)
