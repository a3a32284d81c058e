-- multi: the holding model of shared holds and semaphore permits, a hash
-- and a sorted set of holders per key.
--
-- The lease hash has mode ('shared' or 'permit'), limit, last (the newest
-- holder's token), and per holder "h:<token>" (JSON, every number a
-- string: o owner, f fence, c count, t ttl_ms, a acquired_at, r
-- renewed_at, n renewals, e expiry, l left_ms at the last renewal, i the
-- idempotency tag, it the TTL its first request asked, v value, s the
-- session's handle, ls the size of the lock set it was granted with),
-- "i:<idempotency tag>" → token and "f:<fence>" →
-- token (with fx set; a lease made before the fence index has no fx); the
-- holders sorted set has each token by its expiry. The hash and the set
-- outlive the last expiry by grace_ms, so that a lapse is still recorded
-- (prune) when the sweeper or the next caller comes.
local grace_ms = 60000

-- prune_max bounds the lapsed holders one call records and removes: when
-- thousands lapse together, the sweeper comes back for the rest.
multi.prune_max = 25

-- live_holders is how many holders' leases have not lapsed, pruned or not.
local function live_holders(c)
  return redis.call('ZCOUNT', c.holders, '(' .. int(c.now_ms), '+inf')
end

-- live_holder decodes a holder's JSON if its lease has not lapsed (prune
-- takes a bounded number per call, so a lapsed one may still be there).
local function live_holder(raw, now)
  if not raw then
    return nil
  end
  local h = cjson.decode(raw)
  if tonumber(h.e) <= now then
    return nil
  end
  return h
end

-- forget_holder takes holder h (token t) off the hash and the set.
local function forget_holder(c, t, h)
  redis.call('HDEL', c.lease, 'h:' .. t, 'f:' .. h.f)
  if h.i ~= '' then
    redis.call('HDEL', c.lease, 'i:' .. h.i)
  end
  redis.call('ZREM', c.holders, t)
end

