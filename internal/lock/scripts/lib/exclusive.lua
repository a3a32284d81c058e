-- exclusive: the holding model of locks and elections, one packed string
-- per key.
--
-- An exclusive lease is a string with the lease's TTL at the lock's
-- lease key: its fields packed (US) in this order: token, owner, fence,
-- count, ttl_ms, acquired_at, renewed_at, renewals, idem (the
-- idempotency tag), ittl (the TTL its first request asked), left_ms (left
-- at the last renewal), exp, handed ("1": handed to a waiter who has not
-- claimed it yet), w ("1": waiters may be queued, so a release or renewal
-- wakes them), keep (until when the history lives, events.keep_for), d
-- (the lock-delay), v (the value), s (the handle of the session it is
-- bound to, session.lua), rq (a request that the holder step aside:
-- at RS by RS reason, force_release.lua; empty for none), mh (until when
-- its hold window keeps the key taken, ms; empty for none: keep_window),
-- ls (the size of the lock set it was granted with, lockset.lua; empty for
-- a lone grant).
-- Shared holders and permits keep a hash at the
-- same name (multi.lua), and so did exclusive leases before this layout:
-- read_lease reads all three, so a lease of the layout before is
-- honoured, renewed and released until it ends.
local function pack_lease(l)
  return l.token .. US .. l.owner .. US .. l.fence .. US .. l.count .. US .. l.ttl .. US ..
    l.acquired .. US .. l.renewed .. US .. l.renewals .. US .. l.idem .. US .. l.ittl .. US ..
    l.left .. US .. l.exp .. US .. l.handed .. US .. l.w .. US .. l.keep .. US .. (l.d or '') .. US .. (l.v or '') ..
    US .. (l.s or '') .. US .. (l.rq or '') .. US .. (l.mh or '') .. US .. (l.ls or '')
end

-- unpack_lease reads a lease as events.unpack reads an event, into the
-- same table every time: a script reads one lease. A lease written before
-- d, v, s, rq, mh or ls existed has them empty (a grant writes no rq, mh
-- only for a hold window, ls only for a lock set).
local LEASE_PAT = '([^\31]*)\31([^\31]*)\31([^\31]*)\31([^\31]*)\31([^\31]*)\31([^\31]*)\31([^\31]*)\31' ..
  '([^\31]*)\31([^\31]*)\31([^\31]*)\31([^\31]*)\31([^\31]*)\31([^\31]*)\31([^\31]*)\31([^\31]*)\31' ..
  '([^\31]*)\31([^\31]*)\31([^\31]*)\31([^\31]*)\31([^\31]*)\31([^\31]*)'
local lease_scratch = {}
local function unpack_lease(s)
  local l = lease_scratch
  l.token, l.owner, l.fence, l.count, l.ttl, l.acquired, l.renewed, l.renewals, l.idem, l.ittl, l.left, l.exp, l.handed,
    l.w, l.keep, l.d, l.v, l.s, l.rq, l.mh, l.ls = string.match(s .. '\31\31\31\31\31\31', LEASE_PAT)
  return l
end

-- read_lease is the lease at lease: nil when nobody holds the key, {multi
-- = mode, limit = limit} for shared holders or permits (a hash), else the
-- exclusive lease's fields (old set for one of the layout before). raw is
-- what GET or GETDEL (release) answered.
local function read_lease(lease, raw, now)
  if not raw then
    return nil
  end
  if type(raw) == 'string' then
    return unpack_lease(raw)
  end
  local h = redis.call('HMGET', lease, 'mode', 'limit', 'owner', 'token', 'fence', 'count', 'ttl_ms',
    'acquired_at', 'renewed_at', 'renewals', 'idem', 'ittl', 'left_ms', 'handed')
  if h[1] then
    return {multi = h[1], limit = h[2]}
  end
  if not h[4] then
    return nil
  end
  local pttl = redis.call('PTTL', lease)
  -- w: waiters of either layout may be queued.
  return {token = h[4], owner = h[3], fence = h[5], count = h[6], ttl = h[7], acquired = h[8],
    renewed = h[9] or h[8], renewals = h[10] or '0', idem = h[11] or '', ittl = h[12] or h[7],
    left = h[13] or '', exp = int(now + pttl), handed = h[14] and '1' or '', w = '1', keep = '', d = '', v = '', s = '',
    rq = '', mh = '', ls = '', old = true}
