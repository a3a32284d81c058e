-- release: give back one re-entry level; at zero delete the grant
-- (compare-and-delete), take it off the expiry schedule and wake waiters.
--
-- KEYS[1] lease (lib.lua)   KEYS[2] history list
-- KEYS[3] the bucket's expiry schedule   KEYS[4] the bucket's event stream
-- KEYS[5] holders (shared or permits)    KEYS[6] wait queue
-- KEYS[7] the queue's entries   KEYS[8] the bucket's replica liveness set
-- ARGV[1] token        ARGV[2] actor   ARGV[3] wake channel
-- and, each "" when left off the end (protocol.go):
-- ARGV[4] this lockd's replica id, or "" to hand the key to nobody
-- ARGV[5] the request's trace id, or "" (lib.lua, ev); a hand-off's grant
--         keeps the waiter's
-- ARGV[6] "unclaimed": release only a key handed to a waiter (below) that
--         the waiter did not claim with a try of its own, else ""
-- From cfg (lib.lua): the caps, the retention, and redlock: a Redlock
-- master wakes waiters on every release, queued in Redis or not
-- (Redlock's wait in their process).
--
-- Reply: {"ok", count_left, acquired_at_ms}
--      | {"ok", 0, acquired_at_ms, waiter id, owner, token, fence, ttl_ms, now_ms}
--        when the key went to the next waiter, of this lockd
--      | {"claimed"} (ARGV[6]) | {"not_found"} | {"lost"}
local lease, hist, sched, holders = KEYS[1], KEYS[2], KEYS[3], KEYS[5]
local token, actor, cap, channel = ARGV[1], ARGV[2], cfg.history_max, ARGV[3]
local hand_to, unclaimed = ARGV[4] or '', ARGV[6] or ''
ev = {stream = KEYS[4], cap = cfg.events_max, key = lock_of(lease), retention = cfg.retention, trace = ARGV[5] or ''}

local now_ms, now_us = clock()
-- The common case in one command: an exclusive lease, released by its
-- holder. Anything else puts it back.
local raw = redis.pcall('GETDEL', lease)
local cur
if type(raw) == 'string' then
  cur = unpack_lease(raw)
elseif raw then
  cur = read_lease(lease, now_ms)
end
if cur and cur.multi then
  -- One of several holders.
  local h, status = holder_of(lease, holders, hist, cap, sched, ev.key, token, now_ms)
  if not h then
    return {status}
  end
  local count = tonumber(h.c) - 1
  if count > 0 then
    h.c = int(count)
    redis.call('HSET', lease, 'h:' .. token, cjson.encode(h))
    record(hist, cap, 'released', now_ms, h.o, h.f, h.t, count, actor, '', nil, '1', '')
    return {'ok', count, h.a}
  end
  redis.call('HDEL', lease, 'h:' .. token, 'f:' .. h.f)
  if h.i ~= '' then
    redis.call('HDEL', lease, 'i:' .. h.i)
  end
  redis.call('ZREM', holders, token)
  local left = settle(lease, holders, sched, ev.key, now_ms)
  record(hist, cap, 'released', now_ms, h.o, h.f, h.t, 0, actor, '', nil, '1', '')
  if (left == 0 or cur.multi == 'permit') and redis.call('EXISTS', KEYS[6]) == 1 then
    redis.call(cfg.publish, channel, 'released')
  end
  return {'ok', 0, h.a}
end
if not cur then
  return {'not_found'}
end
if cur.token ~= token then
  put_back(lease, raw, cur, now_ms)
  return {'lost'}
end
if unclaimed == 'unclaimed' and cur.handed == '' then
  -- Giving back a key handed to a waiter that seemed gone: the waiter
  -- claimed it with a try of its own meanwhile (acquire.lua), so it is
  -- the waiter's.
  put_back(lease, raw, cur, now_ms)
  return {'claimed'}
end

local count = tonumber(cur.count) - 1
if count > 0 then
  cur.count = int(count)
  save_lease(lease, cur, tonumber(cur.exp) - now_ms)
  -- The history's TTL was set past this lease's end when it was granted
  -- or renewed: no PEXPIRE here.
  record(hist, cap, 'released', now_ms, cur.owner, cur.fence, cur.ttl, count, actor, '', cur.exp, cur.w, cur.keep)
  return {'ok', count, cur.acquired}
end

if cur.old then
  redis.call('DEL', lease)
end
record(hist, cap, 'released', now_ms, cur.owner, cur.fence, cur.ttl, '0', actor, '', nil, cur.w, cur.keep)
redis.call('ZREM', sched, ev.key)
if cur.w ~= '1' then
  -- Nobody queued while it was held (acquire.lua, waiting).
  if cfg.redlock then
    redis.call(cfg.publish, channel, 'released')
  end
  return {'ok', 0, cur.acquired}
end
-- Hand the key to the next waiter at once if it waits in this lockd (its
-- replica id is ARGV[4]): the lockd answers it without another call.
local q = {queue = KEYS[6], info = KEYS[7], replicas = KEYS[8], alive = {}, dead = {}}
local nx = hand_to ~= '' and first_live(q, now_ms)
if nx and nx.r == hand_to and nx.m == 'x' then
  local ttl = tonumber(nx.l)
  redis.call('ZREM', q.queue, nx.id)
  redis.call('HDEL', q.info, nx.id)
  forget(q)
  ev.trace = nx.tr
  -- The newest event is this release, with the released lease's fence.
  local fence = grant_x(lease, hist, cap, cfg.retention, sched, nx.o, nx.t, ttl, nx.i, nx.a, now_ms, now_us,
    {fence = cur.fence, keep = cur.keep}, nil, '1', '1', nx.ld or '', nx.v or '', nx.sn or '')
  -- handed: until the waiter's own try claims it, a give-back (ARGV[6])
  -- may undo it.
  return {'ok', 0, cur.acquired, nx.id, nx.o, nx.t, fence, ttl, now_ms}
end
redis.call(cfg.publish, channel, 'released')
forget(q)
return {'ok', 0, cur.acquired}
