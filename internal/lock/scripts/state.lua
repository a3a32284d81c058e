-- state: read a key's live grants (never a token) and its wait queue.
--
-- The call (c, below): lease, queue, qinfo (the queue's entries), holders
-- (shared or permits), replicas (the bucket's replica liveness set): keys.
--
-- Reply: {} when nobody holds the key, else
--   {"x", now_ms, queue, owner, fence, count, ttl_ms, acquired_at_ms,
--    renewed_at_ms, renewals, pttl_ms, left_ms, waiters, value, rq, mh, set}
--    one exclusive holder (value: JSON, or ""; rq its release request,
--    exclusive.lua; mh when its hold window ends, or ""; set the size of
--    its lock set, or ""); count 0: the holder released inside its hold
--    window, and nobody holds the key until mh (exclusive.lua's
--    keep_window)
--   {"m", now_ms, queue, mode, limit, holders, waiters, holders_total, set}
--    shared holders or permits (set: the newest holder's lock set size)
-- queue: {owner, mode, since_ms, …} flat, live waiters in grant order among
--        the first entries (queue.page); waiters: the queue's length
-- holders: {owner, fence, count, ttl_ms, acquired_at_ms, renewed_at_ms,
--           renewals, expires_at_ms, left_ms, value, …} flat, the first page
--           of live ones by expiry, and the newest (the "last" token) if live;
--           holders_total: how many are live
-- Either reply may end with the marks of lock sets' grants, {fence, record
-- id, …}, while those sets gather keys in other slots (exclusive.lua's
-- set_mark): the reader asks their records whether they hold yet.
-- Whatever a key holds, one call reads a bounded part of it.
-- left_ms: how much of the grant was left at its last renewal ("" before
-- the first). Nothing is written: lapsed holders and dead waiters are only
-- left out.
local c = calls.state
c.lease, c.queue, c.qinfo, c.holders, c.replicas = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
c.now_ms = clock()
c.q = queue.of(c)

local cur = exclusive.read(c)
if not cur then
  return {}
end
local r = cur.multi and multi.state(c, cur) or exclusive.state(c, cur)
if cur.multi or cur.ls ~= '' then
  -- Grants of lock sets that gather keys in other slots (set_mark).
  local marks = redis.call('HGETALL', sibling(c.lease, 'setmark'))
  if #marks > 0 then
    r[#r + 1] = marks
  end
end
return r
