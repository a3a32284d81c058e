-- renew: extend a live grant if the token is the live one (compare-and-pexpire).
--
-- KEYS[1] lease hash   KEYS[2] renewals list   KEYS[3] wait queue
-- KEYS[4] the bucket's expiry schedule   KEYS[5] history list
-- KEYS[6] holders (shared or permits)    KEYS[7] the bucket's event stream
-- ARGV[1] token        ARGV[2] ttl_ms or "" (keep the lease's own)
-- ARGV[3] actor        ARGV[4] renewals cap     ARGV[5] retention_ms
-- ARGV[6] wake channel ARGV[7] history cap      ARGV[8] the event stream's cap
--
-- A renewal goes to its own capped list (packed as history events, lib.lua), with how much of the lease was
-- left when it came (left_ms), never to the history: a lease renewed every
-- few hundred ms would otherwise push every lifecycle event out of it. The
-- lease keeps left_ms of its last renewal for the at-risk check (state.lua).
--
-- Reply: {"ok", owner, token, fence, count, ttl_ms, acquired_at_ms, pttl_ms, now_ms,
--         [mode, limit] (shared holders or permits)} | {"not_found"} | {"lost"}
local lease, renewals, queue, sched = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local token, actor, cap, retention, channel = ARGV[1], ARGV[3], ARGV[4], tonumber(ARGV[5]), ARGV[6]

local cur = redis.call('HMGET', lease, 'owner', 'token', 'fence', 'count', 'ttl_ms', 'acquired_at', 'mode', 'limit')
local now_ms = clock()
if cur[7] then
  -- One of several holders.
  local holders = KEYS[6]
  ev = {stream = KEYS[7], cap = ARGV[8], key = lock_of(lease)}
  local h, status = holder_of(lease, holders, KEYS[5], ARGV[7], sched, ev.key, token, now_ms)
  if not h then
    return {status}
  end
  local ttl = tonumber(ARGV[2]) or tonumber(h.t)
  local left = tonumber(h.e) - now_ms
  h.t, h.r, h.e, h.l, h.n = int(ttl), int(now_ms), int(now_ms + ttl), int(left), int(tonumber(h.n) + 1)
  redis.call('HSET', lease, 'h:' .. token, cjson.encode(h))
  redis.call('ZADD', holders, h.e, token)
  settle(lease, holders, sched, ev.key, now_ms)
  push(renewals, cap, pack('renewed', int(now_ms), h.o, h.f, int(ttl), h.c, actor, '', nil, int(left)))
  redis.call('PEXPIRE', renewals, retention + ttl)
  redis.call('PEXPIRE', KEYS[5], retention + ttl)
  return {'ok', h.o, token, h.f, tonumber(h.c), ttl, h.a, ttl, now_ms, cur[7], tonumber(cur[8])}
end
if not cur[2] then
  return {'not_found'}
end
if cur[2] ~= token then
  return {'lost'}
end
local ttl = tonumber(ARGV[2]) or tonumber(cur[5])
local left = str(redis.call('PTTL', lease))
local ttl_s, now_s = str(ttl), str(now_ms)

redis.call('PEXPIRE', lease, ttl_s)
redis.call('HSET', lease, 'ttl_ms', ttl_s, 'renewed_at', now_s, 'left_ms', left)
redis.call('HINCRBY', lease, 'renewals', 1)
schedule(sched, lock_of(lease), now_ms + ttl)
push(renewals, cap, pack('renewed', now_s, cur[1], cur[3], ttl_s, cur[4], actor, '', nil, left))
local keep = str(retention + ttl)
redis.call('PEXPIRE', renewals, keep)
-- The history outlives the lease's end by the retention, however long it
-- is renewed.
redis.call('PEXPIRE', KEYS[5], keep)
if redis.call('EXISTS', queue) == 1 then
  redis.call('PUBLISH', channel, 'renewed:' .. ttl)
end
return {'ok', cur[1], cur[2], cur[3], tonumber(cur[4]), ttl, cur[6], ttl, now_ms}
