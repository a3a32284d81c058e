-- lib: helpers prepended to every script of this directory.

-- clock returns the Redis server time in milliseconds and microseconds, so
-- every timestamp and fence comes from one clock whichever lockd wrote it.
local function clock()
  local t = redis.call('TIME')
  local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  return math.floor(us / 1000), us
end

local function int(n)
  return string.format('%d', n)
end

-- record appends one event to a key's capped history and refreshes its
-- retention. exp is set while the lease stays live after the event: a
-- last event with exp and no lease means the lease lapsed.
local function record(hist, cap, retention, kind, at, owner, fence, ttl, count, actor, reason, exp)
  local args = {'XADD', hist, 'MAXLEN', '~', cap, '*',
    'type', kind, 'at', int(at), 'owner', owner, 'fence', fence,
    'ttl_ms', ttl, 'count', count, 'actor', actor, 'reason', reason or ''}
  if exp then
    args[#args + 1] = 'exp'
    args[#args + 1] = int(exp)
  end
  redis.call(unpack(args))
  redis.call('PEXPIRE', hist, retention)
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
    record(hist, cap, retention, 'expired', tonumber(e['exp']), e['owner'], e['fence'],
      e['ttl_ms'], e['count'], '', '', nil)
  end
end
