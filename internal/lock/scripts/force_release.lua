-- force_release: break a key's grants whoever holds them (or the one with
-- a given fence), take it off the expiry schedule and wake waiters.
--
-- The call (c, below; protocol.go's forceReleaseCall in the same order):
-- lease, hist (history), sched (the bucket's expiry schedule), stream (its
-- event stream), holders (shared or permits): keys; actor, reason,
-- channel (wake), fence (the fence to break, or "" for every holder),
-- trace (the request's trace id, or ""); and, each "" when left off the
-- end: op ("request": ask the holder to step aside instead, exclusive.request,
-- with by; the fence is then "" or the holder's), by.
--
-- Reply: {"ok", owner, fence, acquired_at_ms[, more]} (of the newest
--        holder broken; more is 1 when holders are left that a call for
--        every holder did not reach: multi.force)
--      | {"not_found"} | {"lost"} (no holder has that fence)
--      | {"ok", owner, fence, at_ms} (op "request")
--      | {"mode", mode} (op "request" on shared holders or permits: a
--        request asks one holder, and they hold together)
local c = calls.force_release
c.lease, c.hist, c.sched, c.stream, c.holders = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
c.actor, c.reason, c.channel, c.fence, c.trace = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
c.op, c.by = ARGV[6] or '', ARGV[7] or ''
c.key, c.now_ms = lock_of(c.lease), clock()

local cur = exclusive.read(c)
if not cur then
  return {'not_found'}
elseif c.op == 'request' then
  if cur.multi then
    return {'mode', cur.multi}
  elseif c.fence ~= '' and cur.fence ~= c.fence then
    return {'lost'}
  end
  return exclusive.request(c, cur)
elseif cur.multi then
  return multi.force(c)
end
return exclusive.force(c, cur)
