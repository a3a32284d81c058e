-- events: a key's history, its renewals and the event stream.
--
-- A key's history (and its renewals) is a list, oldest first, of events
-- packed into one string each (US): type, at, owner, fence, ttl_ms, count,
-- actor, reason, exp, left, w, keep, d, s, t. One list element per event
-- keeps a key used once at a few hundred bytes (a stream's first node
-- takes 4 KB), and one field per event is cheaper to write than nine. exp
-- is set while the lease stays live after the event (a last event with
-- exp and no lease means the lease lapsed), left how much of the lease
-- was left at a renewal, w "1" when waiters may be queued (the lease's
-- own w, exclusive.lua), keep until when the history's TTL runs, d the
-- lease's lock-delay, s the session it is bound to (its handle), t the
-- trace id of the request that caused the event (c.trace), and, on a
-- lock set's grant only, ls the set's size (lockset.lua).
--
-- An event being written is an array of those fields in that order (no
-- nil among them: "" for none), the packed form's own layout: a table of
-- named fields cost an acquire+release cycle some 7,000 Redis
-- instructions more, under callgrind. An event read back (unpack) has
-- them by name.
--
-- The call c says where record writes: c.hist the history, c.stream the
-- bucket's event stream (the shared one, or on a Cluster the key's slot
-- outbox, see events.go; nil: no shared event), c.key the lock key,
-- c.trace the request's trace id.

local function pack(e)
  local s = e[1] .. US .. e[2] .. US .. e[3] .. US .. e[4] .. US .. e[5] .. US .. e[6] .. US .. e[7] .. US .. e[8] ..
    US .. e[9] .. US .. e[10] .. US .. e[11] .. US .. e[12] .. US .. e[13] .. US .. e[14] .. US .. e[15]
  if e[16] then
    s = s .. US .. e[16]
  end
  return s
end

-- unpack is the event a history element holds, or nil. One string.match
-- takes every field (with plain string.find and string.sub, one call each,
-- a cycle cost 25,000 instructions more, under callgrind). Events written
-- before w, keep, d, s, t or ls existed end earlier: the padding marks the
-- first field missing with \1, and those after it empty; a missing w
-- means waiters may be queued.
--
-- The event is always the same table, refilled (a fresh table of fifteen
-- named fields costs Redis some 3,000 instructions): a script reads one
-- history at a time, and a caller that reads another event is done with
-- the one before.
local EV_PAT = '([^\31]*)\31([^\31]*)\31([^\31]*)\31([^\31]*)\31([^\31]*)\31([^\31]*)\31([^\31]*)\31' ..
  '([^\31]*)\31([^\31]*)\31([^\31]*)\31([^\31]*)\31([^\31]*)\31([^\31]*)\31([^\31]*)\31([^\31]*)\31([^\31]*)'
local event_scratch = {}
local function unpack_event(s)
  if not s then
    return nil
  end
  local e = event_scratch
  e.type, e.at, e.owner, e.fence, e.ttl_ms, e.count, e.actor, e.reason, e.exp, e.left, e.w, e.keep, e.d, e.s, e.t, e.ls =
    string.match(s .. '\31\1\31\31\31\31\31', EV_PAT)
  if e.w == '\1' then
    e.w = '1'
  elseif e.keep == '\1' then
    e.keep = ''
  elseif e.d == '\1' then
    e.d = ''
  elseif e.s == '\1' then
    e.s = ''
  elseif e.t == '\1' then
    e.t = ''
  elseif e.ls == '\1' then
    e.ls = ''
  end
  return e
end

events.pack, events.unpack = pack, unpack_event

-- last is the newest event of a history, or nil.
function events.last(hist)
  return unpack_event(redis.call('LINDEX', hist, '-1'))
end

-- keep_slack: a history's TTL is set this much past what it needs (the
-- retention's 24th, an hour by default), so that a busy key extends it
-- once in a while, not on every grant.
local keep_slack = (cfg.retention - cfg.retention % 24) / 24 -- math is out of reach of a library's top level

-- keep_for says until when a key's history (and renewals) must live: past
-- a lease that ends at exp_ms by the retention, or keep, the lease's or
-- newest event's record of it, when that is enough. It returns the new
-- keep, and true when the caller must set it (PEXPIREAT, after its
-- writes: a key that does not exist yet keeps no TTL). A key's history
-- and renewals thus outlive its last lease's end by the retention, and by
-- at most keep_slack more.
function events.keep_for(keep, exp_ms)
  local need = exp_ms + cfg.retention
  local k = tonumber(keep) or 0
  if k >= need then
    -- keep is already the string int() made of it: no string.format.
    return keep, false
  end
  return int(need + keep_slack), true
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

