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

-- record appends one event to a key's capped history. exp is set while the
-- lease stays live after the event: a last event with exp and no lease
-- means the lease lapsed. (Two literal XADD calls: building an argument
-- table and unpacking it costs more.)
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
end

-- record_lapse adds an "expired" event when the last event left a lease
-- live that no longer exists. The caller checks that the lease is gone.
local function record_lapse(hist, cap, retention)
  local last = redis.call('XREVRANGE', hist, '+', '-', 'COUNT', 1)
  if not last[1] then
    return
  end
  local f, e = last[1][2], {}
  for i = 1, #f, 2 do e[f[i]] = f[i + 1] end
  if e['exp'] then
    record(hist, cap, retention, 'expired', e['exp'], e['owner'], e['fence'],
      e['ttl_ms'], e['count'], '', '', nil)
  end
end
