-- leave: take a waiter that stopped waiting off a key's queue, and wake
-- those behind it if it may have been in their way.
--
-- KEYS[1] wait queue   KEYS[2] the queue's entries   KEYS[3] lease (exclusive.lua)
-- ARGV[1] waiter id    ARGV[2] wake channel
--
-- Reply: 1 when the waiter was queued, else 0
local gone = redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
-- Held exclusively: a string (exclusive.lua), or a hash with a token (the layout
-- before).
local function held_x()
  local t = redis.call('TYPE', KEYS[3]).ok
  return t == 'string' or (t == 'hash' and redis.call('HEXISTS', KEYS[3], 'token') == 1)
end
if gone == 1 and redis.call('EXISTS', KEYS[1]) == 1 and not held_x() then
  redis.call(cfg.publish, ARGV[2], 'released')
end
return gone
