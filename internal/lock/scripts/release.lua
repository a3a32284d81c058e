-- release: give back one re-entry level; at zero delete the lease
-- (compare-and-delete) and wake waiters.
--
-- KEYS[1] lease hash   KEYS[2] history stream
-- ARGV[1] token        ARGV[2] actor   ARGV[3] history cap
-- ARGV[4] retention_ms ARGV[5] wake channel
--
-- Reply: {"ok", count_left} | {"not_found"} | {"lost"}
local lease, hist = KEYS[1], KEYS[2]
local token, actor, cap, retention, channel = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4]), ARGV[5]

local cur = redis.call('HMGET', lease, 'owner', 'token', 'fence', 'ttl_ms')
if not cur[2] then
  return {'not_found'}
end
if cur[2] ~= token then
  return {'lost'}
end

local now_ms = clock()
local count = redis.call('HINCRBY', lease, 'count', -1)
local exp = nil
if count > 0 then
  exp = now_ms + redis.call('PTTL', lease)
else
  count = 0
  redis.call('DEL', lease)
  redis.call('PUBLISH', channel, 'released')
end
record(hist, cap, retention, 'released', now_ms, cur[1], cur[3], cur[4], count, actor, '', exp)
return {'ok', count}
