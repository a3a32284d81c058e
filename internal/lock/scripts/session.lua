-- session: a session's record and the grants bound to it (session.go).
--
-- KEYS[1] the session (a hash: owner, ttl, created, exp, all ms)
-- KEYS[2] its grants (a hash: the grant's token → its resource id; a
--         session may hold several shared holds or permits of one key)
-- ARGV[1] op: "create", "check", "renew", "attach", "detach", "end", "get"
--         or "restore"
-- ARGV[2] create, restore: owner; attach, detach: the resource id
-- ARGV[3] create: ttl_ms; attach, detach: the grant's token; restore:
--         "ttl_ms created_ms left_ms"
-- ARGV[4…] restore: the grants, token then resource id each
--
-- Both keys expire with the session: a session nobody renews is gone at
-- its expiry, and so, at the same moment, is every grant bound to it
-- (their expiry is the session's, session.go). The session's id is a
-- secret; its keys are named by its handle (a hash of the id), which is
-- all a grant or an event ever carries.
--
-- Reply: {"not_found"} when the session is gone (any op but create), else
--   create: {"ok", exp_ms, now_ms}  ({"exists"} if the handle is taken)
--   check:  {"ok", exp_ms, now_ms, owner, ttl_ms, created_ms}
--   attach, detach: {"ok", exp_ms, now_ms}
--   renew:  {"ok", exp_ms, now_ms, owner, ttl_ms, created_ms, id, token, …}
--   end:    {"ok", exp_ms, now_ms, owner, ttl_ms, created_ms, id, token, …}
--           (the session and its list are deleted)
--   get:    {"ok", exp_ms, now_ms, owner, ttl_ms, created_ms, id, …}
--   restore: {"restored"} or {"present"} (a session Redis lost with its
--           data, put back as a lockd knew it: restore.go)
local sess, grants, op = KEYS[1], KEYS[2], ARGV[1]
local now_ms = clock()

if op == 'create' then
  local exp = int(now_ms + tonumber(ARGV[3]))
  if redis.call('EXISTS', sess) == 1 then
    return {'exists'}
  end
  redis.call('HSET', sess, 'owner', ARGV[2], 'ttl', ARGV[3], 'created', int(now_ms), 'exp', exp)
  redis.call('PEXPIREAT', sess, exp)
  return {'ok', exp, int(now_ms)}
end

if op == 'restore' then
  if redis.call('EXISTS', sess) == 1 then
    return {'present'}
  end
  local ttl, created, left = string.match(ARGV[3], '^(%d+) (%d+) (%d+)$')
  local exp = int(now_ms + tonumber(left))
  redis.call('HSET', sess, 'owner', ARGV[2], 'ttl', ttl, 'created', created, 'exp', exp)
  redis.call('PEXPIREAT', sess, exp)
  for i = 4, #ARGV - 1, 2 do
    redis.call('HSET', grants, ARGV[i], ARGV[i + 1])
  end
  if #ARGV >= 5 then
    redis.call('PEXPIREAT', grants, exp)
  end
  return {'restored'}
end

local s = redis.call('HMGET', sess, 'owner', 'ttl', 'created', 'exp')
if not s[1] then
  return {'not_found'}
end
local exp = s[4]

-- with_grants is the reply of renew, end and get: the session, then its
-- grants (ids, or ids and tokens).
local function with_grants(tokens)
  local out = {'ok', exp, int(now_ms), s[1], s[2], s[3]}
  local all = redis.call('HGETALL', grants)
  for i = 1, #all, 2 do
    out[#out + 1] = all[i + 1]
    if tokens then
      out[#out + 1] = all[i]
    end
  end
  return out
end

if op == 'check' then
  return {'ok', exp, int(now_ms), s[1], s[2], s[3]}
elseif op == 'attach' then
  redis.call('HSET', grants, ARGV[3], ARGV[2])
  redis.call('PEXPIREAT', grants, exp)
  return {'ok', exp, int(now_ms)}
elseif op == 'detach' then
  if redis.call('HGET', grants, ARGV[3]) == ARGV[2] then
    redis.call('HDEL', grants, ARGV[3])
  end
  return {'ok', exp, int(now_ms)}
elseif op == 'renew' then
  exp = int(now_ms + tonumber(s[2]))
  redis.call('HSET', sess, 'exp', exp)
  redis.call('PEXPIREAT', sess, exp)
  if redis.call('EXISTS', grants) == 1 then
    redis.call('PEXPIREAT', grants, exp)
  end
  return with_grants(true)
elseif op == 'end' then
  local out = with_grants(true)
  redis.call('DEL', sess, grants)
  return out
elseif op == 'get' then
  return with_grants(false)
end
return redis.error_reply('session: unknown op ' .. tostring(op))
