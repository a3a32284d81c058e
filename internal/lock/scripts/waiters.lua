-- waiters: publish how many requests this lockd process has waiting on a key.
--
-- KEYS[1] waiters hash
-- ARGV[1] process id   ARGV[2] count   ARGV[3] validity_ms
--
-- Reply: 1
local waiters = KEYS[1]
local id, count, valid = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
if count == 0 then
  redis.call('HDEL', waiters, id)
  return 1
end
redis.call('HSET', waiters, id, count .. ':' .. int(clock() + valid))
if redis.call('PTTL', waiters) < valid then
  redis.call('PEXPIRE', waiters, valid)
end
return 1
