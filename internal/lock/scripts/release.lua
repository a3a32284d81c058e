-- release: give back one re-entry level; at zero delete the grant
-- (compare-and-delete), take it off the expiry schedule and wake waiters.
--
-- KEYS[1] lease hash   KEYS[2] history list
-- KEYS[3] the bucket's expiry schedule   KEYS[4] the bucket's event stream
-- KEYS[5] holders (shared or permits)    KEYS[6] wait queue
-- KEYS[7] the queue's entries   KEYS[8] the bucket's replica liveness set
-- ARGV[1] token        ARGV[2] actor   ARGV[3] history cap
-- ARGV[4] wake channel ARGV[5] the event stream's cap
-- ARGV[6] this lockd's replica id, or "" to hand the key to nobody
-- ARGV[7] retention_ms
-- ARGV[8] "unclaimed": release only a key handed to a waiter (below) that
--         the waiter did not claim with a try of its own, else 
--
-- Reply: {"ok", count_left, acquired_at_ms}
--      | {"ok", 0, acquired_at_ms, waiter id, owner, token, fence, ttl_ms, now_ms}
--        when the key went to the next waiter, of this lockd
--      | {"claimed"} (ARGV[8]) | {"not_found"} | {"lost"}
local lease, hist, sched, holders = KEYS[1], KEYS[2], KEYS[3], KEYS[5]
local token, actor, cap, channel = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
ev = {stream = KEYS[4], cap = ARGV[5], key = lock_of(lease)}

local cur = redis.call('HMGET', lease, 'owner', 'token', 'fence', 'ttl_ms', 'count', 'acquired_at', 'mode', 'handed')
if cur[7] then
  -- One of several holders.
  local now_ms = clock()
  local h, status = holder_of(lease, holders, hist, cap, sched, ev.key, token, now_ms)
  if not h then
    return {status}
  end
  local count = tonumber(h.c) - 1
  if count > 0 then
    h.c = int(count)
    redis.call('HSET', lease, 'h:' .. token, cjson.encode(h))
    record(hist, cap, nil, 'released', now_ms, h.o, h.f, h.t, count, actor, '', nil)
    return {'ok', count, h.a}
  end
  redis.call('HDEL', lease, 'h:' .. token, 'f:' .. h.f)
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
if ARGV[8] == 'unclaimed' and not cur[8] then
  -- Giving back a key handed to a waiter that seemed gone: the waiter
  -- claimed it with a try of its own meanwhile (acquire.lua), so it is
  -- the waiter's.
  return {'claimed'}
end

local now_ms, now_us = clock()
local count = tonumber(cur[5]) - 1
if count > 0 then
  redis.call('HSET', lease, 'count', count)
  -- The history's TTL was set past this lease's end when it was granted
  -- or renewed: no PEXPIRE here.
  record(hist, cap, nil, 'released', now_ms, cur[1], cur[3], cur[4], count, actor, '', now_ms + redis.call('PTTL', lease))
  return {'ok', count, cur[6]}
end

redis.call('DEL', lease)
record(hist, cap, nil, 'released', now_ms, cur[1], cur[3], cur[4], 0, actor, '', nil)
-- Hand the key to the next waiter at once if it waits in this lockd (its
-- replica id is ARGV[6]): the lockd answers it without another call.
local q = {queue = KEYS[6], info = KEYS[7], replicas = KEYS[8], alive = {}, dead = {}}
local nx = ARGV[6] ~= '' and first_live(q, now_ms)
if nx and nx.r == ARGV[6] and nx.m == 'x' then
  local ttl = tonumber(nx.l)
  -- The newest event is this release, with the released lease's fence.
  local fence = grant_x(lease, hist, cap, tonumber(ARGV[7]), sched, nx.o, nx.t, ttl, nx.i, nx.a, now_ms, now_us,
    {fence = cur[3]}, nil)
  -- Until the waiter's own try claims it, a give-back (ARGV[8]) may undo it.
  redis.call('HSET', lease, 'handed', 1)
  redis.call('ZREM', q.queue, nx.id)
  redis.call('HDEL', q.info, nx.id)
  forget(q)
  return {'ok', 0, cur[6], nx.id, nx.o, nx.t, fence, ttl, now_ms}
end
redis.call('ZREM', sched, ev.key)
redis.call('PUBLISH', channel, 'released')
forget(q)
return {'ok', 0, cur[6]}