-- prune records and removes up to prune_max holders of c's key whose
-- lease lapsed; it returns them (decoded).
function multi.prune(c)
  local gone = redis.call('ZRANGEBYSCORE', c.holders, '-inf', int(c.now_ms), 'LIMIT', 0, multi.prune_max)
  local out = {}
  for _, t in ipairs(gone) do
    local raw = redis.call('HGET', c.lease, 'h:' .. t)
    if raw then
      local h = cjson.decode(raw)
      events.lapse(c, h.e, {owner = h.o, fence = h.f, ttl_ms = h.t, count = h.c, keep = '', d = '', s = h.s or ''})
      forget_holder(c, t, h)
      out[#out + 1] = h
    else
      redis.call('ZREM', c.holders, t)
    end
  end
  return out
end

-- forget_key deletes c's key and takes it off the schedules.
local function forget_key(c)
  redis.call('DEL', c.lease, c.holders)
  redis.call('ZREM', c.sched, c.key)
  redis.call('ZREM', epoch.latest_of(c.sched), c.key)
end

-- holder_of is the live holder with this token (decoded), after pruning
-- the lapsed ones; or nil and the answer for a token that holds nothing:
-- "lost" while others hold the key, else "not_found".
local function holder_of(c, token)
  multi.prune(c)
  local h = live_holder(redis.call('HGET', c.lease, 'h:' .. token), c.now_ms)
  if h then
    return h
  end
  if live_holders(c) > 0 then
    return nil, 'lost'
  end
  forget_key(c)
  return nil, 'not_found'
end

-- settle sets the TTLs and the expiry schedule of a key's holders after a
-- change (and when its last holder's lease ends, for epoch.lua), or
-- deletes the key when none is left; it returns how many live holders
-- there are. Lapsed holders prune has not reached yet keep the schedule in
-- the past, so that the sweeper comes back for them.
function multi.settle(c)
  local n = redis.call('ZCARD', c.holders)
  if n == 0 then
    forget_key(c)
    return 0
  end
  local last = redis.call('ZRANGE', c.holders, -1, -1, 'WITHSCORES')
  local first = redis.call('ZRANGE', c.holders, 0, 0, 'WITHSCORES')
  local keep = tonumber(last[2]) - c.now_ms + grace_ms
  redis.call('PEXPIRE', c.lease, keep)
  redis.call('PEXPIRE', c.holders, keep)
  events.schedule(c.sched, c.key, first[2])
  redis.call('ZADD', epoch.latest_of(c.sched), last[2], c.key)
  return live_holders(c)
end

-- save writes holder h (token t) back and settles the key (the one
-- extension of a holder, by re-entry or renewal).
local function save(c, t, h)
  redis.call('HSET', c.lease, 'h:' .. t, cjson.encode(h))
  redis.call('ZADD', c.holders, h.e, t)
  return multi.settle(c)
end

-- reply is the grant reply (grant_reply) of holder h (token t) with pttl
-- ms left, on a key held as c.held_as with c.held_limit.
local function reply(status, c, h, t, pttl)
  return grant_reply(status, {owner = h.o, token = t, fence = h.f, count = h.c, ttl = h.t, acquired = h.a,
    pttl = pttl, mode = c.held_as, limit = c.held_limit}, c.now_ms)
end

-- reenter takes one more level of the holder whose token c names.
local function reenter(c)
  local h = live_holder(redis.call('HGET', c.lease, 'h:' .. c.reentry), c.now_ms)
  if not h then
    return {'lost'}
  elseif (h.ls or '') ~= '' then
    return {'in_set', h.ls}
  end
  if c.named and c.mode ~= c.held_as then
    return {'mode', c.held_as}
  end
  if c.held_as == 'p' and c.limit ~= c.held_limit then
    return {'limit'}
  end
  h.c, h.t, h.r, h.e = int(tonumber(h.c) + 1), c.ttl_ms, int(c.now_ms), int(c.now_ms + c.ttl)
  if c.value ~= '' then
    h.v = c.value
  end
  save(c, c.reentry, h)
  local keep = events.keep_for(nil, c.now_ms + c.ttl)
  events.record(c, {'reentered', int(c.now_ms), h.o, h.f, c.ttl_ms, h.c, c.actor, '', '', '', '1', keep, '', '',
    c.trace})
  redis.call('PEXPIREAT', c.hist, keep)
  return reply('reentered', c, h, c.reentry, c.ttl)
end

-- replay answers an idempotent replay of the holder c's tag names, or nil.
local function replay(c)
  local t = redis.call('HGET', c.lease, 'i:' .. c.idem)
  local h = t and live_holder(redis.call('HGET', c.lease, 'h:' .. t), c.now_ms)
  if not h then
    return nil
  end
  if h.o ~= c.owner or h.it ~= c.ttl_ms or (c.named and c.mode ~= c.held_as) or
    (c.held_as == 'p' and c.limit ~= c.held_limit) or c.value ~= (h.v or '') then
    return {'mismatch'}
  end
  return reply('idempotent', c, h, t, tonumber(h.e) - c.now_ms)
end

-- blocked answers held when the holders keep c out: an exclusive request
-- by shared holders, a permit by a full semaphore (a shared request by
-- shared holders is not); {"full", n} when the key has the most live
-- holders it may have (cfg.max_holders); else nil.
local function blocked(c)
  if c.mode == 'x' or (c.mode == 'p' and c.used >= c.limit) then
    -- The key frees when the last shared holder lets go, a permit when
    -- the first does.
    local at
    if c.mode == 'p' then
      at = redis.call('ZRANGEBYSCORE', c.holders, '(' .. int(c.now_ms), '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
    else
      at = redis.call('ZRANGE', c.holders, -1, -1, 'WITHSCORES')
    end
    local h = cjson.decode(redis.call('HGET', c.lease, 'h:' .. at[1]))
    return gate.held(c, h.o, tonumber(at[2]) - c.now_ms, (h.ls or '') ~= '' and h.f or nil)
  end
  if c.used >= cfg.max_holders then
    return {'full', c.used}
  end
  return nil
end

-- acquire answers c on a key held by shared holders or permits (c.cur):
-- the caller's own grant, a re-entry, an idempotent replay, a mode or
-- limit that does not match, or blocked; nil lets c on to the gate, with
-- c.used the live holders. When every holder lapsed, the key is free
-- (c.cur nil).
function multi.acquire(c)
  local cur = c.cur
  multi.prune(c)
  c.last = nil -- prune may have recorded lapses
  c.used = live_holders(c)
  if c.used == 0 then
    redis.call('DEL', c.lease, c.holders)
    c.cur = nil
    return nil
  end
  c.held_as, c.held_limit = cur.multi == 'shared' and 's' or 'p', tonumber(cur.limit) or 0
  local h = live_holder(redis.call('HGET', c.lease, 'h:' .. c.token), c.now_ms)
  if h then
    return reply('granted', c, h, c.token, tonumber(h.e) - c.now_ms)
  end
  if c.reentry ~= '' then
    return reenter(c)
  end
  local r = c.idem ~= '' and replay(c)
  if r then
    return r
  end
  if c.mode == 'p' and c.held_limit ~= c.limit then
    return {'limit'}
  end
  return blocked(c)
end

-- take grants c a shared hold or a permit after the gate (gate.admit),
-- on a key free or held alike; it returns the fence. Multi events carry
-- no exp: the lapse of each holder is recorded by prune, never by
-- events.record_lapse.
function multi.take(c)
  if not c.cur then
    -- fx: every holder of this lease is in the fence index (f:<fence>).
    redis.call('HSET', c.lease, 'mode', c.mode == 's' and 'shared' or 'permit', 'limit', c.limit, 'fx', '1')
  end
  local fence = events.fence(c, c.last)
  local h = {o = c.owner, f = fence, c = '1', t = c.ttl_ms, a = int(c.now_ms), r = int(c.now_ms), n = '0',
    v = c.value, e = int(c.now_ms + c.ttl), i = c.idem, it = c.ttl_ms, l = '', s = c.session, ls = c.set}
  -- last: the newest holder, which a state describes (state.lua).
  redis.call('HSET', c.lease, 'h:' .. c.token, cjson.encode(h), 'last', c.token, 'f:' .. fence, c.token)
  if c.idem ~= '' then
    redis.call('HSET', c.lease, 'i:' .. c.idem, c.token)
  end
  redis.call('ZADD', c.holders, h.e, c.token)
  c.used = multi.settle(c)
  local keep, set = events.keep_for(c.last and c.last.keep, c.now_ms + c.ttl)
  events.record(c, {'acquired', int(c.now_ms), c.owner, fence, c.ttl_ms, '1', c.actor, '', '', '', '1', keep, '', '',
    c.trace, c.set})
  if set then
    redis.call('PEXPIREAT', c.hist, keep)
  end
  return fence
end

-- wake wakes the next waiter after a grant to c if it may share the key
-- or take a permit too.
function multi.wake(c)
  local nx = queue.first_live(c.q, c.now_ms)
  if nx and ((c.mode == 's' and nx.mode == 's') or (c.mode == 'p' and c.used < c.limit)) then
    redis.call(cfg.publish, c.channel, 'released')
  end
end

-- renew extends c's holder: the grant reply with "s" or "p" and the
-- limit, {"lost"}, {"not_found"} or {"in_set", n} (a lock set's holder
-- renewed alone, as exclusive.renew). A holder bound to a session keeps
-- its expiry unless its session renews it (c.by_session "1").
function multi.renew(c, cur)
  local h, status = holder_of(c, c.token)
  if not h then
    return {status}
  elseif (h.ls or '') ~= '' and c.by_session == '' then
    return {'in_set', h.ls}
  end
  local ttl = tonumber(c.ttl_ms) or tonumber(h.t)
  local left = tonumber(h.e) - c.now_ms
  if (h.s or '') ~= '' and c.by_session ~= '1' then
    ttl = left
  end
  h.t, h.r, h.e, h.l, h.n = int(ttl), int(c.now_ms), int(c.now_ms + ttl), int(left), int(tonumber(h.n) + 1)
  if c.value ~= '' then
    h.v = c.value
  end
  save(c, c.token, h)
  events.push(c.renewals, cfg.renewals_max, events.pack({'renewed', int(c.now_ms), h.o,
    h.f, int(ttl), h.c, c.actor, '', '', int(left), '', '', '', '', ''}))
  local keep = events.keep_for(nil, c.now_ms + ttl)
  redis.call('PEXPIREAT', c.hist, keep)
  redis.call('PEXPIREAT', c.renewals, keep)
  c.held_as, c.held_limit = cur.multi == 'shared' and 's' or 'p', tonumber(cur.limit) or 0
  return reply('ok', c, h, c.token, ttl)
end

-- release gives back one level of c's holder: {"ok", count_left,
-- acquired_at_ms}, {"lost"}, {"not_found"} or {"in_set", n} (a lock
-- set's holder released alone, as exclusive.release). The waiters wake
-- when the key frees, or a permit does.
function multi.release(c, cur)
  local h, status = holder_of(c, c.token)
  if not h then
    return {status}
  elseif (h.ls or '') ~= '' and c.unclaimed ~= 'set' then
    return {'in_set', h.ls}
  end
  local count = tonumber(h.c) - 1
  if count > 0 then
    h.c = int(count)
    redis.call('HSET', c.lease, 'h:' .. c.token, cjson.encode(h))
    events.record(c, {'released', int(c.now_ms), h.o, h.f, h.t, h.c, c.actor, '', '', '', '1', '', '', '', c.trace})
    return {'ok', count, h.a}
  end
  forget_holder(c, c.token, h)
  local left = multi.settle(c)
  events.record(c, {'released', int(c.now_ms), h.o, h.f, h.t, '0', c.actor, '', '', '', '1', '', '', '', c.trace})
  if (left == 0 or cur.multi == 'permit') and redis.call('EXISTS', c.queue) == 1 then
    redis.call(cfg.publish, c.channel, 'released')
  end
  return {'ok', 0, h.a}
end

-- force_max bounds the holders one force breaks; Go calls again while
-- more are left (engine.go), so each call's time stays bounded.
local force_max = 50

-- breakable is the tokens a force of c looks at: every live holder (up
-- to force_max), or the one with c.fence.
local function breakable(c)
  if c.fence == '' then
    return redis.call('ZRANGEBYSCORE', c.holders, '(' .. int(c.now_ms), '+inf', 'LIMIT', 0, force_max)
  elseif redis.call('HEXISTS', c.lease, 'fx') == 1 then
    return {redis.call('HGET', c.lease, 'f:' .. c.fence)}
  end
  -- A lease made before the fence index: look at each holder (at most
  -- the holders' cap).
  return redis.call('ZRANGE', c.holders, 0, -1)
end

-- force breaks c's holders (or the one with c.fence): {"ok", owner,
-- fence, acquired_at_ms, more} of the newest broken (more: 1 when holders
-- are left that a force of every holder did not reach), or {"lost"} or
-- {"not_found"}.
function multi.force(c)
  multi.prune(c)
  local broken = nil
  for _, t in ipairs(breakable(c)) do
    local raw = t and redis.call('HGET', c.lease, 'h:' .. t)
    local h = raw and cjson.decode(raw)
    if h and (c.fence == '' or h.f == c.fence) and tonumber(h.e) > c.now_ms then
      events.record(c, {'force_released', int(c.now_ms), h.o, h.f, h.t, h.c, c.actor, c.reason, '', '', '1', '', '',
        '', c.trace})
      forget_holder(c, t, h)
      if not broken or tonumber(h.f) > tonumber(broken.f) then
        broken = h
      end
    end
  end
  local left = multi.settle(c)
  if not broken then
    return {left > 0 and 'lost' or 'not_found'}
  end
  redis.call(cfg.publish, c.channel, 'released')
  return {'ok', broken.o, broken.f, broken.a, (c.fence == '' and left > 0) and 1 or 0}
end

-- page_max bounds the holders a state reads.
local page_max = 100

-- state describes c's holders and queue (state.lua's "m" reply), or {}
-- when none is live.
function multi.state(c, cur)
  local hs = {}
  local since = '(' .. int(c.now_ms)
  local live = redis.call('ZRANGEBYSCORE', c.holders, since, '+inf', 'LIMIT', 0, page_max)
  local newest = redis.call('HGET', c.lease, 'last')
  if newest and #live == page_max then
    -- The newest holder, which the state describes, may be past the page.
    local at = tonumber(redis.call('ZSCORE', c.holders, newest))
    if at and at > c.now_ms then
      live[#live + 1] = newest
    end
  end
  local seen, set = {}, ''
  for _, t in ipairs(live) do
    local raw = not seen[t] and redis.call('HGET', c.lease, 'h:' .. t)
    seen[t] = true
    if raw then
      local h = cjson.decode(raw)
      if t == newest then
        set = h.ls or ''
      end
      for _, v in ipairs({h.o, h.f, h.c, h.t, h.a, h.r, h.n, h.e, h.l}) do
        hs[#hs + 1] = v
      end
      hs[#hs + 1] = h.v or ''
    end
  end
  if not hs[1] then
    return {}
  end
  return {'m', int(c.now_ms), queue.page(c.q, c.now_ms), cur.multi, cur.limit, hs, redis.call('ZCARD', c.q.queue),
    redis.call('ZCOUNT', c.holders, since, '+inf'), set}
end

-- restore puts back shared hold or permit r (restore.lua) among c's
-- key's holders, as exclusive.restore does an exclusive lease: a key
-- held exclusively, or in the other mode or limit, is a conflict.
function multi.restore(c, cur, r)
  local as = r.mode == 's' and 'shared' or 'permit'
  if cur and (not cur.multi or cur.multi ~= as or (r.mode == 'p' and tonumber(cur.limit) ~= r.limit)) then
    return {'conflict'}
  end
  local raw = redis.call('HGET', c.lease, 'h:' .. r.token)
  if raw then
    local h = cjson.decode(raw)
    if r.exp > tonumber(h.e) then
      h.e = int(r.exp)
      save(c, r.token, h)
    end
    return {'present'}
  end
  if cur and r.mode == 'p' and live_holders(c) >= r.limit then
    -- Its permit went to another meanwhile: never more than the limit.
    return {'conflict'}
  end
  if not cur then
    redis.call('HSET', c.lease, 'mode', as, 'limit', r.limit, 'fx', '1')
  end
  local h = {o = r.owner, f = r.fence, c = r.count, t = r.ttl, a = r.acquired, r = int(c.now_ms), n = '0', v = r.value,
    e = int(r.exp), i = '', it = r.ttl, l = '', s = r.session, ls = r.set ~= '' and r.set or nil}
  redis.call('HSET', c.lease, 'h:' .. r.token, cjson.encode(h), 'last', r.token, 'f:' .. r.fence, r.token)
  redis.call('ZADD', c.holders, h.e, r.token)
  multi.settle(c)
  local keep, set = events.keep_for(nil, r.exp)
  events.record(c, {'restored', int(c.now_ms), r.owner, r.fence, r.ttl, r.count, 'lockd', r.reason, '', '', '1', keep,
    '', r.session, '', r.set ~= '' and r.set or nil})
  if set then
    redis.call('PEXPIREAT', c.hist, keep)
  end
  return {'restored'}
end
