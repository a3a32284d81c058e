-- history: the newest events of a key, recording a lapsed lease first.
--
-- KEYS[1] lease (exclusive.lua)   KEYS[2] history list
-- KEYS[3] the bucket's expiry schedule   KEYS[4] the bucket's event stream
-- KEYS[5] the list to read: the history, or the renewals
-- KEYS[6] holders (shared or permits)
-- ARGV[1] count: how many events at most (the caps and the retention: cfg)
--
-- Reply: up to limit packed events of KEYS[5] (events.lua), oldest first:
-- the newest ones.
local c = {}
c.lease, c.hist, c.sched, c.stream, c.read, c.holders = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
c.count = tonumber(ARGV[1])
c.key = lock_of(c.lease)

local raw = redis.pcall('GET', c.lease)
if not raw then
  events.record_lapse(c, events.last(c.hist))
  redis.call('ZREM', c.sched, c.key)
elseif type(raw) == 'table' and redis.call('HEXISTS', c.lease, 'mode') == 1 then
  c.now_ms = clock()
  multi.prune(c)
  multi.settle(c)
end
-- A list may run past its cap until its next trim (events.push).
local most = c.read == c.hist and cfg.history_max or cfg.renewals_max
local limit = c.count
if limit > most then
  limit = most
end
return redis.call('LRANGE', c.read, -limit, -1)
