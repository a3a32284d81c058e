-- state: read a key's live grants (never a token) and its wait queue.
--
-- KEYS[1] lease (lib.lua)   KEYS[2] wait queue   KEYS[3] the queue's entries
-- KEYS[4] holders (shared or permits)   KEYS[5] the bucket's replica liveness set
--
-- Reply: {} when nobody holds the key, else
--   {"x", now_ms, queue, owner, fence, count, ttl_ms, acquired_at_ms,
--    renewed_at_ms, renewals, pttl_ms, left_ms, waiters, value} one
--    exclusive holder (value: JSON, or "")
--   {"m", now_ms, queue, mode, limit, holders, waiters, holders_total}
--                                                       shared holders or permits
-- queue: {owner, mode, since_ms, …} flat, live waiters in grant order among
--        the first page_max entries; waiters: the queue's length
-- holders: {owner, fence, count, ttl_ms, acquired_at_ms, renewed_at_ms,
--           renewals, expires_at_ms, left_ms, value, …} flat, the first page_max
--           live ones by expiry, and the newest (the "last" token) if live;
--           holders_total: how many are live
-- Whatever a key holds, one call reads a bounded part of it.
-- left_ms: how much of the grant was left at its last renewal ("" before
-- the first). Nothing is written: lapsed holders and dead waiters are only
-- left out.
local lease = KEYS[1]
local now_ms = clock()
local q = {queue = KEYS[2], info = KEYS[3], replicas = KEYS[5], alive = {}, dead = {}}

local page_max = 100

local function waiting()
  local out = {}
  local ids = redis.call('ZRANGE', q.queue, 0, page_max - 1)
  if not ids[1] then
    return out
  end
  local infos = redis.call('HMGET', q.info, unpack(ids))
  for j = 1, #ids do
    local e = parse_entry(infos[j])
    if live_until(q, e, now_ms) > 0 then
      out[#out + 1] = e.owner
      out[#out + 1] = e.mode
      out[#out + 1] = e.since
    end
  end
  return out
end

local cur = read_lease(lease, now_ms)
if cur and cur.multi then
  local hs = {}
  local since = '(' .. int(now_ms)
  local live = redis.call('ZRANGEBYSCORE', KEYS[4], since, '+inf', 'LIMIT', 0, page_max)
  local newest = redis.call('HGET', lease, 'last')
  if newest and #live == page_max then
    -- The newest holder, which the state describes, may be past the page.
    local at = tonumber(redis.call('ZSCORE', KEYS[4], newest))
    if at and at > now_ms then
      live[#live + 1] = newest
    end
  end
  local seen = {}
  for _, t in ipairs(live) do
    local raw = not seen[t] and redis.call('HGET', lease, 'h:' .. t)
    seen[t] = true
    if raw then
      local h = cjson.decode(raw)
      for _, v in ipairs({h.o, h.f, h.c, h.t, h.a, h.r, h.n, h.e, h.l}) do
        hs[#hs + 1] = v
      end
      hs[#hs + 1] = h.v or ''
    end
  end
  if not hs[1] then
    return {}
  end
  return {'m', int(now_ms), waiting(), cur.multi, cur.limit, hs, redis.call('ZCARD', q.queue),
    redis.call('ZCOUNT', KEYS[4], since, '+inf')}
end
if not cur then
  return {}
end
return {'x', int(now_ms), waiting(), cur.owner, cur.fence, tonumber(cur.count), tonumber(cur.ttl), cur.acquired,
  cur.renewed, tonumber(cur.renewals), tonumber(cur.exp) - now_ms, cur.left, redis.call('ZCARD', q.queue), cur.v or ''}
