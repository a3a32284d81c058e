-- renew: extend a live lease if the token is the live one (compare-and-pexpire).
--
-- KEYS[1] lease hash   KEYS[2] renewals stream   KEYS[3] waiters hash
-- KEYS[4] epoch marker (acquire.lua): its maxttl grows with a longer TTL
-- KEYS[5] the bucket's expiry schedule   KEYS[6] history stream
-- ARGV[1] token        ARGV[2] ttl_ms or "" (keep the lease's own)
-- ARGV[3] actor        ARGV[4] renewals cap     ARGV[5] retention_ms
-- ARGV[6] wake channel
--
-- A renewal goes to its own capped stream, with how much of the lease was
-- left when it came (left_ms), never to the history: a lease renewed every
-- few hundred ms would otherwise push every lifecycle event out of it. The
-- lease keeps left_ms of its last renewal for the at-risk check (state.lua).
--
-- Reply: {"ok", owner, token, fence, count, ttl_ms, acquired_at_ms, pttl_ms, now_ms}
--      | {"not_found"} | {"lost"}
local lease, renewals, waiters, epoch, sched = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
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
local left = redis.call('PTTL', lease)

redis.call('PEXPIRE', lease, ttl)
redis.call('HSET', lease, 'ttl_ms', ttl, 'renewed_at', now_ms, 'left_ms', left)
if ARGV[2] ~= '' and ttl > (tonumber(redis.call('HGET', epoch, 'maxttl')) or 0) then
  redis.call('HSET', epoch, 'maxttl', ttl)
end
redis.call('HINCRBY', lease, 'renewals', 1)
schedule(sched, lock_of(lease), now_ms + ttl)
redis.call('XADD', renewals, 'MAXLEN', '~', cap, '*', 'type', 'renewed', 'at', now_ms, 'owner', cur[1],
  'fence', cur[3], 'ttl_ms', ttl, 'count', cur[4], 'actor', actor, 'reason', '', 'left_ms', left)
redis.call('PEXPIRE', renewals, retention + ttl)
-- The history outlives the lease's end by the retention, however long it
-- is renewed.
redis.call('PEXPIRE', KEYS[6], retention + ttl)
if redis.call('EXISTS', waiters) == 1 then
  redis.call('PUBLISH', channel, 'renewed:' .. ttl)
end
return {'ok', cur[1], cur[2], cur[3], tonumber(cur[4]), ttl, cur[6], ttl, now_ms}
