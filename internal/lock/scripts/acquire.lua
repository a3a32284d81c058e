-- acquire: take a free lease, re-enter a live one, or report who holds it.
--
-- KEYS[1] lease hash   KEYS[2] fence counter   KEYS[3] history stream
-- KEYS[4] waiters hash KEYS[5] epoch marker (see below)
-- KEYS[6] the bucket's expiry schedule  KEYS[7] the bucket's event stream
-- ARGV[1] new token         ARGV[2] owner          ARGV[3] ttl_ms
-- ARGV[4] re-entry token or ""                     ARGV[5] idempotency tag or ""
-- ARGV[6] actor             ARGV[7] history cap    ARGV[8] retention_ms
-- ARGV[9] wake channel      ARGV[10] mode: "grant", or "peek" to leave a
--                            free key alone (the caller queues behind others)
-- ARGV[11] the epoch id this lockd saw last in KEYS[5], or ""
-- ARGV[12] quarantine_ms: how long a lease granted before a loss could
--          still be live (the longest TTL granted through any lockd)
-- ARGV[13] a new epoch id, used if the marker must be made
-- ARGV[14] own_ms: how long the leases this lockd granted or renewed last
-- ARGV[15] the event stream's cap
--
-- The epoch marker (a hash: id, until, maxttl; no TTL) says that Redis
-- still has the data it had: it disappears only with everything else (a
-- restart without persistence, a failover to an empty replica, a flush).
-- A lockd that saw it before and finds it gone, or finds another id, knows
-- leases may have been forgotten while their holders still work: no key is
-- granted until every such lease has expired ("until"), shared by every
-- lockd through the new marker.
--
-- A waiter sends the same new token with every try: finding it live means
-- an earlier try of the same waiter was granted but its answer was lost.
--
-- Reply, one of:
--   {"granted"|"reentered"|"idempotent", owner, token, fence, count, ttl_ms,
--    acquired_at_ms, pttl_ms, now_ms}
--   {"held", owner, pttl_ms, epoch_id or "", maxttl}
--   {"lost"}      the re-entry token is not the live one
--   {"mismatch"}  the idempotency tag is the live lease's, owner or ttl not
--   {"free"}      peek only: nobody holds the key
--   {"recovering", epoch_id, ms_left}  quarantine after a loss of data
--
-- Grants end with the epoch id and its maxttl (the longest TTL granted or
-- renewed under it), for the caller's cache.
local lease, fencekey, hist, waiters = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local token, owner, ttl = ARGV[1], ARGV[2], tonumber(ARGV[3])
local reentry, idem, actor = ARGV[4], ARGV[5], ARGV[6]
local cap, retention, channel, mode = ARGV[7], tonumber(ARGV[8]), ARGV[9], ARGV[10]
local sched = KEYS[6]
ev = {stream = KEYS[7], cap = ARGV[15], key = lock_of(lease)}

local cur = redis.call('HMGET', lease, 'owner', 'token', 'fence', 'count', 'acquired_at', 'idem', 'ttl_ms', 'ittl')
if cur[2] then
  local pttl = redis.call('PTTL', lease)
  if cur[2] == token then
    return {'granted', cur[1], cur[2], cur[3], tonumber(cur[4]), tonumber(cur[7]), cur[5], pttl, int(clock())}
  end
  if reentry ~= '' then
    if cur[2] ~= reentry then
      return {'lost'}
    end
    local now_ms = clock()
    local count = redis.call('HINCRBY', lease, 'count', 1)
    redis.call('HSET', lease, 'ttl_ms', ttl, 'renewed_at', now_ms)
    redis.call('PEXPIRE', lease, ttl)
    schedule(sched, ev.key, now_ms + ttl)
    record(hist, cap, retention + ttl, 'reentered', now_ms, cur[1], cur[3], ttl, count, actor, '', now_ms + ttl)
    if ttl > (tonumber(redis.call('HGET', KEYS[5], 'maxttl')) or 0) then
      redis.call('HSET', KEYS[5], 'maxttl', ttl)
    end
    if redis.call('EXISTS', waiters) == 1 then
      redis.call('PUBLISH', channel, 'renewed:' .. ttl)
    end
    return {'reentered', cur[1], cur[2], cur[3], count, ttl, cur[5], ttl, now_ms}
  end
  if idem ~= '' and cur[6] == idem then
    if cur[1] ~= owner or cur[8] ~= ARGV[3] then
      return {'mismatch'}
    end
    return {'idempotent', cur[1], cur[2], cur[3], tonumber(cur[4]), tonumber(cur[7]), cur[5], pttl, int(clock())}
  end
  -- A lockd that only ever meets held keys must know the epoch too, to
  -- notice a loss later.
  local ep = redis.call('HMGET', KEYS[5], 'id', 'maxttl')
  return {'held', cur[1], pttl, ep[1] or '', tonumber(ep[2]) or 0}
end

if reentry ~= '' then
  return {'lost'}
end
if mode == 'peek' then
  return {'free'}
end

local epoch, seen, qms = KEYS[5], ARGV[11], tonumber(ARGV[12])
local ep = redis.call('HMGET', epoch, 'id', 'until', 'maxttl')
local now_ms, now_us = clock()
if not ep[1] then
  local untl = 0
  if seen ~= '' then
    untl = now_ms + qms
  end
  ep = {ARGV[13], untl, 0}
  redis.call('HSET', epoch, 'id', ep[1], 'until', untl, 'maxttl', 0)
elseif seen ~= '' and ep[1] ~= seen and tonumber(ep[2]) < now_ms + tonumber(ARGV[14]) then
  -- Another lockd made the marker anew, maybe without knowing of the
  -- leases this one granted.
  ep[2] = now_ms + tonumber(ARGV[14])
  redis.call('HSET', epoch, 'until', ep[2])
end
if tonumber(ep[2]) > now_ms then
  return {'recovering', ep[1], tonumber(ep[2]) - now_ms}
end
local maxttl = tonumber(ep[3]) or 0
if ttl > maxttl then
  maxttl = ttl
  redis.call('HSET', epoch, 'maxttl', ttl)
end

record_lapse(hist, cap, retention, sched, ev.key)

-- Fences never go backwards: the counter lapses with the history retention,
-- so every fence is also floored at the Redis clock in microseconds.
local fence = int(math.max((tonumber(redis.call('GET', fencekey)) or 0) + 1, now_us))
redis.call('SET', fencekey, fence, 'PX', retention)

redis.call('HSET', lease, 'owner', owner, 'token', token, 'fence', fence, 'count', 1,
  'ttl_ms', ttl, 'acquired_at', now_ms, 'renewed_at', now_ms, 'renewals', 0, 'idem', idem, 'ittl', ttl)
redis.call('PEXPIRE', lease, ttl)
schedule(sched, ev.key, now_ms + ttl)
record(hist, cap, retention + ttl, 'acquired', now_ms, owner, fence, ttl, 1, actor, '', now_ms + ttl)
return {'granted', owner, token, fence, 1, ttl, now_ms, ttl, now_ms, ep[1], maxttl}