end

-- read is the lease of c's key (read_lease), read once by every
-- operation's script before it picks the model.
function exclusive.read(c)
  return read_lease(c.lease, redis.pcall('GET', c.lease), c.now_ms)
end

-- take_lease reads the lease of c's key with GETDEL: the common release,
-- an exclusive lease given back by its holder, in one command. Anything
-- else puts it back (put_back). It returns the lease and what GETDEL said.
function exclusive.take_lease(c)
  local raw = redis.pcall('GETDEL', c.lease)
  return read_lease(c.lease, raw, c.now_ms), raw
end

-- save writes an exclusive lease that runs ms more (exp - now).
function exclusive.save(lease, l, ms)
  redis.call('SET', lease, pack_lease(l), 'PX', str(ms))
end

-- put_back writes back a lease take_lease took (raw, its packed string,
-- read as cur) when the release was not the holder's.
local function put_back(c, raw, cur)
  if type(raw) == 'string' then
    redis.call('SET', c.lease, raw, 'PX', str(tonumber(cur.exp) - c.now_ms))
  end
end

-- reply is the grant reply (grant_reply) of lease l with pttl ms left.
local function reply(status, c, l, pttl)
  l.pttl, l.mode, l.limit = pttl, 'x', 0
  return grant_reply(status, l, c.now_ms)
end

