-- renew: extend a live lease if the token is the live one (compare-and-pexpire).
--
-- KEYS[1] lease hash   KEYS[2] history stream   KEYS[3] waiters hash
-- KEYS[4] epoch marker (acquire.lua): its maxttl grows with a longer TTL
-- ARGV[1] token        ARGV[2] ttl_ms or "" (keep the lease's own)
-- ARGV[3] actor        ARGV[4] history cap      ARGV[5] retention_ms
-- ARGV[6] wake channel
--
-- Reply: {"ok", owner, token, fence, count, ttl_ms, acquired_at_ms, pttl_ms, now_ms}
--      | {"not_found"} | {"lost"}
local lease, hist, waiters, epoch = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local token, actor, cap, retention, channel = ARGV[1], ARGV[3], ARGV[4], tonumber(ARGV[5]), ARGV[6]

local cur = redis.call('HMGET', lease, 'owner', 'token', 'fence', 'count', 'ttl_ms', 'acquired_at')
if not cur[2] then
  return {'not_found'}
end
if cur[2] ~= token then
  return {'lost'}
end
local ttl = tonumber(ARGV[2]) or tonumber(cur[5])
local now_ms = clock()

redis.call('PEXPIRE', lease, ttl)
redis.call('HSET', lease, 'ttl_ms', ttl, 'renewed_at', now_ms)
if ARGV[2] ~= '' and ttl > (tonumber(redis.call('HGET', epoch, 'maxttl')) or 0) then
  redis.call('HSET', epoch, 'maxttl', ttl)
end
redis.call('HINCRBY', lease, 'renewals', 1)
record(hist, cap, retention + ttl, 'renewed', now_ms, cur[1], cur[3], ttl, cur[4], actor, '', now_ms + ttl)
if redis.call('EXISTS', waiters) == 1 then
  redis.call('PUBLISH', channel, 'renewed:' .. ttl)
end
return {'ok', cur[1], cur[2], cur[3], tonumber(cur[4]), ttl, cur[6], ttl, now_ms}