events.push = push

-- record appends event e (an array of strings, above) to the key's capped
-- history and to the event stream.
-- Renewals are not recorded here but in their own list (renew), so that
-- they never push the story out of the history. The history's TTL is the
-- caller's (keep_for): events that start or extend a lease make it
-- outlive the lease by the retention, so the events that end it need not
-- touch it.
function events.record(c, e)
  local n = push(c.hist, cfg.history_max, pack(e))
  if n == 1 and e[12] == '' then
    -- A history begun by an event that knows no TTL for it (keep, e[12]:
    -- a lease of the layout before, shared holders): the retention from
    -- now.
    redis.call('PEXPIRE', c.hist, int(cfg.retention + keep_slack))
  end
  if c.stream and e[16] then
    redis.call('XADD', c.stream, 'MAXLEN', '~', cfg.events_max, '*', 'type', e[1], 'key', c.key, 'at', e[2],
      'owner', e[3], 'fence', e[4], 'ttl_ms', e[5], 'count', e[6], 'actor', e[7], 'reason', e[8], 'set', e[16])
  elseif c.stream then
    -- Never a token: the event stream is read by every reader and
    -- webhook. (Literal XADD calls: building an argument table and
    -- unpacking it costs more.)
    redis.call('XADD', c.stream, 'MAXLEN', '~', cfg.events_max, '*', 'type', e[1], 'key', c.key, 'at', e[2],
      'owner', e[3], 'fence', e[4], 'ttl_ms', e[5], 'count', e[6], 'actor', e[7], 'reason', e[8])
  end
end

-- session_lapsed is the reason of the "released" event (actor "session")
-- recorded when a grant bound to a session lapses with it: its session
-- was neither renewed nor ended. A lock-delay applies after it, as after
-- an expiry (gate.lua, delayed).
events.session_lapsed = 'session expired'

-- lapse records the lapse at time at of a lease whose newest event was
-- e (named fields: a holder's, or an exclusive lease's event): "expired",
-- or released by the session for a grant bound to one. A lapse is
-- nobody's request: no trace id, whichever request noticed it. w: waiters
-- may have queued while it lapsed.
function events.lapse(c, at, e)
  local kind, actor, reason = 'expired', '', ''
  if e.s ~= '' then
    kind, actor, reason = 'released', 'session', events.session_lapsed
  end
  events.record(c, {kind, str(at), e.owner, e.fence, e.ttl_ms, e.count, actor, reason, '', '', '1', e.keep, e.d,
    '', ''})
end

-- schedule puts a lease's expiry into its bucket's schedule (a sorted
-- set: lock key by expiry ms) that the sweeper (sweep.lua) reads, so that
-- a lapse is recorded when it happens, not when someone next looks.
function events.schedule(sched, key, exp)
  redis.call('ZADD', sched, str(exp), key)
end

-- record_lapse adds the lapse of an exclusive lease when the newest event
-- (last, read by the caller with events.last) left a lease live that no
-- longer exists. The caller checks that the lease is gone, and takes the
-- key off the schedule afterwards (or schedules its new lease): with
-- maxmemory reached, Redis refuses a script whose first write may grow
-- memory (RPUSH, HSET) but not one that first shrank it (ZREM), so an
-- acquire must not start with a ZREM. It runs in the same atomic script
-- as every other write of the key, and the event it adds has no exp: the
-- same lapse is recorded once, whether the sweeper, an acquire or a read
-- of the history notices it first, on whichever lockd.
--
-- The lapse happened at the schedule's time (renewals move it). Returns
-- {lapsed_at_ms, last event's type, its at} when it recorded one, else
-- nil.
function events.record_lapse(c, last)
  if not last or last.exp == '' then
    return nil
  end
  local at = tonumber(redis.call('ZSCORE', c.sched, c.key))
  if not at then
    -- Only a lease still live or lapsed unrecorded is on the schedule:
    -- release, force-release and every recorded lapse take the key off.
    return nil
  end
  events.lapse(c, at, last)
  return {int(at), last.type, last.at}
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

-- fence takes the next fence of c's key after its newest event last
-- (false: none): past the key's fence counter too on a Redlock master
-- (cfg.redlock, which writes it: fence.lua), or for a key of the layout
-- before the history list, met the first time it is used after an
-- upgrade.
function events.fence(c, last)
  local counter = nil
  if cfg.redlock or not last then
    counter = sibling(c.lease, 'fence')
  end
  return next_fence(last, counter, c.now_us)
end
