-- state: read a live lease (never its token) and count its waiters.
--
-- KEYS[1] lease hash   KEYS[2] waiters hash
--
-- Reply: {owner, fence, count, ttl_ms, acquired_at_ms, renewed_at_ms,
--         renewals, pttl_ms, waiters, now_ms, left_ms} | {}
-- left_ms: how much of the lease was left at its last renewal ("" before
-- the first).
local lease, waiters = KEYS[1], KEYS[2]
local cur = redis.call('HMGET', lease, 'owner', 'fence', 'count', 'ttl_ms', 'acquired_at', 'renewed_at', 'renewals', 'left_ms')
if not cur[1] then
  return {}
end
local pttl = redis.call('PTTL', lease)
local now_ms = clock()

-- Each lockd process writes "count:valid_until_ms" under its own field; a
-- field past its validity belongs to a process that died while waiting.
local n = 0
local w = redis.call('HGETALL', waiters)
for i = 2, #w, 2 do
  local c, valid = string.match(w[i], '^(%d+):(%d+)$')
  if c and tonumber(valid) > now_ms then
    n = n + tonumber(c)
  end
end
return {cur[1], cur[2], tonumber(cur[3]), tonumber(cur[4]), cur[5], cur[6],
  tonumber(cur[7]), pttl, n, int(now_ms), cur[8]}
