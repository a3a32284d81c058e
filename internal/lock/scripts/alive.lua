-- alive: keep this lockd's waiters live in a bucket's queues for a while
-- longer (queue.lua), and forget replicas long dead.
--
-- KEYS[1] the bucket's replica liveness set
-- ARGV[1] replica id   ARGV[2] liveness_ms
--
-- Reply: 1
local now_ms = clock()
redis.call('ZADD', KEYS[1], now_ms + tonumber(ARGV[2]), ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now_ms - 3600000)
return 1
