-- fence: write a fence that a majority of Redlock masters agreed on back to
-- this master, so that any later majority sees it (see redlock.go).
--
-- KEYS[1] fence counter   KEYS[2] lease (exclusive.lua)
-- ARGV[1] fence           ARGV[2] the grant's token   ARGV[3] retention_ms
--
-- Reply: 1
local fencekey, lease = KEYS[1], KEYS[2]
local fence, token, retention = ARGV[1], ARGV[2], tonumber(ARGV[3])
local cur = redis.call('GET', fencekey)
-- Fences are 16-digit numbers: compare them as integers, not as Lua's
-- doubles or as strings.
if not cur or #cur < #fence or (#cur == #fence and cur < fence) then
  redis.call('SET', fencekey, fence, 'PX', retention)
end
local now = clock()
local cur = exclusive.read({lease = lease, now_ms = now})
if cur and cur.token == token then
  if cur.old then
    redis.call('HSET', lease, 'fence', fence)
  else
    cur.fence = fence
    exclusive.save(lease, cur, tonumber(cur.exp) - now)
  end
end
return 1
