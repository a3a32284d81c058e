-- quarantine_end: an operator ends a bucket's restart quarantine early
-- (POST /v1/admin/quarantine/end): the marker's u2 becomes now, so that
-- acquire.lua grants again at once and every lockd's next refresh
-- (epoch.lua) reads no quarantine left. The marker keeps its id: a lockd
-- that already saw it starts no new quarantine. A missing marker is not
-- made: a hash without an id would read as a loss of data (check_epoch).
-- Standalone (no lib.lua): it needs none of the engine's settings.
--
-- KEYS[1] epoch marker
-- Reply: the ms the quarantine still had (0: none was on).
local u2 = tonumber(redis.call('HGET', KEYS[1], 'u2') or '0') or 0
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if u2 <= now then
  return 0
end
-- Nor may a lockd that puts its leases back later bring it back (epoch.settle).
local h = redis.call('HGETALL', KEYS[1])
for i = 1, #h, 2 do
  if string.sub(h[i], 1, 2) == 'p:' then
    redis.call('HDEL', KEYS[1], h[i])
  end
end
redis.call('HSET', KEYS[1], 'u2', string.format('%d', now), 'f', string.format('%d', now))
return u2 - now
