-- epoch: what a lockd reads of a bucket every Options.EpochRefresh for the
-- restart quarantine (epoch.lua of the modules, epoch.check), and what it adds when it finds
-- that Redis lost its data: the marker gone, or made anew by another lockd.
--
-- KEYS[1] epoch marker   KEYS[2] the bucket's expiry schedule
-- ARGV[1] the epoch id this lockd saw last, or "" (only read)
-- ARGV[2] live_ms: how long what this lockd knows of could still be live
-- ARGV[3] min_ms: the shortest quarantine after a loss
-- ARGV[4] a new epoch id, used if the marker must be made
--
-- Reply: {epoch_id or "", until_ms left, live_ms left}: live is how long
-- the last lease, shared hold or permit of the bucket lasts. Exclusive
-- leases are on the schedule by their expiry; a shared or semaphore key is
-- there by its first holder's, and by its last one's on latest_of.
local now = clock()
local id, untl = '', 0
if ARGV[1] ~= '' or redis.call('EXISTS', KEYS[1]) == 1 then
  id, untl = epoch.check(KEYS[1], ARGV[1], ARGV[2] .. ' ' .. ARGV[3] .. ' ' .. ARGV[4], now)
  -- lockd of the layout before stay out while this one runs (epoch.layout).
  redis.call('HSET', KEYS[1], 'until', epoch.old_fence(now, tonumber(ARGV[3])), 'layout', epoch.layout)
end
local latest = epoch.latest_of(KEYS[2])
-- Keys whose hash lapsed without a last settle leave here.
redis.call('ZREMRANGEBYSCORE', latest, '-inf', now)
local live = 0
for _, set in ipairs({KEYS[2], latest}) do
  local top = redis.call('ZRANGE', set, -1, -1, 'WITHSCORES')
  if top[2] then
    live = math.max(live, tonumber(top[2]))
  end
end
return {id, int(math.max(0, untl - now)), int(math.max(0, live - now))}
