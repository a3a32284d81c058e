-- force_release: break a key's grants whoever holds them (or the one with
-- a given fence), take it off the expiry schedule and wake waiters.
--
-- KEYS[1] lease (lib.lua)   KEYS[2] history list
-- KEYS[3] the bucket's expiry schedule   KEYS[4] the bucket's event stream
-- KEYS[5] holders (shared or permits)
-- ARGV[1] actor        ARGV[2] reason   ARGV[3] wake channel
-- ARGV[4] the fence to break, or "" for every holder
-- ARGV[5] the request's trace id, or "" (lib.lua, ev)
-- From cfg (lib.lua): the caps, the retention.
--
-- Reply: {"ok", owner, fence, acquired_at_ms, more} (of the newest holder
--        broken; more is 1 when holders are left that a call for every
--        holder did not reach: force_max per call)
--      | {"not_found"} | {"lost"} (no holder has that fence)
local lease, hist, sched, holders = KEYS[1], KEYS[2], KEYS[3], KEYS[5]
local actor, reason, cap, channel, want = ARGV[1], ARGV[2], cfg.history_max, ARGV[3], ARGV[4]
ev = {stream = KEYS[4], cap = cfg.events_max, key = lock_of(lease), retention = cfg.retention, trace = ARGV[5]}

-- force_max bounds the holders one call breaks; Go calls again while more
-- are left (engine.go), so each call's time stays bounded.
local force_max = 50

local now_ms = clock()
local cur = read_lease(lease, now_ms)
if cur and cur.multi then
  prune(lease, holders, hist, cap, now_ms)
  local tokens
  if want == '' then
    tokens = redis.call('ZRANGEBYSCORE', holders, '(' .. int(now_ms), '+inf', 'LIMIT', 0, force_max)
  elseif redis.call('HEXISTS', lease, 'fx') == 1 then
    tokens = {redis.call('HGET', lease, 'f:' .. want)}
  else
    -- A lease made before the fence index: look at each holder (at most
    -- the holders' cap).
    tokens = redis.call('ZRANGE', holders, 0, -1)
  end
  local broken = nil
  for _, t in ipairs(tokens) do
    local raw = t and redis.call('HGET', lease, 'h:' .. t)
    local h = raw and cjson.decode(raw)
    if h and (want == '' or h.f == want) and tonumber(h.e) > now_ms then
      record(hist, cap, 'force_released', now_ms, h.o, h.f, h.t, h.c, actor, reason, nil, '1', '')
      redis.call('HDEL', lease, 'h:' .. t, 'f:' .. h.f)
      if h.i ~= '' then
        redis.call('HDEL', lease, 'i:' .. h.i)
      end
      redis.call('ZREM', holders, t)
      if not broken or tonumber(h.f) > tonumber(broken.f) then
        broken = h
      end
    end
  end
  local left = settle(lease, holders, sched, ev.key, now_ms)
  if not broken then
    if left > 0 then
      return {'lost'}
    end
    return {'not_found'}
  end
  redis.call(cfg.publish, channel, 'released')
  local more = 0
  if want == '' and left > 0 then
    more = 1
  end
  return {'ok', broken.o, broken.f, broken.a, more}
end
if not cur then
  return {'not_found'}
end
if want ~= '' and cur.fence ~= want then
  return {'lost'}
end

redis.call('DEL', lease)
redis.call('ZREM', sched, ev.key)
-- w: waiters woken now may queue again on the free key.
-- d: the lease's lock-delay holds the key off from now (lib.lua, delayed).
record(hist, cap, 'force_released', now_ms, cur.owner, cur.fence, cur.ttl, cur.count, actor, reason, nil, '1', cur.keep,
  cur.d)
redis.call(cfg.publish, channel, 'released')
return {'ok', cur.owner, cur.fence, cur.acquired}
