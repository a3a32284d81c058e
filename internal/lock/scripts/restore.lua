-- restore: put back a lease that Redis lost with its data (epoch.lua), as
-- the lockd that granted or last renewed it knows it (restore.go), unless
-- the key holds another lease.
--
-- The call (c, below; protocol.go's restoreCall in the same order):
-- lease, hist (history), sched (the bucket's expiry schedule), holders
-- (shared or permits), stream (the bucket's event stream), tomb (the
-- lease's tombstone: it ended before the loss): keys; mode
-- ("x", "s" or "p"), token, owner, fence, count, ttl_ms, acquired_at_ms,
-- left_ms (how long it has left at most: its expiry is now + left_ms;
-- "@" and a Unix ms time: its expiry, by Redis's clock),
-- limit (a permit's), delay (lock-delay ms or ""), value, session (its
-- handle), reason (for the "restored" event), one ("1": one exclusive
-- lease missing while the epoch marker holds, a write a failover lost;
-- put back only if the key's history shows neither its end nor a later
-- lease), set (the size of the lock set it was granted in, "" for none):
-- argv.
--
-- Reply: {"restored"} | {"present"} (the key has this lease already) |
-- {"conflict"} (another lease holds the key) | {"ended"} (no time left)
-- ended says whether event e ended a lease.
local function ended(e)
  return e.type == 'released' or e.type == 'expired' or e.type == 'force_released'
end

-- restorable says, for one lease (ARGV one), whether the key's history
-- shows neither its end nor, for an exclusive lease, a later lease.
local function restorable(c, r)
  local fence = tonumber(r.fence)
  if r.mode == 'x' then
    local last = events.last(c.hist)
    return not last or tonumber(last.fence) < fence or (tonumber(last.fence) == fence and not ended(last))
  end
  for _, raw in ipairs(redis.call('LRANGE', c.hist, 0, -1)) do
    local e = events.unpack(raw)
    if e and tonumber(e.fence) == fence and ended(e) then
      return false
    end
  end
  return true
end

local c = calls.restore
c.lease, c.hist, c.sched, c.holders, c.stream = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
c.key, c.now_ms = lock_of(c.lease), clock()
local left = tonumber(ARGV[8])
if string.sub(ARGV[8], 1, 1) == '@' then
  left = tonumber(string.sub(ARGV[8], 2)) - c.now_ms
end
if left <= 0 or redis.call('EXISTS', KEYS[6]) == 1 then
  return {'ended'}
end
local r = {mode = ARGV[1], token = ARGV[2], owner = ARGV[3], fence = ARGV[4], count = ARGV[5], ttl = ARGV[6],
  acquired = ARGV[7], exp = c.now_ms + left, limit = tonumber(ARGV[9]) or 0, delay = ARGV[10], value = ARGV[11],
  session = ARGV[12], reason = ARGV[13], set = ARGV[15] or ''}
local cur = exclusive.read(c)
if ARGV[14] == '1' and not restorable(c, r) then
  return {'ended'}
end
if r.mode == 'x' then
  return exclusive.restore(c, cur, r)
end
return multi.restore(c, cur, r)
