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

-- ev says where record also appends lifecycle events for the event stream
-- (GET /v1/events, webhooks): stream is the bucket's event stream (the
-- shared one, or on a Cluster the key's slot outbox, see events.go), cap
-- its MAXLEN, key the lock key. A script that records sets it first; a
-- script that leaves it empty writes no shared event.
local ev = {}

-- lock_of is the lock key K of a lease key "lockd:{K}:lease".
local function lock_of(lease)
  return string.sub(lease, 8, -8)
end

-- record appends one lifecycle event to a key's capped history, and to the
-- event stream (ev). exp is set while the lease stays live after the
-- event: a last event with exp and no lease means the lease lapsed.
-- (Literal XADD calls: building an argument table and unpacking it costs
-- more.) Renewals are not recorded here but in their own stream
-- (renew.lua), so that they never push the story out of the history.
--
-- retention is the history's new TTL, or nil to leave it: events that start
-- or extend a lease pass retention + the lease TTL, so the events that end
-- it (release, force-release, within that TTL) need not touch it and the
-- history still outlives its last event by the retention.
local function record(hist, cap, retention, kind, at, owner, fence, ttl, count, actor, reason, exp)
  if exp then
    redis.call('XADD', hist, 'MAXLEN', '~', cap, '*', 'type', kind, 'at', at, 'owner', owner,
      'fence', fence, 'ttl_ms', ttl, 'count', count, 'actor', actor, 'reason', reason, 'exp', exp)
  else
    redis.call('XADD', hist, 'MAXLEN', '~', cap, '*', 'type', kind, 'at', at, 'owner', owner,
      'fence', fence, 'ttl_ms', ttl, 'count', count, 'actor', actor, 'reason', reason)
  end
  if retention then
    redis.call('PEXPIRE', hist, retention)
  end
  if ev.stream then
    -- Never a token: the event stream is read by every reader and webhook.
    redis.call('XADD', ev.stream, 'MAXLEN', '~', ev.cap, '*', 'type', kind, 'key', ev.key, 'at', at,
      'owner', owner, 'fence', fence, 'ttl_ms', ttl, 'count', count, 'actor', actor, 'reason', reason)
  end
end

-- schedule puts the lease's expiry into its bucket's schedule (a sorted
-- set: lock key by expiry ms) that the sweeper (sweep.lua) reads, so that a
-- lapse is recorded when it happens, not when someone next looks.
local function schedule(sched, key, exp)
  redis.call('ZADD', sched, exp, key)
end

-- record_lapse adds an "expired" event when the last event left a lease
-- live that no longer exists. The caller checks that the lease is gone,
-- and takes the key off the schedule afterwards (or schedules its new
-- lease): with maxmemory reached, Redis refuses a script whose first write
-- may grow memory (XADD, HSET) but not one that first shrank it (ZREM), so
-- an acquire must not start with a ZREM. It runs in the same atomic script
-- as every other write of the key, and the event it adds has no exp: the
-- same lapse is recorded once, whether the sweeper, an acquire or a read
-- of the history notices it first, on whichever lockd.
--
-- The lapse happened at the schedule's time (renewals move it), else at
-- the exp of the last event. Returns {lapsed_at_ms, last event's type, its
-- at} when it recorded one, else nil.
local function record_lapse(hist, cap, retention, sched, key)
  local at = tonumber(redis.call('ZSCORE', sched, key))
  local last = redis.call('XREVRANGE', hist, '+', '-', 'COUNT', 1)
  if not last[1] then
    return nil
  end
  local f, e = last[1][2], {}
  for i = 1, #f, 2 do e[f[i]] = f[i + 1] end
  if e['exp'] then
    at = at or tonumber(e['exp'])
    record(hist, cap, retention, 'expired', int(at), e['owner'], e['fence'],
      e['ttl_ms'], e['count'], '', '', nil)
    return {int(at), e['type'], e['at']}
  end
  return nil
end
