-- queue: the wait queue of a key (queue.go): a sorted set of waiter ids by
-- arrival (q.queue) and a hash of what each one is (q.info, JSON: r its
-- lockd's replica id, d its deadline ms, m its mode, s since ms, o owner;
-- for a hand-off (exclusive.hand_off) t its token, l ttl_ms, i
-- idempotency tag, a actor, ld lock-delay, v value, sn session, tr
-- trace, mh hold window; g the size of a lock set, whose waiter no hand-off grants). A waiter is live while its deadline has not passed and its
-- replica is: each lockd keeps its score in the bucket's replica set
-- (q.replicas) in the future while it has waiters, so an entry whose lockd
-- died leaves the queue when that score passes, without a heartbeat per
-- waiter.
local function parse_entry(s)
  if not s then
    return nil
  end
  local e = cjson.decode(s)
  e.rid, e.deadline, e.mode, e.since, e.owner, e.kept = e.r, tonumber(e.d), e.m, e.s, e.o, e.k == '1'
  return e
end

-- live_until is when the entry stops counting: its deadline, or when its
-- lockd's liveness ends, whichever is first (0: already dead).
function queue.live_until(q, e, now)
  if not e then
    return 0
  end
  -- A place kept between two rounds (queue.keep) lives by its deadline.
  local alive = e.kept and e.deadline or q.alive[e.rid]
  if alive == nil then
    alive = tonumber(redis.call('ZSCORE', q.replicas, e.rid)) or 0
    q.alive[e.rid] = alive
  end
  local u = math.min(alive, e.deadline)
  if u <= now then
    return 0
  end
  return u
end

-- walk_max bounds the queue entries one call looks at (and so the dead
-- ones it forgets), whatever the queue's length: a script's time stays
-- bounded, and no list is unpacked past what Lua allows (about 8,000).
local walk_max = 256

