-- restore: put back a lease that Redis lost with its data (epoch.lua), as
-- the lockd that granted or last renewed it knows it (restore.go), unless
-- the key holds another lease.
--
-- The call (c, below; protocol.go's restoreCall in the same order):
-- lease, hist (history), sched (the bucket's expiry schedule), holders
-- (shared or permits), stream (the bucket's event stream): keys; mode
-- ("x", "s" or "p"), token, owner, fence, count, ttl_ms, acquired_at_ms,
-- left_ms (how long it has left at most: its expiry is now + left_ms),
-- limit (a permit's), delay (lock-delay ms or ""), value, session (its
-- handle), reason (for the "restored" event), one ("1": one exclusive
-- lease missing while the epoch marker holds, a write a failover lost;
-- put back only if the key's history shows neither its end nor a later
-- lease): argv.
--
-- Reply: {"restored"} | {"present"} (the key has this lease already) |
-- {"conflict"} (another lease holds the key) | {"ended"} (no time left)
local c = calls.restore
c.lease, c.hist, c.sched, c.holders, c.stream = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
c.key, c.now_ms = lock_of(c.lease), clock()
local left = tonumber(ARGV[8])
if left <= 0 then
  return {'ended'}
end
local r = {mode = ARGV[1], token = ARGV[2], owner = ARGV[3], fence = ARGV[4], count = ARGV[5], ttl = ARGV[6],
  acquired = ARGV[7], exp = c.now_ms + left, limit = tonumber(ARGV[9]) or 0, delay = ARGV[10], value = ARGV[11],
  session = ARGV[12], reason = ARGV[13]}
local cur = exclusive.read(c)
if ARGV[14] == '1' then
  local last = events.last(c.hist)
  if r.mode ~= 'x' or (last and (tonumber(last.fence) > tonumber(r.fence) or (tonumber(last.fence) == tonumber(r.fence)
    and (last.type == 'released' or last.type == 'expired' or last.type == 'force_released')))) then
    return {'ended'}
  end
end
if r.mode == 'x' then
  return exclusive.restore(c, cur, r)
end
return multi.restore(c, cur, r)
