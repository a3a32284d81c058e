-- history: the newest events of a key, recording a lapsed lease first.
--
-- KEYS[1] lease hash   KEYS[2] history stream
-- ARGV[1] limit        ARGV[2] history cap   ARGV[3] retention_ms
--
-- Reply: the XREVRANGE entries, newest first.
local lease, hist = KEYS[1], KEYS[2]
local limit, cap, retention = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3])

if redis.call('EXISTS', lease) == 0 then
  record_lapse(hist, cap, retention)
end
return redis.call('XREVRANGE', hist, '+', '-', 'COUNT', limit)