-- walk calls f(id, entry, live_until) for each live entry of the queue,
-- in order, until f returns something, and returns that; dead entries
-- met on the way are put on q.dead (see forget). It returns nil, true when
-- it stopped at walk_max entries without an answer.
function queue.walk(q, now, f)
  local i = 0
  while true do
    if i >= walk_max then
      return nil, true
    end
    local ids = redis.call('ZRANGE', q.queue, i, i + 15)
    if not ids[1] then
      return nil
    end
    local infos = redis.call('HMGET', q.info, unpack(ids))
    for j, id in ipairs(ids) do
      local e = parse_entry(infos[j])
      local u = queue.live_until(q, e, now)
      if u == 0 then
        q.dead[#q.dead + 1] = id
      else
        local r = f(id, e, u)
        if r ~= nil then
          return r
        end
      end
    end
    i = i + 16
  end
end

-- ahead walks the live entries queued before wid (all of them when wid is
-- not queued) and says whether a request of mode mode ('x' exclusive,
-- 's' shared, 'p' a permit of limit with used held) may be granted now:
-- true, or false and the entry that blocks it with how long it stays
-- live. Past walk_max entries it answers false, with the first live entry
-- it met (nil if none: the dead ones it met are forgotten, and a retry
-- looks further). It sets q.found when it met wid.
function queue.ahead(q, mode, used, limit, wid, now)
  local live, first, until_first = 0, nil, 0
  local r, cut = queue.walk(q, now, function(id, e, u)
    if id == wid or (e.kept and q.idem ~= '' and e.i == q.idem) then
      -- The caller, or the place its request kept between two rounds.
      q.found = true
      if id ~= wid then
        q.kept_id = id
      end
      return {true}
    end
    if not first then
      first, until_first = e, u
    end
    if mode == 'x' or (mode == 's' and e.mode ~= 's') then
      return {false, e, u - now}
    end
    if mode == 'p' then
      live = live + 1
      if used + live >= limit then
        return {false, e, u - now}
      end
    end
  end)
  if cut then
    return false, first, first and until_first - now or 0
  end
  if not r then
    return true
  end
  return r[1], r[2], r[3]
end

-- forget takes the dead entries ahead found off the queue. Called after a
-- script's other writes: see events.record_lapse on maxmemory.
function queue.forget(q)
  if q.dead[1] then
    redis.call('ZREM', q.queue, unpack(q.dead))
    redis.call('HDEL', q.info, unpack(q.dead))
    q.dead = {}
  end
end

-- first_live is the first live entry of the queue (with its id), or nil.
function queue.first_live(q, now)
  return queue.walk(q, now, function(id, e)
    e.id = id
    return e
  end)
end

-- of is the queue of call c: its keys, and what one call learns of it
-- (alive: replicas' liveness read so far; dead: entries met dead).
function queue.of(c)
  return {queue = c.queue, info = c.qinfo, replicas = c.replicas, alive = {}, dead = {}, idem = c.idem or ''}
end

-- A waiter that has ended (granted, or gone: leave.lua) is marked so for
-- ended_ms: a try of it that Redis runs late (sent before a timeout or a
-- dropped connection, it may run after the waiter's later tries, its
-- answer and its holder's release) neither queues it again nor grants it
-- (queue.ended). A wait that ended without a grant and carried an
-- idempotency tag keeps its place in the queue for kept_ms (queue.keep):
-- the entry stays, blocking those behind it, but is handed nothing; the
-- next round of the same request takes it up (queue.join, queue.ahead).
local ended_ms, kept_ms = 10000, 10000

-- ended_key and kept_key are a waiter's mark and a request's kept place,
-- beside its lock's queue (lockd:{K}:ended:<id>, lockd:{K}:kept:<tag>).
function queue.ended_key(queue_key, wid)
  return sibling(queue_key, 'ended:' .. wid)
end

function queue.kept_key(queue_key, tag)
  return sibling(queue_key, 'kept:' .. tag)
end

-- mark_ended marks waiter wid of the queue queue_key ended.
function queue.mark_ended(queue_key, wid)
  redis.call('SET', queue.ended_key(queue_key, wid), '1', 'PX', ended_ms)
end

-- ended says whether the waiter of c has ended (read once a call).
function queue.ended(c)
  if c.ended == nil then
    c.ended = redis.call('EXISTS', queue.ended_key(c.queue, c.waiter)) == 1
  end
  return c.ended
end

-- keep keeps the place of waiter id (entry e, at place), whose round
-- ended without a grant, for the next round of its request (its
-- idempotency tag), for kept_ms. With now (hold), the entry stays queued,
-- with no lockd (it lives by its deadline) and no token (no hand-off
-- reaches it), and the tag names it: it answers true. Without, only its
-- place and since are kept: false (the caller takes the entry off).
function queue.keep(q, id, place, e, now)
  if not (e and e.i and e.i ~= '') then
    return false
  end
  if not now then
    redis.call('SET', queue.kept_key(q.queue, e.i), place .. ' ' .. e.s, 'PX', kept_ms)
    return false
  end
  e.r, e.d, e.t, e.k = '', int(now + kept_ms), '', '1'
  redis.call('HSET', q.info, id, cjson.encode(e))
  redis.call('SET', queue.kept_key(q.queue, e.i), place .. ' ' .. e.s .. ' ' .. id, 'PX', kept_ms)
  return true
end

-- kept is the place and since (ms) an earlier round of c's request kept,
-- whose entry the caller's takes over; or its own: a new place at the end
-- of the queue, since now.
local function kept(c, q)
  if c.idem ~= '' then
    local key = queue.kept_key(q.queue, c.idem)
    local v = redis.call('GET', key)
    if v then
      local place, since, id = string.match(v, '^(%S+) (%S+) ?(%S*)$')
      if id ~= '' then
        redis.call('ZREM', q.queue, id)
        redis.call('HDEL', q.info, id)
      end
      redis.call('DEL', key)
      return place, tonumber(since)
    end
  end
  -- Arrival order: Redis's clock, kept strictly increasing.
  local last = redis.call('ZRANGE', q.queue, -1, -1, 'WITHSCORES')
  return int(math.max(c.now_us, (tonumber(last[2]) or 0) + 1)), c.now_ms
end

-- join puts the caller of c on the queue (once) and keeps its lockd live;
-- it returns the caller's place, or "" for a request that does not wait
-- (or whose wait has ended: queue.ended).
function queue.join(c, q)
  if c.waiter == '' then
    return ''
  end
  local place = redis.call('ZSCORE', q.queue, c.waiter)
  if not place then
    if queue.ended(c) then
      return ''
    end
    local since = c.now_ms
    place = c.place
    if place == '' then
      place, since = kept(c, q)
    end
    redis.call('ZADD', q.queue, place, c.waiter)
    redis.call('HSET', q.info, c.waiter, cjson.encode({r = c.replica, d = int(c.now_ms + tonumber(c.deadline)),
      m = c.mode, s = int(since), o = c.owner, t = c.token, l = c.ttl_ms, i = c.idem, a = c.actor, ld = c.delay,
      v = c.value, sn = c.session, tr = c.trace, mh = c.hold, g = c.set}))
    redis.call('PEXPIRE', q.queue, cfg.queue_ttl)
    redis.call('PEXPIRE', q.info, cfg.queue_ttl)
  end
  redis.call('ZADD', q.replicas, c.now_ms + cfg.alive_ms, c.replica)
  return place
end

-- leave takes the caller of c, granted, off the queue, and marks it ended;
-- and the place an earlier round of its request kept (queue.ahead met
-- it), which it no longer needs.
function queue.leave(c)
  if c.waiter ~= '' then
    redis.call('ZREM', c.queue, c.waiter)
    redis.call('HDEL', c.qinfo, c.waiter)
    queue.mark_ended(c.queue, c.waiter)
  end
  local kept_id = c.q and c.q.kept_id
  if kept_id then
    redis.call('ZREM', c.queue, kept_id)
    redis.call('HDEL', c.qinfo, kept_id)
    redis.call('DEL', queue.kept_key(c.queue, c.idem))
  end
end

-- page_max bounds the entries a read of the queue (page) looks at.
local page_max = 100

-- page is the live waiters among the first page_max entries, in grant
-- order, flat: {owner, mode, since_ms, ...}. It writes nothing.
function queue.page(q, now)
  local out = {}
  local ids = redis.call('ZRANGE', q.queue, 0, page_max - 1)
  if not ids[1] then
    return out
  end
  local infos = redis.call('HMGET', q.info, unpack(ids))
  for j = 1, #ids do
    local e = parse_entry(infos[j])
    if queue.live_until(q, e, now) > 0 then
      out[#out + 1] = e.owner
      out[#out + 1] = e.mode
      out[#out + 1] = e.since
    end
  end
  return out
end
