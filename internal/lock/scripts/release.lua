-- release: give back one re-entry level; at zero delete the grant
-- (compare-and-delete), take it off the expiry schedule and wake waiters.
--
-- KEYS[1] lease hash   KEYS[2] history stream
-- KEYS[3] the bucket's expiry schedule   KEYS[4] the bucket's event stream
-- KEYS[5] holders (shared or permits)    KEYS[6] wait queue
-- ARGV[1] token        ARGV[2] actor   ARGV[3] history cap
-- ARGV[4] wake channel ARGV[5] the event stream's cap
--
-- Reply: {"ok", count_left, acquired_at_ms} | {"not_found"} | {"lost"}
local lease, hist, sched, holders = KEYS[1], KEYS[2], KEYS[3], KEYS[5]
local token, actor, cap, channel = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
ev = {stream = KEYS[4], cap = ARGV[5], key = lock_of(lease)}

local cur = redis.call('HMGET', lease, 'owner', 'token', 'fence', 'ttl_ms', 'count', 'acquired_at', 'mode')
if cur[7] then
  -- One of several holders.
  local now_ms = clock()
  prune(lease, holders, hist, cap, now_ms)
  local raw = redis.call('HGET', lease, 'h:' .. token)
  if not raw then
    if settle(lease, holders, sched, ev.key, now_ms) > 0 then
      return {'lost'}
    end
    return {'not_found'}
  end
  local h = cjson.decode(raw)
  local count = tonumber(h.c) - 1
  if count > 0 then
    h.c = int(count)
    redis.call('HSET', lease, 'h:' .. token, cjson.encode(h))
    record(hist, cap, nil, 'released', now_ms, h.o, h.f, h.t, count, actor, '', nil)
    return {'ok', count, h.a}
  end
  redis.call('HDEL', lease, 'h:' .. token)
  if h.i ~= '' then
    redis.call('HDEL', lease, 'i:' .. h.i)
  end
  redis.call('ZREM', holders, token)
  local left = settle(lease, holders, sched, ev.key, now_ms)
  record(hist, cap, nil, 'released', now_ms, h.o, h.f, h.t, 0, actor, '', nil)
  if (left == 0 or cur[7] == 'permit') and redis.call('EXISTS', KEYS[6]) == 1 then
    redis.call('PUBLISH', channel, 'released')
  end
  return {'ok', 0, h.a}
end
if not cur[2] then
  return {'not_found'}
end
if cur[2] ~= token then
  return {'lost'}
end

local now_ms = clock()
local count = tonumber(cur[5]) - 1
local exp = nil
if count > 0 then
  redis.call('HSET', lease, 'count', count)
  exp = now_ms + redis.call('PTTL', lease)
else
  count = 0
  redis.call('DEL', lease)
  redis.call('ZREM', sched, ev.key)
  redis.call('PUBLISH', channel, 'released')
end
-- The history's TTL was set past this lease's end when it was granted or
-- renewed: no PEXPIRE here.
record(hist, cap, nil, 'released', now_ms, cur[1], cur[3], cur[4], count, actor, '', exp)
return {'ok', count, cur[6]}
