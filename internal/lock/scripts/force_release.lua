-- force_release: break the lease whoever holds it, take it off the expiry
-- schedule and wake waiters.
--
-- KEYS[1] lease hash   KEYS[2] history stream
-- KEYS[3] the bucket's expiry schedule   KEYS[4] the bucket's event stream
-- ARGV[1] actor        ARGV[2] reason   ARGV[3] history cap
-- ARGV[4] wake channel ARGV[5] the fence to break, or "" for any
-- ARGV[6] the event stream's cap
--
-- Reply: {"ok", owner, fence, acquired_at_ms} | {"not_found"} | {"lost"} (another fence)
local lease, hist, sched = KEYS[1], KEYS[2], KEYS[3]
local actor, reason, cap, channel, want = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
ev = {stream = KEYS[4], cap = ARGV[6], key = lock_of(lease)}

local cur = redis.call('HMGET', lease, 'owner', 'fence', 'ttl_ms', 'count', 'acquired_at')
if not cur[1] then
  return {'not_found'}
end
if want ~= '' and cur[2] ~= want then
  return {'lost'}
end

redis.call('DEL', lease)
redis.call('ZREM', sched, ev.key)
record(hist, cap, nil, 'force_released', clock(), cur[1], cur[2], cur[3], cur[4], actor, reason, nil)
redis.call('PUBLISH', channel, 'released')
return {'ok', cur[1], cur[2], cur[5]}
