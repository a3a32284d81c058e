-- epoch: what a lockd does with a bucket's marker every Options.EpochRefresh
-- (epoch.lua of the modules): it makes itself known, learns the other
-- lockds, and notices that Redis lost its data (the marker gone, or made
-- anew by another lockd).
--
-- KEYS[1] epoch marker   KEYS[2] the bucket's expiry schedule
-- ARGV[1] the epoch id this lockd saw last, or ""
-- ARGV[2] min_ms: the shortest quarantine after a loss
-- ARGV[3] a new epoch id, used if the marker must be made
-- ARGV[4] this lockd's replica id
-- ARGV[5] ms its own live leases have left at most (0: none)
-- ARGV[6] the lockds it knows ("replica=ms_left …", from its last read):
--         those with leases live are pending in a marker made anew
-- ARGV[7] "restored": this lockd has put its leases back in the marker
--         whose id is ARGV[1] (epoch.restored)
--
-- Reply: {epoch_id, until_ms left, live_ms left, lockds, new}: live is how
-- long the last lease, shared hold or permit of the bucket lasts (an
-- exclusive lease is on the schedule by its expiry; a shared or semaphore
-- key by its first holder's there, and by its last one's on latest_of);
-- lockds is "replica=ms_left …" of the lockds the marker knows; new is
-- "1" when the marker's id is not ARGV[1] and ARGV[1] was not "": Redis
-- lost the data this lockd knew, which it must put back, then call again
-- with ARGV[7].
local now = clock()
local marker, seen, min_ms, rid = KEYS[1], ARGV[1], tonumber(ARGV[2]), ARGV[4]
local id = redis.call('HGET', marker, 'id')
local untl, new = 0, ''
if not id then
  id = ARGV[3]
  if seen ~= '' then
    -- This lockd is the first to notice the loss.
    untl, new = epoch.start(marker, id, ARGV[6] .. ' ' .. rid .. '=' .. ARGV[5], min_ms, now), '1'
  else
    redis.call('HSET', marker, 'id', id, 'u2', '0', 'layout', epoch.layout)
  end
elseif seen ~= '' and id ~= seen then
  new = '1'
  untl = tonumber(redis.call('HGET', marker, 'u2') or '0') or 0
elseif ARGV[7] == 'restored' then
  untl = epoch.restored(marker, rid, now)
else
  untl = tonumber(redis.call('HGET', marker, 'u2') or '0') or 0
  if untl > now then
    untl = epoch.settle(marker, now)
  end
end
-- lockd of the layout before stay out while this one runs (epoch.layout).
redis.call('HSET', marker, 'until', epoch.old_fence(now, min_ms))
-- A lockd makes itself known only in the marker it has restored into.
if new == '' then
  local left = tonumber(ARGV[5])
  if left > 0 then
    redis.call('HSET', marker, 'r:' .. rid, string.format('%d', now + left))
  else
    redis.call('HDEL', marker, 'r:' .. rid)
  end
end
local h = redis.call('HGETALL', marker)
local known = {}
for i = 1, #h, 2 do
  if string.sub(h[i], 1, 2) == 'r:' then
    local left = (tonumber(h[i + 1]) or 0) - now
    if left <= 0 then
      redis.call('HDEL', marker, h[i])
    else
      known[#known + 1] = string.sub(h[i], 3) .. '=' .. string.format('%d', left)
    end
  end
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
return {id, int(math.max(0, untl - now)), int(math.max(0, live - now)), table.concat(known, ' '), new}
