-- acquire: take a free key, re-enter a grant, or queue behind others.
--
-- KEYS[1] lease (lib.lua)   KEYS[2] history list
-- KEYS[3] wait queue (lib.lua)   KEYS[4] epoch marker (see below)
-- KEYS[5] the bucket's expiry schedule  KEYS[6] the bucket's event stream
-- KEYS[7] the queue's entries    KEYS[8] holders (shared or permits)
-- KEYS[9] the bucket's replica liveness set
-- ARGV[1] new token         ARGV[2] owner          ARGV[3] ttl_ms
-- ARGV[4] actor             ARGV[5] wake channel
-- ARGV[6] "grant", or "peek" to leave a free key alone (Redlock: others
--         queue in process)
-- ARGV[7] want: "x" exclusive, "s" shared, "p" a semaphore's permit
-- ARGV[8] the epoch id this lockd saw last in KEYS[4], or ""
-- ARGV[9] this lockd's replica id
-- ARGV[10] "live_ms min_ms new_id", read only when the marker is not the
--          one this lockd saw (lib.lua, check_epoch): live_ms, how long
--          what this lockd knows of in the bucket (its last read of the
--          bucket's expiries, its grants since) could still be live;
--          min_ms, the shortest quarantine after a loss; new_id, the id of
--          a marker made anew
-- and, each "" when left off the end (protocol.go):
-- ARGV[11] the request's trace id, or "": the history events it causes
--          keep it (lib.lua, ev)
-- ARGV[12] "1" when the caller named its mode (or a limit): a re-entry or
--          replay must then match the lease's mode and limit
-- ARGV[13] re-entry token or ""   ARGV[14] idempotency tag or ""
-- ARGV[15] the semaphore's limit (want "p")
-- ARGV[16] the waiter's queue id, or "" for a request that does not wait
-- ARGV[17] the waiter's deadline, ms from now   ARGV[18] its place in the
--          queue from an earlier try, or ""
-- ARGV[19] the lock-delay in ms ("" for none; exclusive holds only): after
--          this lease ends by expiry or force-release, nobody is granted
--          the key for that long (lib.lua, delayed)
-- ARGV[20] the grant's value (JSON), or "": none on a new grant, the
--          value kept on a re-entry
-- ARGV[21] the handle of the session the grant is bound to, or "": its
--          lapse is then recorded as released by the session (lib.lua,
--          record_lapse), and only the session's renewals move its expiry
--          (renew.lua); ARGV[3] is then the session's time left
-- The engine's settings come from cfg (lib.lua): the history's and event
-- stream's caps, the retention, the waiters' liveness and the queue's
-- TTL, the most holders of a key, whether the restart quarantine is off
-- (grant whatever the marker says) and whether this is a Redlock master
-- (take the fence past the key's fence counter too, fence.lua).
--
-- The epoch marker and the restart quarantine: lib.lua (check_epoch).
--
-- The queue is FIFO: a request is granted only when no live waiter queued
-- before it would be blocked by it (ahead, lib.lua). A waiter's first try
-- queues it, and its place stays while it waits.
--
-- A waiter sends the same new token with every try: finding it live means
-- an earlier try of the same waiter was granted but its answer was lost.
--
-- Reply, one of:
--   {"new", fence, now_ms, epoch_id}
--      a fresh exclusive grant of what the call asked, as it asked it
--      (protocol.go fills in the rest)
--   {"granted"|"reentered"|"idempotent", owner, token, fence, count, ttl_ms,
--    acquired_at_ms, pttl_ms, now_ms, epoch_id or "", mode, limit}
--      mode ("x", "s" or "p") and limit are the lease's, as Redis holds
--      it, never the request's
--   {"held", owner, retry_ms, epoch_id or "", place or ""}
--      a holder has the key: its owner and how long its lease has left
--   {"queued", next owner, retry_ms, epoch_id or "", place or "",
--    waiters, next's since_ms}
--      nobody holds what the caller wants, but waiters queued before it
--      come first: the first of them, and how many wait
--   {"lost"}      the re-entry token is not the live one
--   {"mismatch"}  the idempotency tag is the live lease's, but owner, ttl,
--                 or a named mode or limit is not
--   {"mode", mode}  a re-entry named another mode than the lease's
--   {"limit"}     the semaphore is held with another limit (also a re-entry)
--   {"full", n}   the key has n live shared holders or permits, the most
--                 it may have (cfg.max_holders)
--   {"free"}      peek only: nobody holds the key
--   {"recovering", epoch_id, ms_left}  quarantine after a loss of data
--   {"delay", epoch_id, ms_left, place or ""}  the key's last lease ended
--                 by expiry or force-release, and its lock-delay has not
--                 passed
--
-- Fresh grants, held and queued answers carry the epoch id, for the
-- caller's cache.
local lease, hist, holders = KEYS[1], KEYS[2], KEYS[8]
local token, owner, ttl, actor = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
local cap, retention, channel, mode = cfg.history_max, cfg.retention, ARGV[5], ARGV[6]
local want, seen, rid = ARGV[7], ARGV[8], ARGV[9]
local trace, named, reentry, idem = ARGV[11] or '', ARGV[12] == '1', ARGV[13] or '', ARGV[14] or ''
local limit, wid, deadline, place0 = tonumber(ARGV[15]) or 0, ARGV[16] or '', ARGV[17], ARGV[18] or ''
local delay, value, session = ARGV[19] or '', ARGV[20] or '', ARGV[21] or ''
local sched = KEYS[5]
ev = {stream = KEYS[6], cap = cfg.events_max, key = lock_of(lease), retention = retention, trace = trace}

local now_ms, now_us = clock()

-- The common case first: an exclusive request for a key whose newest
-- event ended its last lease (no exp) with no waiter flagged (w), so that
-- nobody holds it (shared holders and permits flag every event w, and a
-- key of the layout before has no history list). The grant reads the
-- lease and writes it in one command (grant_x's SET NX GET); were the key
-- held after all, nothing is written, and the general path below reads
-- the lease. epoch and untl are the marker's (check_epoch), once
-- read; last the newest event (false: none), once read, until a write.
local last, epoch, untl = nil, nil, nil
if want == 'x' and reentry == '' and mode ~= 'peek' then
  last = last_event(hist)
  if last and last.exp == '' and last.w ~= '1' then
    epoch, untl = check_epoch(KEYS[4], seen, ARGV[10], now_ms)
    if (untl <= now_ms or cfg.quarantine_off) and delayed(last, now_ms) == 0 then
      local counter = cfg.redlock and sibling(lease, 'fence') or nil
      local fence = grant_x(lease, hist, cap, retention, sched, owner, token, ttl, idem, actor, now_ms, now_us, last, counter,
        '', '', delay, value, session, true)
      if fence then
        if wid ~= '' then
          redis.call('ZREM', KEYS[3], wid)
          redis.call('HDEL', KEYS[7], wid)
        end
        return {'new', fence, now_ms, epoch}
      end
    end
  end
  -- Nothing was written: last stays what was read (false: no history).
  last = last or false
end

local q = {queue = KEYS[3], info = KEYS[7], replicas = KEYS[9], alive = {}, dead = {}}

-- queued puts the caller on the queue (once) and keeps its lockd live;
-- it returns the caller's place, or "" for a request that does not wait.
local function queued()
  if wid == '' then
    return ''
  end
  local place = redis.call('ZSCORE', q.queue, wid)
  if not place then
    place = place0
    if place == '' then
      -- Arrival order: Redis's clock, kept strictly increasing.
      local last = redis.call('ZRANGE', q.queue, -1, -1, 'WITHSCORES')
      place = int(math.max(now_us, (tonumber(last[2]) or 0) + 1))
    end
    redis.call('ZADD', q.queue, place, wid)
    redis.call('HSET', q.info, wid, cjson.encode({r = rid, d = int(now_ms + tonumber(deadline)), m = want,
      s = int(now_ms), o = owner, t = token, l = ARGV[3], i = idem, a = actor, ld = delay, v = value, sn = session, tr = trace}))
    redis.call('PEXPIRE', q.queue, cfg.queue_ttl)
    redis.call('PEXPIRE', q.info, cfg.queue_ttl)
  end
  redis.call('ZADD', q.replicas, now_ms + cfg.alive_ms, rid)
  return place
end

-- epoch_id is the marker's id: a lockd that only ever meets held keys
-- must know the epoch too, to notice a loss later.
local function epoch_id()
  return redis.call('HGET', KEYS[4], 'id') or ''
end

-- The lease at KEYS[1] (lib.lua, read_lease), and the history's newest
-- event once read (last_event).
local cur = read_lease(lease, now_ms)

-- waiting says, on a free key or an exclusive one, that waiters may be
-- queued from now on: releases, renewals and the next grant look at the
-- queue only then (a lease's w, and the newest event's while the key is
-- free). Shared holders and permits always look.
local function waiting()
  if cur and not cur.multi then
    if cur.w ~= '1' and not cur.old then
      cur.w = '1'
      save_lease(lease, cur, tonumber(cur.exp) - now_ms)
    end
  elseif not cur then
    if last == nil then
      last = last_event(hist) or false
    end
    if last and last.w ~= '1' then
      redis.call('LSET', hist, -1, pack(last.type, last.at, last.owner, last.fence, last.ttl_ms, last.count,
        last.actor, last.reason, last.exp, last.left, '1', last.keep, last.d, last.s, last.t))
    end
  end
end

-- held answers that the caller waits for the holder who, whose lease has
-- retry ms left.
local function held(who, retry)
  local place = queued()
  if place ~= '' then
    waiting()
  end
  forget(q)
  return {'held', who, retry, epoch_id(), place}
end

-- behind answers that the caller waits for the waiters queued before it,
-- the first of them e (live until retry ms from now; nil when the walk
-- met only dead entries up to its bound). How many wait is the queue's
-- length, without the caller.
local function behind(e, retry)
  local place = queued()
  if place ~= '' then
    waiting()
  end
  forget(q)
  local waiters = redis.call('ZCARD', q.queue)
  if place ~= '' then
    waiters = waiters - 1
  end
  if not e then
    return {'queued', '', 0, epoch_id(), place, waiters, ''}
  end
  return {'queued', e.owner, retry, epoch_id(), place, waiters, e.since}
end

-- live_holder decodes a holder's JSON if its lease has not lapsed (prune
-- takes a bounded number per call, so a lapsed one may still be there).
local function live_holder(raw)
  if not raw then
    return nil
  end
  local h = cjson.decode(raw)
  if tonumber(h.e) <= now_ms then
    return nil
  end
  return h
end

if cur and not cur.multi then
  local pttl = tonumber(cur.exp) - now_ms
  if cur.token == token then
    if cur.handed ~= '' then
      -- A release handed this waiter the key: it is claimed now, and a
      -- give-back (release.lua) leaves it alone.
      cur.handed = ''
      save_lease(lease, cur, pttl)
    end
    return {'granted', cur.owner, cur.token, cur.fence, tonumber(cur.count), tonumber(cur.ttl), cur.acquired, pttl, int(now_ms), '', 'x', 0}
  end
  if reentry ~= '' then
    if cur.token ~= reentry then
      return {'lost'}
    end
    if named and want ~= 'x' then
      return {'mode', 'x'}
    end
    local count = tonumber(cur.count) + 1
    cur.count, cur.ttl, cur.renewed, cur.exp = int(count), ARGV[3], int(now_ms), int(now_ms + ttl)
    if value ~= '' then
      cur.v = value
    end
    local set
    cur.keep, set = keep_for(cur.keep, now_ms + ttl + retention, retention)
    save_lease(lease, cur, ttl)
    schedule(sched, ev.key, now_ms + ttl)
    record(hist, cap, 'reentered', now_ms, cur.owner, cur.fence, ttl, count, actor, '', now_ms + ttl, cur.w, cur.keep, cur.d,
      cur.s)
    if set then
      redis.call('PEXPIREAT', hist, cur.keep)
    end
    if cur.w == '1' then
      redis.call(cfg.publish, channel, 'renewed:' .. ttl)
    end
    return {'reentered', cur.owner, cur.token, cur.fence, count, ttl, cur.acquired, ttl, now_ms, '', 'x', 0}
  end
  if idem ~= '' and cur.idem == idem then
    if cur.owner ~= owner or cur.ittl ~= ARGV[3] or (named and want ~= 'x') then
      return {'mismatch'}
    end
    return {'idempotent', cur.owner, cur.token, cur.fence, tonumber(cur.count), tonumber(cur.ttl), cur.acquired, pttl, int(now_ms), '', 'x', 0}
  end
  return held(cur.owner, pttl)
end

-- Shared holders or permits.
local multi, used = cur and cur.multi, 0
if multi then
  prune(lease, holders, hist, cap, now_ms)
  last = nil -- prune may have recorded lapses
  used = live_holders(holders, now_ms)
  if used == 0 then
    redis.call('DEL', lease, holders)
    multi, cur = nil, nil
  end
end
local held_as, held_limit = 'x', 0
if multi then
  held_as, held_limit = multi == 'shared' and 's' or 'p', tonumber(cur.limit) or 0
  local h = live_holder(redis.call('HGET', lease, 'h:' .. token))
  if h then
    return {'granted', h.o, token, h.f, tonumber(h.c), tonumber(h.t), h.a, tonumber(h.e) - now_ms, int(now_ms), '', held_as, held_limit}
  end
  if reentry ~= '' then
    local h = live_holder(redis.call('HGET', lease, 'h:' .. reentry))
    if not h then
      return {'lost'}
    end
    if named and want ~= held_as then
      return {'mode', held_as}
    end
    if held_as == 'p' and limit ~= held_limit then
      return {'limit'}
    end
    h.c, h.t, h.r, h.e = int(tonumber(h.c) + 1), ARGV[3], int(now_ms), int(now_ms + ttl)
    if value ~= '' then
      h.v = value
    end
    redis.call('HSET', lease, 'h:' .. reentry, cjson.encode(h))
    redis.call('ZADD', holders, h.e, reentry)
    settle(lease, holders, sched, ev.key, now_ms)
    local keep = keep_for(nil, now_ms + ttl + retention, retention)
    record(hist, cap, 'reentered', now_ms, h.o, h.f, ttl, h.c, actor, '', nil, '1', keep)
    redis.call('PEXPIREAT', hist, keep)
    return {'reentered', h.o, reentry, h.f, tonumber(h.c), ttl, h.a, ttl, now_ms, '', held_as, held_limit}
  end
  if idem ~= '' then
    local t = redis.call('HGET', lease, 'i:' .. idem)
    local h = t and live_holder(redis.call('HGET', lease, 'h:' .. t))
    if h then
      if h.o ~= owner or h.it ~= ARGV[3] or (named and want ~= held_as) or (held_as == 'p' and limit ~= held_limit) then
        return {'mismatch'}
      end
      return {'idempotent', h.o, t, h.f, tonumber(h.c), tonumber(h.t), h.a, tonumber(h.e) - now_ms, int(now_ms), '', held_as, held_limit}
    end
  end
  if want == 'p' and tonumber(cur.limit) ~= limit then
    return {'limit'}
  end
end
if reentry ~= '' then
  return {'lost'}
end

-- Blocked by the holders: an exclusive request by shared holders, a
-- permit by a full semaphore (a shared request by shared holders is not).
if multi and (want == 'x' or (want == 'p' and used >= limit)) then
  -- The key frees when the last shared holder lets go, a permit when the
  -- first does.
  local at
  if want == 'p' then
    at = redis.call('ZRANGEBYSCORE', holders, '(' .. int(now_ms), '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  else
    at = redis.call('ZRANGE', holders, -1, -1, 'WITHSCORES')
  end
  local h = cjson.decode(redis.call('HGET', lease, 'h:' .. at[1]))
  return held(h.o, tonumber(at[2]) - now_ms)
end
if multi and used >= cfg.max_holders then
  return {'full', used}
end

-- Blocked by waiters queued before the caller. On a free key, the queue
-- is read only when waiters may be queued (waiting): a key's newest event
-- says so, or says that its lease lapsed.
local walked = multi ~= nil
if not multi then
  if last == nil then
    last = last_event(hist) or false
  end
  walked = not last or last.w == '1' or last.exp ~= ''
end
if walked then
  local ok, e, retry = ahead(q, want, used, limit, wid, now_ms)
  if not ok then
    return behind(e, retry)
  end
end
if mode == 'peek' then
  forget(q)
  return {'free'}
end

if not epoch then
  epoch, untl = check_epoch(KEYS[4], seen, ARGV[10], now_ms)
end
if untl > now_ms and not cfg.quarantine_off then
  if queued() ~= '' then
    waiting()
  end
  return {'recovering', epoch, int(untl - now_ms)}
end

if last == nil then
  last = last_event(hist) or false
end
if not multi and record_lapse(hist, cap, sched, ev.key, last) then
  last = last_event(hist) -- the lapse just recorded
end
local hold_off = delayed(last, now_ms)
if hold_off > 0 then
  local place = queued()
  if place ~= '' then
    waiting()
  end
  return {'delay', epoch, int(hold_off), place}
end
-- The fence counter: Redlock's (cfg.redlock), or a key's of the layout before
-- the history list, met the first time the key is used after an upgrade.
local counter = nil
if cfg.redlock or not last then
  counter = sibling(lease, 'fence')
end

local fence
if want == 'x' then
  -- w: waiters left behind the caller. Counted before any write: with
  -- maxmemory reached, Redis refuses a script whose first write may grow
  -- memory (the grant) but not one that first shrank it (the caller's
  -- ZREM, below), lib.lua's record_lapse.
  local w = ''
  if walked then
    -- Dead entries count too: their lockd may come back (a Redis pause
    -- outlives its liveness) and retries only when woken.
    local left = redis.call('ZCARD', q.queue)
    if q.found then
      left = left - 1
    end
    if left > 0 then
      w = '1'
    end
  end
  fence = grant_x(lease, hist, cap, retention, sched, owner, token, ttl, idem, actor, now_ms, now_us, last, counter, w, '',
    delay, value, session)
else
  if not multi then
    -- fx: every holder of this lease is in the fence index (f:<fence>).
    redis.call('HSET', lease, 'mode', want == 's' and 'shared' or 'permit', 'limit', limit, 'fx', '1')
  end
  fence = next_fence(last, counter, now_us)
  local h = {o = owner, f = fence, c = '1', t = ARGV[3], a = int(now_ms), r = int(now_ms), n = '0', v = value,
    e = int(now_ms + ttl), i = idem, it = ARGV[3], l = '', s = session}
  -- last: the newest holder, which a state describes (state.lua).
  redis.call('HSET', lease, 'h:' .. token, cjson.encode(h), 'last', token, 'f:' .. fence, token)
  if idem ~= '' then
    redis.call('HSET', lease, 'i:' .. idem, token)
  end
  redis.call('ZADD', holders, h.e, token)
  used = settle(lease, holders, sched, ev.key, now_ms)
  -- Multi events carry no exp: the lapse of each holder is recorded by
  -- prune, never by record_lapse.
  local keep, set = keep_for(last and last.keep, now_ms + ttl + retention, retention)
  record(hist, cap, 'acquired', now_ms, owner, fence, ttl, 1, actor, '', nil, '1', keep)
  if set then
    redis.call('PEXPIREAT', hist, keep)
  end
end

if wid ~= '' then
  redis.call('ZREM', q.queue, wid)
  redis.call('HDEL', q.info, wid)
end
if want ~= 'x' then
  -- Wake the next waiter too if it may share the key or take a permit.
  local nx = first_live(q, now_ms)
  if nx and ((want == 's' and nx.mode == 's') or (want == 'p' and used < limit)) then
    redis.call(cfg.publish, channel, 'released')
  end
end
forget(q)
return {'granted', owner, token, fence, 1, ttl, now_ms, ttl, now_ms, epoch, want, want == 'p' and limit or 0}