-- grant writes a new exclusive lease for g on a free key of c (an
-- acquire, whose g is c; a release that hands the key to the next
-- waiter); it returns its fence. g has owner, token, ttl (ms, a number),
-- idem, actor, delay ("" for none), value (JSON, "" for none) and session
-- (its handle, "" for none), hold (the hold window in ms, "" for none),
-- and set (the lock set's size) for a set's grant (lockset.lua); last is
-- the history's newest event (false: none), w and handed the lease's.
-- With nx, it grants only if nobody
-- holds the key (SET NX GET: one command reads and writes), and returns
-- nil, having written nothing, if somebody does.
function exclusive.grant(c, g, last, w, handed, nx)
  local now, ttl, lease = c.now_ms, g.ttl, c.lease
  local fence = events.fence(c, last)
  local ttl_s, now_s, exp_s = str(ttl), str(now), str(now + ttl)
  local keep, set = events.keep_for(last and last.keep, now + ttl)
  -- pack_lease's order, without a table between.
  local packed = g.token .. US .. g.owner .. US .. fence .. US .. '1' .. US .. ttl_s .. US .. now_s .. US .. now_s ..
    US .. '0' .. US .. g.idem .. US .. ttl_s .. US .. '' .. US .. exp_s .. US .. handed .. US .. w .. US .. keep ..
    US .. g.delay .. US .. g.value .. US .. g.session
  if g.hold ~= '' or g.set then
    -- rq empty, then mh (the window runs from the grant), then a lock
    -- set's ls.
    packed = packed .. US .. US .. (g.hold ~= '' and int(now + tonumber(g.hold)) or '')
    if g.set then
      packed = packed .. US .. g.set
    end
  end
  if nx then
    -- Held: the old value (a string), or an error (shared holders' hash).
    if redis.pcall('SET', lease, packed, 'NX', 'GET', 'PX', ttl_s) ~= false then
      return nil
    end
  else
    redis.call('SET', lease, packed, 'PX', ttl_s)
  end
  events.schedule(c.sched, c.key, exp_s)
  events.record(c, {'acquired', now_s, g.owner, fence, ttl_s, '1', g.actor, '', exp_s, '', w, keep, g.delay, g.session,
    c.trace, g.set})
  if set then
    redis.call('PEXPIREAT', c.hist, keep)
  end
  return fence
end

-- fast is the common acquire, tried before the lease is read: an
-- exclusive request for a key whose newest event ended its last lease (no
-- exp) with no waiter flagged (w), so that nobody holds it (shared holders
-- and permits flag every event w, and a key of the layout before has no
-- history list). The grant reads the lease and writes it in one command
-- (grant's SET NX GET); were the key held after all, nothing is written,
-- c.last stays what was read, and the caller reads the lease. It answers
-- {"new", fence, now_ms, epoch_id}, or nil.
function exclusive.fast(c)
  local last = events.last(c.hist)
  c.last = last or false
  if last and last.exp == '' and last.w ~= '1' and gate.open(c, last) then
    local fence = exclusive.grant(c, c, last, '', '', true)
    if fence then
      if c.waiter ~= '' then
        queue.leave(c)
      end
      return {'new', fence, c.now_ms, c.epoch_id}
    end
  end
  return nil
end

-- through_window is how long from now a renewal or re-entry of cur that
-- asks for ms keeps it: at least until its hold window (mh) ends, so that
-- a shorter TTL asked on the way lets the key lapse no earlier than a
-- release would free it.
local function through_window(cur, now, ms)
  local mh = tonumber(cur.mh)
  if mh and mh - now > ms then
    return mh - now
  end
  return ms
end

-- reenter takes one more level of cur, the lease whose token c names.
local function reenter(c, cur)
  if cur.token ~= c.reentry then
    return {'lost'}
  end
  if cur.ls ~= '' then
    return {'in_set', cur.ls}
  end
  if c.named and c.mode ~= 'x' then
    return {'mode', 'x'}
  end
  local ms = through_window(cur, c.now_ms, c.ttl)
  local count, exp = tonumber(cur.count) + 1, c.now_ms + ms
  cur.count, cur.ttl, cur.renewed, cur.exp = int(count), c.ttl_ms, int(c.now_ms), int(exp)
  if c.value ~= '' then
    cur.v = c.value
  end
  local set
  cur.keep, set = events.keep_for(cur.keep, exp)
  exclusive.save(c.lease, cur, ms)
  events.schedule(c.sched, c.key, exp)
  events.record(c, {'reentered', int(c.now_ms), cur.owner, cur.fence, c.ttl_ms, cur.count, c.actor, '', cur.exp, '',
    cur.w, cur.keep, cur.d, cur.s, c.trace})
  if set then
    redis.call('PEXPIREAT', c.hist, cur.keep)
  end
  if cur.w == '1' then
    redis.call(cfg.publish, c.channel, 'renewed:' .. int(ms))
  end
  return reply('reentered', c, cur, ms)
end

-- acquire answers c on a key held exclusively (c.cur): the caller's own
-- grant (a waiter's earlier try, or a hand-off it claims now), a re-entry,
-- an idempotent replay, held, or kept by a hold window (keep_window).
function exclusive.acquire(c)
  local cur = c.cur
  local pttl = tonumber(cur.exp) - c.now_ms
  if cur.token == c.token then
    if cur.handed ~= '' then
      -- A release handed this waiter the key: it is claimed now, and a
      -- give-back (release's unclaimed) leaves it alone.
      cur.handed = ''
      exclusive.save(c.lease, cur, pttl)
    end
    return reply('granted', c, cur, pttl)
  end
  if c.reentry ~= '' then
    return reenter(c, cur)
  end
  if cur.token == '' then
    return gate.min_hold(c, cur.owner, pttl)
  end
  if c.idem ~= '' and cur.idem == c.idem then
    -- A replay is the request it replays, value included: one that
    -- differs is refused rather than answered as though its value were
    -- the lease's.
    if cur.owner ~= c.owner or cur.ittl ~= c.ttl_ms or (c.named and c.mode ~= 'x') or c.value ~= cur.v then
      return {'mismatch'}
    end
    return reply('idempotent', c, cur, pttl)
  end
  return gate.held(c, cur.owner, pttl, cur.ls ~= '' and cur.fence or nil)
end

-- take grants a free key to c after the gate (gate.admit); it returns
-- the fence. w: waiters left behind the caller, counted before any write
-- (with maxmemory reached, Redis refuses a script whose first write may
-- grow memory but not one that first shrank it: events.record_lapse).
function exclusive.take(c)
  local w = ''
  if c.walked then
    -- Dead entries count too: their lockd may come back (a Redis pause
    -- outlives its liveness) and retries only when woken.
    local left = redis.call('ZCARD', c.q.queue)
    if c.q.found then
      left = left - 1
    end
    if left > 0 then
      w = '1'
    end
  end
  return exclusive.grant(c, c, c.last, w, '')
end

-- renew extends cur, c's lease, if c holds it: {"ok", ...} (grant_reply),
-- {"lost"}, or {"in_set", n} for a key of a lock set of n keys renewed
-- alone (only its set's renewal or its session's, c.by_session, renews
-- it: a set is held whole). A grant bound to a session keeps its expiry
-- unless its session renews it (c.by_session "1"); a new value (c.value)
-- is news to readers (an election's proclaim): an event in the history
-- and the stream, with the lease's expiry as a grant's.
function exclusive.renew(c, cur)
  if cur.token ~= c.token then
    return {'lost'}
  elseif cur.ls ~= '' and c.by_session == '' then
    return {'in_set', cur.ls}
  end
  local ttl = tonumber(c.ttl_ms) or tonumber(cur.ttl)
  local left = int(tonumber(cur.exp) - c.now_ms)
  if cur.s ~= '' and c.by_session ~= '1' then
    ttl = tonumber(left)
  end
  local ms = through_window(cur, c.now_ms, ttl)
  local ttl_s, now_s = int(ttl), int(c.now_ms)
  cur.ttl, cur.renewed, cur.left, cur.exp = ttl_s, now_s, left, int(c.now_ms + ms)
  cur.renewals = int(tonumber(cur.renewals) + 1)
  if c.value ~= '' then
    cur.v = c.value
  end
  -- The history and the renewals outlive the lease's end by the
  -- retention, however long it is renewed.
  local keep, set = events.keep_for(cur.keep, c.now_ms + ms)
  cur.keep = keep
  exclusive.save(c.lease, cur, ms)
  events.schedule(c.sched, c.key, cur.exp)
  if c.value ~= '' then
    events.record(c, {'proclaimed', now_s, cur.owner, cur.fence, ttl_s, cur.count, c.actor, '', cur.exp, '', cur.w,
      keep, cur.d, cur.s, c.trace})
  end
  local n = events.push(c.renewals, cfg.renewals_max, events.pack({'renewed', now_s, cur.owner,
    cur.fence, ttl_s, cur.count, c.actor, '', '', left, '', '', '', '', ''}))
  if set then
    redis.call('PEXPIREAT', c.hist, keep)
  end
  if set or n == 1 then
    -- n == 1: the first renewal since the list lapsed gets the history's TTL.
    redis.call('PEXPIREAT', c.renewals, keep)
  end
  if cur.w == '1' then
    redis.call(cfg.publish, c.channel, 'renewed:' .. ms)
  end
  local r = reply('ok', c, cur, ms)
  if cur.rq ~= '' then
    r[#r + 1] = cur.rq
  end
  return r
end

-- keep_window ends cur, released by its holder before its hold window
-- (mh) ended: the key stays taken until then by nobody's token (a lease
-- with an empty token, count 0, expiring at mh), so that acquires answer
-- min_hold (gate.min_hold) and the token, renewed or released, finds no
-- lease. The window's end is no event: the key frees as a released one
-- did. The release event flags waiters (w), so that the first acquire
-- after the window looks at the queue, whoever joined it meanwhile. The
-- waiters are woken: each lockd's next try learns when the window ends
-- (a "renewed" message would be lost on a lockd whose try is under way,
-- which would then wait for the lease's TTL).
local function keep_window(c, cur)
  local left = tonumber(cur.mh) - c.now_ms
  cur.token, cur.count, cur.exp, cur.handed, cur.idem, cur.d, cur.rq = '', '0', cur.mh, '', '', '', ''
  exclusive.save(c.lease, cur, left)
  events.record(c, {'released', int(c.now_ms), cur.owner, cur.fence, cur.ttl, '0', c.actor, '', '', '', '1', cur.keep,
    '', '', c.trace})
  redis.call('ZREM', c.sched, c.key)
  if cur.w == '1' then
    redis.call(cfg.publish, c.channel, 'released')
  end
  return {'ok', 0, cur.acquired}
end

-- release gives back one level of cur, c's lease that take_lease took
-- (raw): {"ok", count_left, acquired_at_ms}, {"claimed"}, {"lost"},
-- {"not_found"} (a key kept by a hold window: keep_window) or {"in_set",
-- n} (a key of a lock set of n keys, released other than by its set,
-- c.unclaimed "set": a set is let go whole); or nil when the key is free
-- now and waiters may be queued: the caller then hands it off
-- (hand_off). A give-back (c.unclaimed) keeps no window: the grant's
-- caller never had it.
function exclusive.release(c, cur, raw)
  if cur.token ~= c.token or cur.ls ~= '' and c.unclaimed ~= 'set' then
    put_back(c, raw, cur)
    if cur.token ~= c.token then
      return {cur.token == '' and 'not_found' or 'lost'}
    end
    return {'in_set', cur.ls}
  end
  if c.unclaimed == 'unclaimed' and cur.handed == '' then
    -- Giving back a key handed to a waiter that seemed gone: the waiter
    -- claimed it with a try of its own meanwhile (acquire), so it is the
    -- waiter's.
    put_back(c, raw, cur)
    return {'claimed'}
  end
  local count = tonumber(cur.count) - 1
  if count > 0 then
    cur.count = int(count)
    exclusive.save(c.lease, cur, tonumber(cur.exp) - c.now_ms)
    -- The history's TTL was set past this lease's end when it was
    -- granted or renewed: no PEXPIRE here.
    events.record(c, {'released', int(c.now_ms), cur.owner, cur.fence, cur.ttl, cur.count, c.actor, '', cur.exp, '',
      cur.w, cur.keep, '', '', c.trace})
    return {'ok', count, cur.acquired}
  end
  if cur.old then
    redis.call('DEL', c.lease)
  elseif c.unclaimed == '' and (tonumber(cur.mh) or 0) > c.now_ms then
    return keep_window(c, cur)
  end
  events.record(c, {'released', int(c.now_ms), cur.owner, cur.fence, cur.ttl, '0', c.actor, '', '', '', cur.w, cur.keep,
    '', '', c.trace})
  redis.call('ZREM', c.sched, c.key)
  if cur.w ~= '1' then
    -- Nobody queued while it was held (gate.flag). A Redlock master wakes
    -- waiters on every release, queued in Redis or not (Redlock's wait in
    -- their process).
    if cfg.redlock then
      redis.call(cfg.publish, c.channel, 'released')
    end
    return {'ok', 0, cur.acquired}
  end
  return nil
end

-- hand_off gives the key just released (cur) to the next waiter at once
-- if it waits in this lockd (c.hand_to, its replica id): the lockd
-- answers it without another call, {"ok", 0, acquired_at_ms, waiter id,
-- owner, token, fence, ttl_ms, now_ms}. Until the waiter's own try claims
-- it (handed), a give-back (c.unclaimed) may undo it. Otherwise it wakes
-- the waiters.
function exclusive.hand_off(c, cur)
  local q = queue.of(c)
  local nx = c.hand_to ~= '' and queue.first_live(q, c.now_ms)
  -- A lock set's waiter (g) is never handed one key: it takes all of
  -- them at once (lockset.lua), woken like the others.
  if nx and nx.r == c.hand_to and nx.m == 'x' and not nx.g then
    local g = {owner = nx.o, token = nx.t, ttl = tonumber(nx.l), idem = nx.i, actor = nx.a, delay = nx.ld or '',
      value = nx.v or '', session = nx.sn or '', hold = nx.mh or ''}
    redis.call('ZREM', q.queue, nx.id)
    redis.call('HDEL', q.info, nx.id)
    queue.mark_ended(q.queue, nx.id)
    queue.forget(q)
    -- The grant keeps the waiter's trace id. The newest event is this
    -- release, with the released lease's fence.
    c.trace = nx.tr or ''
    local fence = exclusive.grant(c, g, {fence = cur.fence, keep = cur.keep}, '1', '1')
    return {'ok', 0, cur.acquired, nx.id, nx.o, nx.t, fence, g.ttl, c.now_ms}
  end
  redis.call(cfg.publish, c.channel, 'released')
  queue.forget(q)
  return {'ok', 0, cur.acquired}
end

-- force breaks cur, or answers {"lost"} when c names another fence:
-- {"ok", owner, fence, acquired_at_ms}. w: waiters woken now may queue
-- again on the free key; d: the lease's lock-delay holds the key off from
-- now (gate.lua, delayed).
function exclusive.force(c, cur)
  if c.fence ~= '' and cur.fence ~= c.fence then
    return {'lost'}
  end
  redis.call('DEL', c.lease)
  redis.call('ZREM', c.sched, c.key)
  events.record(c, {'force_released', int(c.now_ms), cur.owner, cur.fence, cur.ttl, cur.count, c.actor, c.reason, '',
    '', '1', cur.keep, cur.d, '', c.trace})
  redis.call(cfg.publish, c.channel, 'released')
  return {'ok', cur.owner, cur.fence, cur.acquired}
end

-- state describes cur and the key's queue (state.lua's "x" reply).
function exclusive.state(c, cur)
  return {'x', int(c.now_ms), queue.page(c.q, c.now_ms), cur.owner, cur.fence, tonumber(cur.count), tonumber(cur.ttl),
    cur.acquired, cur.renewed, tonumber(cur.renewals), tonumber(cur.exp) - c.now_ms, cur.left,
    redis.call('ZCARD', c.q.queue), cur.v or '', cur.rq or '', cur.mh or '', cur.ls or ''}
end

-- restore puts back exclusive lease r (restore.lua: a lease a lockd knows,
-- after Redis lost it) on c's key, as it was but for its renewals and
-- idempotency tag, with a "restored" event: {"restored"}; {"present"}
-- when the key has it already (its expiry made the later of the two), or
-- {"conflict"} when another lease with a higher fence holds the key (one
-- with a lower fence gives way: of two claims the newer wins).
function exclusive.restore(c, cur, r)
  local now = c.now_ms
  if cur and not cur.multi and cur.token ~= r.token and tonumber(cur.fence) < tonumber(r.fence) then
    -- Of two claims the higher fence wins: the key's newer lease.
    cur = nil
  end
  if cur then
    if cur.multi or cur.token ~= r.token then
      return {'conflict'}
    end
    if r.exp > tonumber(cur.exp) and not cur.old then
      cur.exp = int(r.exp)
      exclusive.save(c.lease, cur, r.exp - now)
      events.schedule(c.sched, c.key, cur.exp)
    end
    return {'present'}
  end
  local exp_s = int(r.exp)
  local keep, set = events.keep_for(nil, r.exp)
  -- w: waiters queued before the loss are gone with it, but those that
  -- queue again must be woken by the release.
  redis.call('SET', c.lease, pack_lease({token = r.token, owner = r.owner, fence = r.fence, count = r.count, ttl = r.ttl,
    acquired = r.acquired, renewed = int(now), renewals = '0', idem = '', ittl = r.ttl, left = '', exp = exp_s,
    handed = '', w = '1', keep = keep, d = r.delay, v = r.value, s = r.session, rq = '', ls = r.set}), 'PX',
    int(r.exp - now))
  events.schedule(c.sched, c.key, exp_s)
  events.record(c, {'restored', int(now), r.owner, r.fence, r.ttl, r.count, 'lockd', r.reason, exp_s, '', '1', keep,
    r.delay, r.session, '', r.set ~= '' and r.set or nil})
  if set then
    redis.call('PEXPIREAT', c.hist, keep)
  end
  return {'restored'}
end

-- A lock set (lockset.lua) takes its keys that share a slot in one call,
-- in the set's order, all or nothing: its grant is each key's ordinary
-- grant, exclusive (c.mode "x") or shared ("s", multi.take), marked with
-- the set's size (c.set).

-- set_key points c, the set's call, at its i-th key and reads its lease.
function exclusive.set_key(c, i)
  local at, keys = 4 + 5 * (i - 1), c.keys
  c.lease, c.hist, c.queue, c.qinfo, c.holders = keys[at + 1], keys[at + 2], keys[at + 3], keys[at + 4], keys[at + 5]
  c.key, c.channel = lock_of(c.lease), sibling(c.lease, 'wake')
  c.last, c.ended, c.walked, c.used = nil, nil, nil, 0
  c.q = queue.of(c)
  c.cur = exclusive.read(c)
end

-- set_admit says whether the set may take c's key now: nil (free, or
-- held shared for a shared set, and nobody queued before the set in its
-- way), "mine" and the fence (the set holds it: a grant of an earlier
-- call, on another slot's turn), or the refusal, which queued the set on
-- the key.
local function set_admit(c)
  local cur = c.cur
  if cur and cur.multi then
    local r = multi.acquire(c)
    if r and r[1] == 'granted' then
      return 'mine', r[4]
    elseif r then
      return r
    end
  elseif cur then
    if cur.token == c.token then
      return 'mine', cur.fence
    elseif cur.token == '' then
      -- Kept by a hold window after its holder's release.
      return gate.min_hold(c, cur.owner, tonumber(cur.exp) - c.now_ms)
    end
    return gate.held(c, cur.owner, tonumber(cur.exp) - c.now_ms, cur.ls ~= '' and cur.fence or nil)
  end
  if c.waiter ~= '' and queue.ended(c) then
    return {'ended'}
  end
  return gate.admit(c)
end

-- set_take grants c's key to the set once it is admitted; it returns the
-- fence.
local function set_take(c)
  local fence
  if c.mode == 'x' then
    fence = exclusive.take(c)
    queue.leave(c)
  else
    fence = multi.take(c)
    queue.leave(c)
    multi.wake(c)
  end
  queue.forget(c.q)
  return fence
end

-- set_mark marks the set's grant of c's key (fence) with the id of the
-- set's record, for the moments its keys in other slots are granted
-- after this one: until the record says the set holds them all, readers
-- and a refused acquire take the grant for the set's place in the queue,
-- not for a holder (lockset.go, gathering), and no partial grant shows.
local function set_mark(c, fence)
  local mark = sibling(c.lease, 'setmark')
  redis.call('HSET', mark, fence, c.rec)
  redis.call('PEXPIRE', mark, c.rec_ms)
end

-- set_try runs the set's call over its n keys. When every key admits the
-- set, each is granted (intent "grant") or the set queued first on it
-- ("reserve": its other keys are in other slots, granted once the set is
-- first on all). Otherwise the first key that refuses has queued the set,
-- which then queues first on the keys before it and on none after: every
-- set waits for its keys in one order, first on each before the next, so
-- no two sets wait for each other in a ring, and none holds a key while
-- it waits.
function exclusive.set_try(c, n)
  for i = 1, n do
    exclusive.set_key(c, i)
    local r = set_admit(c)
    if r and r ~= 'mine' then
      for j = 1, i - 1 do
        exclusive.set_key(c, j)
        if not c.cur then
          gate.reserve(c)
        end
      end
      return {'refused', i, unpack(r)}
    end
  end
  local out = {c.intent == 'grant' and 'granted' or 'reserved', int(c.now_ms), c.epoch_id or ''}
  for i = 1, n do
    exclusive.set_key(c, i)
    -- Admitted a moment ago in this same call: the gate reads the key
    -- again for the grant (c.last, c.walked), and answers the same.
    local r, fence = set_admit(c)
    if r == 'mine' then
      out[#out + 1] = fence
    elseif c.intent == 'grant' then
      out[#out + 1] = set_take(c)
      if c.rec ~= '' then
        set_mark(c, out[#out])
      end
    else
      gate.reserve(c)
    end
  end
  return out
end
