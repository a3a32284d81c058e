-- leave: take a waiter that stopped waiting off a key's queue, and wake
-- those behind it if it may have been in their way.
--
-- KEYS[1] wait queue   KEYS[2] the queue's entries   KEYS[3] lease (exclusive.lua)
-- ARGV[1] waiter id    ARGV[2] wake channel
-- ARGV[3] "hold": the wait was one round of a longer one (engine.go)
--
-- Reply: 1 when the waiter was queued, else 0
--
-- The waiter is marked ended (queue.mark_ended): a try of it that Redis
-- runs late queues it no more, nor grants it. A request with an
-- idempotency tag keeps its place for its next round (queue.keep): with
-- "hold" queued, so that nothing behind it moves up (nobody is woken);
-- else its place and since only, for a next round that comes before the
-- key is given to the next waiter.
local place = redis.call('ZSCORE', KEYS[1], ARGV[1])
queue.mark_ended(KEYS[1], ARGV[1])
if place then
  local e = cjson.decode(redis.call('HGET', KEYS[2], ARGV[1]) or '{}')
  if queue.keep({queue = KEYS[1], info = KEYS[2]}, ARGV[1], place, e, ARGV[3] == 'hold' and clock()) then
    return 1
  end
end
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
