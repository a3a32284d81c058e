-- history: the newest events of a key, recording a lapsed lease first.
--
-- KEYS[1] lease (lib.lua)   KEYS[2] history list
-- KEYS[3] the bucket's expiry schedule   KEYS[4] the bucket's event stream
-- KEYS[5] the list to read: the history, or the renewals
-- KEYS[6] holders (shared or permits)
-- ARGV[1] limit   (the cap, retention and event stream's cap: cfg, lib.lua)
--
-- Reply: up to limit packed events of KEYS[5] (lib.lua), oldest first:
-- the newest ones.
local lease, hist, sched = KEYS[1], KEYS[2], KEYS[3]
local limit, cap, retention = tonumber(ARGV[1]), cfg.history_max, cfg.retention
ev = {stream = KEYS[4], cap = cfg.events_max, key = lock_of(lease), retention = retention}

local raw = redis.pcall('GET', lease)
if not raw then
  record_lapse(hist, cap, sched, ev.key, last_event(hist))
  redis.call('ZREM', sched, ev.key)
elseif type(raw) == 'table' and redis.call('HEXISTS', lease, 'mode') == 1 then
  local now_ms = clock()
  prune(lease, KEYS[6], hist, cap, now_ms)
  settle(lease, KEYS[6], sched, ev.key, now_ms)
end
-- A list may run past its cap until its next trim (lib.lua, push).
local most = KEYS[5] == hist and cap or cfg.renewals_max
if limit > most then
  limit = most
end
return redis.call('LRANGE', KEYS[5], -limit, -1)
