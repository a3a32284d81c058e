-- lib: helpers prepended to every script of this directory.

-- clock returns the Redis server time in milliseconds and microseconds, so
-- every timestamp and fence comes from one clock whichever lockd wrote it.
-- Milliseconds (13 digits) print exactly as Lua numbers; microseconds
-- (16 digits) need int().
local function clock()
  local t = redis.call('TIME')
  local s, us = tonumber(t[1]), tonumber(t[2])
  return s * 1000 + math.floor(us / 1000), s * 1000000 + us
end

local function int(n)
  return string.format('%d', n)
end

-- str is v as an argument of redis.call. Redis 7.0 prints a Lua number
-- passed to redis.call with %.17g, which for a 13-digit time costs more
-- than most commands (a tenth of all of Redis's instructions in an
-- acquire+release cycle, under callgrind); %d does not.
local function str(v)
  if type(v) == 'number' then
    return string.format('%d', v)
  end
  return v
end

-- The epoch marker of a bucket (a hash, no TTL: id, u2) says that Redis
-- still has the data it had; it disappears only with everything else (a
-- restart without persistence, a failover to an empty replica, a flush).
-- A lockd that saw it before and finds it gone, or finds another id, knows
-- leases may have been forgotten while their holders still work: no key
-- of the bucket is granted until every such lease has expired (u2). How
-- long that is each lockd knows before the loss: it reads the bucket's
-- latest expiry (epoch.lua) every refresh and adds its own grants since,
-- so a lease released long ago never counts.
--
-- The marker also says which data layout writes the bucket (layout, this
-- one's is 2: leases as packed strings, histories as lists). lockd
-- before it kept its quarantine in "until", and honours nothing else: a
-- lockd of this layout keeps "until" a few seconds ahead (old_fence, on
-- every refresh), so that lockd of the layout before refuse grants (503
-- backend_recovering, /readyz 503) while any of this layout runs, and
-- serve again within seconds of a rollback. (Were one to grant anyway, it
-- fails on a lease of this layout, a string, rather than take it; and
-- this layout honours the leases it made, read_lease.)
local layout = '2'

-- old_fence is how far ahead "until" is kept for lockd of the layout
-- before: twice the shortest quarantine (min_ms, two refreshes).
local function old_fence(now, min_ms)
  return string.format('%d', now + 2 * min_ms)
end

-- check_epoch reads the marker and, for a lockd that saw another id
-- before (seen), starts or extends the quarantine: with the marker gone,
-- a new one (id new_id) whose u2 is now + max(live_ms, min_ms); with
-- another id (a lockd that noticed the loss first made it, maybe without
-- knowing what this one granted), u2 at least now + live_ms. live_ms is
-- how long what the caller knows of could still be live; min_ms gives
-- every other lockd one refresh to add what it knows. rest is
-- "live_ms min_ms new_id", read only then. It returns the id and u2 (a
-- number).
local function check_epoch(epoch, seen, rest, now)
  local ep = redis.call('HMGET', epoch, 'id', 'u2')
  if ep[1] and (seen == '' or ep[1] == seen) then
    -- The common case: the marker this lockd saw. Nothing to convert.
    return ep[1], tonumber(ep[2]) or 0
  end
  local live_ms, min_ms, new_id = string.match(rest, '^(%d+) (%d+) (.*)$')
  live_ms, min_ms = tonumber(live_ms), tonumber(min_ms)
  local untl = tonumber(ep[2]) or 0
  if not ep[1] then
    if seen ~= '' then
      untl = now + math.max(live_ms, min_ms)
    end
    redis.call('HSET', epoch, 'id', new_id, 'u2', string.format('%d', untl), 'layout', layout,
      'until', old_fence(now, min_ms))
    return new_id, untl
  end
  if seen ~= '' and ep[1] ~= seen and untl < now + live_ms then
    untl = now + live_ms
    redis.call('HSET', epoch, 'u2', string.format('%d', untl))
  end
  return ep[1], untl
end

-- latest_of names a bucket's set of shared and semaphore keys by the
-- expiry of their last holder (settle): the expiry schedule holds their
-- first, which is what the sweeper needs, and epoch.lua needs the last.
local function latest_of(sched)
  return sched .. ':latest'
end

-- ev says where record also appends lifecycle events for the event stream
-- (GET /v1/events, webhooks): stream is the bucket's event stream (the
-- shared one, or on a Cluster the key's slot outbox, see events.go), cap
-- its MAXLEN, key the lock key; and retention, the history's. trace is
-- the trace id of the request the script serves ("" or nil: none), which
-- each history event it records keeps. A script
-- that records sets it first; a script that leaves stream empty writes no
-- shared event.
local ev = {}

-- The key layout (keys.go): lock K's keys are "lockd:{K}:<part>".

-- key_of is the name of lock k's key part.
local function key_of(k, part)
  return 'lockd:{' .. k .. '}:' .. part
end

-- lock_of is the lock key K of its lease key, "lockd:{K}:lease" (a
-- string.sub: a pattern costs some 1,500 instructions more a call).
local function lock_of(lease)
  return string.sub(lease, 8, -8)
end

-- sibling is the name of another key of the same lock as name.
local function sibling(name, part)
  return string.match(name, '^(.*}:)') .. part
end

-- A key's history (and its renewals) is a list, oldest first, of events
-- packed into one string each: their fields joined by US (\31), which no
-- owner, actor or reason may hold (lock.CheckText refuses control
-- characters): type, at, owner, fence, ttl_ms, count, actor, reason, exp,
-- left_ms, w, keep, d, s. One list element per event keeps a key used once at a
-- few hundred bytes (a stream's first node takes 4 KB), and one field per
-- event is cheaper to write than nine. w is "1" when waiters may be queued
-- (the lease's own w, below), keep until when the history's TTL runs, d
-- the lease's lock-delay, s the session it is bound to (its handle), t
-- the trace id of the request that caused the event (ev.trace).
local US = '\31'

local function pack(kind, at, owner, fence, ttl, count, actor, reason, exp, left, w, keep, d, s, t)
  return kind .. US .. at .. US .. owner .. US .. fence .. US .. ttl .. US .. count .. US ..
    actor .. US .. reason .. US .. (exp or '') .. US .. (left or '') .. US .. (w or '') .. US .. (keep or '') ..
    US .. (d or '') .. US .. (s or '') .. US .. (t or '')
end

-- unpack_event is the event a history element holds, or nil. One
-- string.match takes every field (with plain string.find and string.sub,
-- one call each, a cycle cost 25,000 instructions more, under callgrind).
-- Events written before w, keep, d, s or t existed end earlier: the
-- padding marks the first field missing with \1, and those after it
-- empty; a missing w means waiters may be queued.
local EV_PAT = '([^\31]*)\31([^\31]*)\31([^\31]*)\31([^\31]*)\31([^\31]*)\31([^\31]*)\31([^\31]*)\31' ..
  '([^\31]*)\31([^\31]*)\31([^\31]*)\31([^\31]*)\31([^\31]*)\31([^\31]*)\31([^\31]*)\31([^\31]*)'
local function unpack_event(s)
  if not s then
    return nil
  end
  local kind, at, owner, fence, ttl, count, actor, reason, exp, left, w, keep, d, sn, t =
    string.match(s .. '\31\1\31\31\31\31', EV_PAT)
  if w == '\1' then
    w = '1'
  elseif keep == '\1' then
    keep = ''
  elseif d == '\1' then
    d = ''
  elseif sn == '\1' then
    sn = ''
  elseif t == '\1' then
    t = ''
  end
  return {type = kind, at = at, owner = owner, fence = fence, ttl_ms = ttl, count = count, actor = actor,
    reason = reason, exp = exp, left = left, w = w, keep = keep, d = d, s = sn, t = t}
end

-- last_event is the newest event of a history, or nil.
local function last_event(hist)
  return unpack_event(redis.call('LINDEX', hist, '-1'))
end

-- keep_slack: a history's TTL is set this much past what it needs (the
-- retention's 24th, an hour by default), so that a busy key extends it
-- once in a while, not on every grant.
local function keep_slack(retention)
  return math.floor(retention / 24)
end

-- keep_for says until when a key's history (and renewals) must live now:
-- need ms (Redis time), or keep, the lease's or newest event's record of
-- it, when that is enough. It returns the new keep, and true when the
-- caller must set it (PEXPIREAT, after its writes: a key that does not
-- exist yet keeps no TTL). A key's history and renewals thus outlive its
-- last lease's end by the retention, and by at most keep_slack more.
local function keep_for(keep, need, retention)
  local k = tonumber(keep) or 0
  if k >= need then
    -- keep is already the string int() made of it: no string.format.
    return keep, false
  end
  return int(need + keep_slack(retention)), true
end

-- An exclusive lease is a string with the lease's TTL at the lock's
-- lease key: its fields packed (US) in this order: token, owner, fence,
-- count, ttl_ms, acquired_at, renewed_at, renewals, idem (the
-- idempotency tag), ittl (the TTL its first request asked), left_ms (left
-- at the last renewal), exp, handed ("1": handed to a waiter who has not
-- claimed it yet), w ("1": waiters may be queued, so a release or renewal
-- wakes them), keep (until when the history lives, keep_for), d (the
-- lock-delay), v (the value), s (the handle of the session it is bound
-- to, session.lua). Shared
-- holders and permits keep a hash at the same name (below), and so did
-- exclusive leases before this layout: read_lease reads all three, so a
-- lease of the layout before is honoured, renewed and released until it
-- ends.
local function pack_lease(l)
  return l.token .. US .. l.owner .. US .. l.fence .. US .. l.count .. US .. l.ttl .. US ..
    l.acquired .. US .. l.renewed .. US .. l.renewals .. US .. l.idem .. US .. l.ittl .. US ..
    l.left .. US .. l.exp .. US .. l.handed .. US .. l.w .. US .. l.keep .. US .. (l.d or '') .. US .. (l.v or '') .. US .. (l.s or '')
end

-- unpack_lease reads a lease as unpack_event reads an event; a lease
-- written before d, v or s existed has them empty.
local LEASE_PAT = '([^\31]*)\31([^\31]*)\31([^\31]*)\31([^\31]*)\31([^\31]*)\31([^\31]*)\31([^\31]*)\31' ..
  '([^\31]*)\31([^\31]*)\31([^\31]*)\31([^\31]*)\31([^\31]*)\31([^\31]*)\31([^\31]*)\31([^\31]*)\31' ..
  '([^\31]*)\31([^\31]*)\31([^\31]*)'
local function unpack_lease(s)
  local token, owner, fence, count, ttl, acquired, renewed, renewals, idem, ittl, left, exp, handed, w, keep, d, v, sn =
    string.match(s .. '\31\31\31', LEASE_PAT)
  return {token = token, owner = owner, fence = fence, count = count, ttl = ttl, acquired = acquired,
    renewed = renewed, renewals = renewals, idem = idem, ittl = ittl, left = left, exp = exp,
    handed = handed, w = w, keep = keep, d = d, v = v, s = sn}
end

-- read_lease is the lease at lease: nil when nobody holds the key, {multi
-- = mode, limit = limit} for shared holders or permits (a hash), else the
-- exclusive lease's fields (old set for one of the layout before).
local function read_lease(lease, now)
  local raw = redis.pcall('GET', lease)
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
    left = h[13] or '', exp = int(now + pttl), handed = h[14] and '1' or '', w = '1', keep = '', old = true}
end

-- save_lease writes an exclusive lease that runs ms more (exp - now).
local function save_lease(lease, l, ms)
  redis.call('SET', lease, pack_lease(l), 'PX', str(ms))
end

-- put_back writes back a lease release.lua took with GETDEL (raw, its
-- packed string, read as cur) when the release was not the holder's.
local function put_back(lease, raw, cur, now)
  if type(raw) == 'string' then
    redis.call('SET', lease, raw, 'PX', str(tonumber(cur.exp) - now))
  end
end

-- trim_slack: a history is cut back to its cap only once it is this many
-- past it, so that a busy key pays the LTRIM once every so many events
-- (one cycle in 32 of an acquire and a release). history.lua never reads
-- past the cap.
local trim_slack = 64

-- push appends a packed event to a list capped at cap entries (at least)
-- and returns the list's length before any trim.
local function push(list, cap, packed)
  local n = redis.call('RPUSH', list, packed)
  cap = tonumber(cap)
  if n > cap + trim_slack then
    redis.call('LTRIM', list, -cap, -1)
  end
  return n
end

-- record appends one lifecycle event to a key's capped history, and to the
-- event stream (ev). exp is set while the lease stays live after the
-- event: a last event with exp and no lease means the lease lapsed. w and
-- keep are the lease's (pack). Renewals are not recorded here but in their
-- own list (renew.lua), so that they never push the story out of the
-- history. The history's TTL is the caller's (keep_for): events that
-- start or extend a lease make it outlive the lease by the retention, so
-- the events that end it need not touch it.
local function record(hist, cap, kind, at, owner, fence, ttl, count, actor, reason, exp, w, keep, d, s)
  at, ttl, count = str(at), str(ttl), str(count)
  if exp then
    exp = str(exp)
  end
  local n = push(hist, cap, pack(kind, at, owner, fence, ttl, count, actor, reason, exp, nil, w, keep, d, s, ev.trace))
  if n == 1 and (keep or '') == '' then
    -- A history begun by an event that knows no TTL for it (a lease of
    -- the layout before, shared holders): the retention from now.
    redis.call('PEXPIRE', hist, int(ev.retention + keep_slack(ev.retention)))
  end
  if ev.stream then
    -- Never a token: the event stream is read by every reader and webhook.
    -- (Literal XADD calls: building an argument table and unpacking it
    -- costs more.)
    redis.call('XADD', ev.stream, 'MAXLEN', '~', ev.cap, '*', 'type', kind, 'key', ev.key, 'at', at,
      'owner', owner, 'fence', fence, 'ttl_ms', ttl, 'count', count, 'actor', actor, 'reason', reason)
  end
end

-- session_lapsed is the reason of the "released" event (actor "session")
-- recorded when a grant bound to a session lapses with it: its session
-- was neither renewed nor ended. A lock-delay applies after it, as after
-- an expiry (delayed).
local session_lapsed = 'session expired'

-- schedule puts the lease's expiry into its bucket's schedule (a sorted
-- set: lock key by expiry ms) that the sweeper (sweep.lua) reads, so that a
-- lapse is recorded when it happens, not when someone next looks.
local function schedule(sched, key, exp)
  redis.call('ZADD', sched, str(exp), key)
end

-- record_lapse adds an "expired" event when the last event (last, read by
-- the caller with last_event) left a lease live that no longer exists.
-- The caller checks that the lease is gone, and takes the key off the
-- schedule afterwards (or schedules its new lease): with maxmemory
-- reached, Redis refuses a script whose first write may grow memory (RPUSH,
-- HSET) but not one that first shrank it (ZREM), so an acquire must not
-- start with a ZREM. It runs in the same atomic script as every other
-- write of the key, and the event it adds has no exp: the same lapse is
-- recorded once, whether the sweeper, an acquire or a read of the history
-- notices it first, on whichever lockd.
--
-- The lapse happened at the schedule's time (renewals move it). A grant
-- bound to a session lapses with it: that is recorded as released by the
-- session (session_lapsed). Returns {lapsed_at_ms, last event's type, its
-- at} when it recorded one, else nil.
local function record_lapse(hist, cap, sched, key, last)
  if not last or last.exp == '' then
    return nil
  end
  local at = tonumber(redis.call('ZSCORE', sched, key))
  if not at then
    -- Only a lease still live or lapsed unrecorded is on the schedule:
    -- release, force-release and every recorded lapse take the key off.
    return nil
  end
  -- w: waiters may have queued while it lapsed. A lapse is nobody's
  -- request: no trace id, whichever request noticed it.
  local trace = ev.trace
  ev.trace = nil
  if last.s ~= '' then
    record(hist, cap, 'released', at, last.owner, last.fence, last.ttl_ms, last.count, 'session', session_lapsed, nil, '1',
      last.keep, last.d)
  else
    record(hist, cap, 'expired', at, last.owner, last.fence, last.ttl_ms, last.count, '', '', nil, '1', last.keep, last.d)
  end
  ev.trace = trace
  return {int(at), last.type, last.at}
end

-- The wait queue of a key (queue.go): a sorted set of waiter ids by
-- arrival (q.queue) and a hash of what each one is (q.info, JSON: r its
-- lockd's replica id, d its deadline ms, m its mode, s since ms, o owner;
-- for a hand-off (release.lua) t its token, l ttl_ms, i idempotency tag,
-- a actor). A waiter is live while its deadline has not passed and its
-- replica is: each lockd keeps its score in the bucket's replica set
-- (q.replicas) in the future while it has waiters, so an entry whose lockd
-- died leaves the queue when that score passes, without a heartbeat per
-- waiter.
local function parse_entry(s)
  if not s then
    return nil
  end
  local e = cjson.decode(s)
  e.rid, e.deadline, e.mode, e.since, e.owner = e.r, tonumber(e.d), e.m, e.s, e.o
  return e
end

-- live_until is when the entry stops counting: its deadline, or when its
-- lockd's liveness ends, whichever is first (0: already dead).
local function live_until(q, e, now)
  if not e then
    return 0
  end
  local alive = q.alive[e.rid]
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
local function walk(q, now, f)
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
      local u = live_until(q, e, now)
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
-- not queued) and says whether a request of mode want ('x' exclusive,
-- 's' shared, 'p' a permit of limit with used held) may be granted now:
-- true, or false and the entry that blocks it with how long it stays
-- live. Past walk_max entries it answers false, with the first live entry
-- it met (nil if none: the dead ones it met are forgotten, and a retry
-- looks further). It sets q.found when it met wid.
local function ahead(q, want, used, limit, wid, now)
  local live, first, until_first = 0, nil, 0
  local r, cut = walk(q, now, function(id, e, u)
    if id == wid then
      q.found = true
      return {true}
    end
    if not first then
      first, until_first = e, u
    end
    if want == 'x' or (want == 's' and e.mode ~= 's') then
      return {false, e, u - now}
    end
    if want == 'p' then
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
-- script's other writes: see record_lapse on maxmemory.
local function forget(q)
  if q.dead[1] then
    redis.call('ZREM', q.queue, unpack(q.dead))
    redis.call('HDEL', q.info, unpack(q.dead))
    q.dead = {}
  end
end

-- first_live is the first live entry of the queue (with its id), or nil.
local function first_live(q, now)
  return walk(q, now, function(id, e)
    e.id = id
    return e
  end)
end

-- Holders of a shared lock or a semaphore: the lease hash has mode
-- ('shared' or 'permit'), limit, last (the newest holder's token), and per
-- holder "h:<token>" (JSON, every number a string), "i:<idempotency tag>"
-- → token and "f:<fence>" → token (with fx set; a lease made before the
-- fence index has no fx); the holders sorted
-- set has each token by its expiry. The hash and the set outlive the last
-- expiry by grace_ms, so that a lapse is still recorded (prune) when the
-- sweeper or the next caller comes.
local grace_ms = 60000

-- prune_max bounds the lapsed holders one call records and removes: when
-- thousands lapse together, the sweeper comes back for the rest.
local prune_max = 25

-- live_holders is how many holders' leases have not lapsed, pruned or not.
local function live_holders(holders, now)
  return redis.call('ZCOUNT', holders, '(' .. string.format('%d', now), '+inf')
end

-- prune records and removes up to prune_max holders whose lease lapsed;
-- it returns them (decoded).
local function prune(lease, holders, hist, cap, now)
  local gone = redis.call('ZRANGEBYSCORE', holders, '-inf', string.format('%d', now), 'LIMIT', 0, prune_max)
  local out = {}
  local trace = ev.trace -- lapses are nobody's request (record_lapse)
  ev.trace = nil
  for _, t in ipairs(gone) do
    local raw = redis.call('HGET', lease, 'h:' .. t)
    if raw then
      local h = cjson.decode(raw)
      if (h.s or '') ~= '' then
        record(hist, cap, 'released', h.e, h.o, h.f, h.t, h.c, 'session', session_lapsed, nil, '1', '')
      else
        record(hist, cap, 'expired', h.e, h.o, h.f, h.t, h.c, '', '', nil, '1', '')
      end
      redis.call('HDEL', lease, 'h:' .. t, 'f:' .. h.f)
      if h.i ~= '' then
        redis.call('HDEL', lease, 'i:' .. h.i)
      end
      out[#out + 1] = h
    end
    redis.call('ZREM', holders, t)
  end
  ev.trace = trace
  return out
end

-- holder_of is the live holder with this token (decoded), after pruning
-- the lapsed ones; or nil and the answer for a token that holds nothing:
-- "lost" while others hold the key, else "not_found".
local function holder_of(lease, holders, hist, cap, sched, key, token, now)
  prune(lease, holders, hist, cap, now)
  local raw = redis.call('HGET', lease, 'h:' .. token)
  if raw then
    local h = cjson.decode(raw)
    -- Lapsed, but past what this call prunes.
    if tonumber(h.e) > now then
      return h
    end
  end
  if live_holders(holders, now) > 0 then
    return nil, 'lost'
  end
  redis.call('DEL', lease, holders)
  redis.call('ZREM', sched, key)
  redis.call('ZREM', latest_of(sched), key)
  return nil, 'not_found'
end

-- settle sets the TTLs and the expiry schedule of a key's holders after a
-- change (and when its last holder's lease ends, for epoch.lua), or
-- deletes the key when none is left; it returns how many live holders
-- there are. Lapsed holders prune has not reached yet keep the schedule in
-- the past, so that the sweeper comes back for them.
local function settle(lease, holders, sched, key, now)
  local n = redis.call('ZCARD', holders)
  if n == 0 then
    redis.call('DEL', lease, holders)
    redis.call('ZREM', sched, key)
    redis.call('ZREM', latest_of(sched), key)
    return 0
  end
  local last = redis.call('ZRANGE', holders, -1, -1, 'WITHSCORES')
  local first = redis.call('ZRANGE', holders, 0, 0, 'WITHSCORES')
  local keep = tonumber(last[2]) - now + grace_ms
  redis.call('PEXPIRE', lease, keep)
  redis.call('PEXPIRE', holders, keep)
  schedule(sched, key, first[2])
  redis.call('ZADD', latest_of(sched), last[2], key)
  return live_holders(holders, now)
end

-- next_fence takes a key's next fence: past the fence of its newest event
-- (last), and past its fence counter when asked (counter: the key of one,
-- which Redlock writes, fence.lua, and which keys of the layout before the
-- history list kept; otherwise nil). The history lapses with the retention,
-- so every fence is also floored at the Redis clock in microseconds.
local function next_fence(last, counter, now_us)
  local now = int(now_us)
  if not counter and last then
    -- The common case without a number read (tonumber of 16 digits
    -- costs more than the rest): fences of as many digits compare as
    -- text.
    local f = last.fence
    if #f < #now or (#f == #now and f < now) then
      return now
    end
  end
  local top = last and tonumber(last.fence) or 0
  if counter then
    top = math.max(top, tonumber(redis.call('GET', counter)) or 0)
  end
  return int(math.max(top + 1, now_us))
end

-- delayed is how long a key is still held off by a lock-delay (0: not):
-- after a lease that named one ended by expiry, force-release or the
-- lapse of its session (its newest event, last, carries the delay),
-- nobody is granted the key until that much time has passed since. A
-- holder's own release, or its session's end, sets none.
local function delayed(last, now_ms)
  if not last or last.d == '' then
    return 0
  end
  if last.type ~= 'expired' and last.type ~= 'force_released' and
    not (last.type == 'released' and last.actor == 'session' and last.reason == session_lapsed) then
    return 0
  end
  return math.max(0, tonumber(last.at) + tonumber(last.d) - now_ms)
end

-- grant_x writes a new exclusive lease on a free key (acquire.lua, and a
-- release that hands the key to the next waiter); it returns its fence.
-- last is the history's newest event, counter as for next_fence, w and
-- handed the lease's (pack_lease), d its lock-delay in ms ("" for none),
-- v its value (JSON, "" for none; valid JSON never holds the US byte), s
-- its session's handle ("" for none). With nx, it grants only if nobody
-- holds the key (SET NX GET: one command reads and writes), and returns
-- nil, having written nothing, if somebody does.
local function grant_x(lease, hist, cap, retention, sched, owner, token, ttl, idem, actor, now_ms, now_us, last, counter, w, handed, d, v, s, nx)
  local fence = next_fence(last, counter, now_us)
  local ttl_s, now_s, exp_s = str(ttl), str(now_ms), str(now_ms + ttl)
  local keep, set = keep_for(last and last.keep, now_ms + ttl + retention, retention)
  -- pack_lease's order, without a table between.
  local packed = token .. US .. owner .. US .. fence .. US .. '1' .. US .. ttl_s .. US .. now_s .. US .. now_s .. US ..
    '0' .. US .. idem .. US .. ttl_s .. US .. '' .. US .. exp_s .. US .. handed .. US .. w .. US .. keep .. US ..
    (d or '') .. US .. (v or '') .. US .. (s or '')
  if nx then
    -- Held: the old value (a string), or an error (shared holders' hash).
    if redis.pcall('SET', lease, packed, 'NX', 'GET', 'PX', ttl_s) ~= false then
      return nil
    end
  else
    redis.call('SET', lease, packed, 'PX', ttl_s)
  end
  schedule(sched, ev.key, exp_s)
  record(hist, cap, 'acquired', now_s, owner, fence, ttl_s, '1', actor, '', exp_s, w, keep, d, s)
  if set then
    redis.call('PEXPIREAT', hist, keep)
  end
  return fence
end
