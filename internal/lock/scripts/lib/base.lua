-- base: what every module and script uses. The modules are concatenated
-- in this order (scripts.go): base, events, epoch, queue, gate,
-- exclusive, multi; then the operation's own script, a dispatcher that
-- reads KEYS and ARGV into one table (the call, c) and calls a module.
--
-- Each module is a table of named functions, declared here so that any
-- module may call any other's (the lookup happens at the call). Under
-- FUNCTION LOAD this text runs once per server, so the tables cost no
-- call anything.
local events, epoch, queue, gate, exclusive, multi = {}, {}, {}, {}, {}, {}

-- calls holds the call table (c) of each operation script: what its KEYS
-- and ARGV say, by name, and what the call learns on the way. Under
-- FUNCTION LOAD the tables are made once per server and refilled by every
-- call, since making one costs Redis far more (each new key of a Lua table
-- some 200 instructions, and its garbage more: a fresh acquire call table
-- cost a cycle 9,000 instructions, under callgrind). So a script sets every
-- field of its table before it calls a module, those it leaves empty too.
local calls = {acquire = {}, renew = {}, release = {}, force_release = {}, state = {}, restore = {}, lockset = {}}

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

-- US (\31) joins the fields of a packed event or exclusive lease: no
-- owner, actor or reason may hold it (lock.CheckText refuses control
-- characters), nor valid JSON.
local US = '\31'

-- grant_reply is the one writer of the grant reply that protocol.go's
-- readGrant reads: {status, owner, token, fence, count, ttl_ms,
-- acquired_at_ms, pttl_ms, now_ms, epoch_id or "", mode, limit}. g is
-- the grant (exclusive.grant_of, multi.grant_of); mode ("x", "s" or "p")
-- and limit are the lease's as Redis holds it, never the request's.
local function grant_reply(status, g, now_ms, epoch_id)
  return {status, g.owner, g.token, g.fence, tonumber(g.count), tonumber(g.ttl), g.acquired, g.pttl, int(now_ms),
    epoch_id or '', g.mode, g.limit}
end
