-- force_release: break a key's grants whoever holds them (or the one with
-- a given fence), take it off the expiry schedule and wake waiters.
--
-- The call (c, below; protocol.go's forceReleaseCall in the same order):
-- lease, hist (history), sched (the bucket's expiry schedule), stream (its
-- event stream), holders (shared or permits): keys; actor, reason,
-- channel (wake), fence (the fence to break, or "" for every holder),
-- trace (the request's trace id, or ""); and, each "" when left off the
-- end: op ("request": ask the holder to step aside instead, below, with
-- by; the fence is then "" or the holder's), by.
--
-- Reply: {"ok", owner, fence, acquired_at_ms[, more]} (of the newest
--        holder broken; more is 1 when holders are left that a call for
--        every holder did not reach: multi.force)
--      | {"not_found"} | {"lost"} (no holder has that fence)
--        (a key kept by a hold window after its holder released it,
--        exclusive.lua's keep_window, is broken as a lease: the window
--        ends; a request finds nobody to ask: not_found)
--      | {"ok", owner, fence, at_ms} (op "request")
--      | {"mode", mode} (op "request" on shared holders or permits: a
--        request asks one holder, and they hold together)
local c = calls.force_release
c.lease, c.hist, c.sched, c.stream, c.holders = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
c.actor, c.reason, c.channel, c.fence, c.trace = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
c.op, c.by = ARGV[6] or '', ARGV[7] or ''
c.key, c.now_ms = lock_of(c.lease), clock()

local cur = exclusive.read(c)
if not cur or (c.op == 'request' and cur.token == '') then
  return {'not_found'}
elseif c.op == 'request' then
  if cur.multi then
    return {'mode', cur.multi}
  elseif c.fence ~= '' and cur.fence ~= c.fence then
    return {'lost'}
  end
  -- The request lives in the lease itself (exclusive.lua's rq), answered
  -- by every renewal until the lease ends, so that asking costs a holder
  -- nobody asks nothing; a "release_requested" event with the lease's
  -- expiry, as a grant's, tells readers. Inline: a module function would
  -- be defined by every script on every call.
  local now_s = int(c.now_ms)
  cur.rq = now_s .. '\30' .. c.by .. '\30' .. c.reason
  exclusive.save(c.lease, cur, tonumber(cur.exp) - c.now_ms)
  events.record(c, {'release_requested', now_s, cur.owner, cur.fence, cur.ttl, cur.count, c.actor, c.reason, cur.exp,
    '', cur.w, cur.keep, cur.d, cur.s, c.trace})
  return {'ok', cur.owner, cur.fence, now_s}
elseif cur.multi then
  return multi.force(c)
end
return exclusive.force(c, cur)
