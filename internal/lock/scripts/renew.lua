-- renew: extend a live grant if the token is the live one (compare-and-pexpire).
--
-- KEYS[1] lease (lib.lua)   KEYS[2] renewals list   KEYS[3] wait queue
-- KEYS[4] the bucket's expiry schedule   KEYS[5] history list
-- KEYS[6] holders (shared or permits)    KEYS[7] the bucket's event stream
-- ARGV[1] token        ARGV[2] ttl_ms or "" (keep the lease's own)
-- ARGV[3] actor        ARGV[4] wake channel
-- and, each "" when left off the end (protocol.go):
-- ARGV[5] the request's trace id, or "" (lib.lua, ev)
-- ARGV[6] a new value for the grant (JSON), or "" to keep its own; an
--         exclusive lease's new value is recorded as a "proclaimed" event
-- ARGV[7] "1" when the grant's session renews it (session.go): a grant
--         bound to a session lives as long as the session, so any other
--         renewal keeps its expiry and changes only its value
-- From cfg (lib.lua): the renewals' and history's caps, the retention,
-- the event stream's cap.
--
-- A renewal goes to its own capped list (packed as history events, lib.lua),
-- with how much of the lease was left when it came (left_ms), never to the
-- history: a lease renewed every few hundred ms would otherwise push every
-- lifecycle event out of it. The lease keeps left_ms of its last renewal
-- for the at-risk check (state.lua).
--
-- Reply: {"ok", owner, token, fence, count, ttl_ms, acquired_at_ms, pttl_ms, now_ms,
--         [mode, limit] (shared holders or permits)} | {"not_found"} | {"lost"}
local lease, renewals, queue, sched = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local token, actor, cap, retention, channel = ARGV[1], ARGV[3], cfg.renewals_max, cfg.retention, ARGV[4]
local trace, value, by_session = ARGV[5] or '', ARGV[6] or '', ARGV[7] or ''

local now_ms = clock()
local cur = read_lease(lease, now_ms)
if cur and cur.multi then
  -- One of several holders.
  local holders = KEYS[6]
  ev = {stream = KEYS[7], cap = cfg.events_max, key = lock_of(lease), retention = retention, trace = trace}
  local h, status = holder_of(lease, holders, KEYS[5], cfg.history_max, sched, ev.key, token, now_ms)
  if not h then
    return {status}
  end
  local ttl = tonumber(ARGV[2]) or tonumber(h.t)
  local left = tonumber(h.e) - now_ms
  if (h.s or '') ~= '' and by_session ~= '1' then
    ttl = left
  end
  h.t, h.r, h.e, h.l, h.n = int(ttl), int(now_ms), int(now_ms + ttl), int(left), int(tonumber(h.n) + 1)
  if value ~= '' then
    h.v = value
  end
  redis.call('HSET', lease, 'h:' .. token, cjson.encode(h))
  redis.call('ZADD', holders, h.e, token)
  settle(lease, holders, sched, ev.key, now_ms)
  push(renewals, cap, pack('renewed', int(now_ms), h.o, h.f, int(ttl), h.c, actor, '', nil, int(left), nil, nil))
  local keep = keep_for(nil, now_ms + ttl + retention, retention)
  redis.call('PEXPIREAT', KEYS[5], keep)
  redis.call('PEXPIREAT', renewals, keep)
  return {'ok', h.o, token, h.f, tonumber(h.c), ttl, h.a, ttl, now_ms, cur.multi, tonumber(cur.limit)}
end
if not cur then
  return {'not_found'}
end
if cur.token ~= token then
  return {'lost'}
end
local ttl = tonumber(ARGV[2]) or tonumber(cur.ttl)
local left = int(tonumber(cur.exp) - now_ms)
if cur.s ~= '' and by_session ~= '1' then
  ttl = tonumber(left)
end
local ttl_s, now_s = int(ttl), int(now_ms)

cur.ttl, cur.renewed, cur.left, cur.exp = ttl_s, now_s, left, int(now_ms + ttl)
cur.renewals = int(tonumber(cur.renewals) + 1)
if value ~= '' then
  cur.v = value
end
-- The history and the renewals outlive the lease's end by the retention,
-- however long it is renewed.
local keep, set = keep_for(cur.keep, now_ms + ttl + retention, retention)
cur.keep = keep
save_lease(lease, cur, ttl_s)
schedule(sched, lock_of(lease), now_ms + ttl)
if value ~= '' then
  -- A new value is news to readers (an election's proclaim): an event in
  -- the history and the stream, with the lease's expiry as a grant's.
  ev = {stream = KEYS[7], cap = cfg.events_max, key = lock_of(lease), retention = retention, trace = trace}
  record(KEYS[5], cfg.history_max, 'proclaimed', now_s, cur.owner, cur.fence, ttl_s, cur.count, actor, '', cur.exp,
    cur.w, keep, cur.d, cur.s)
end
local n = push(renewals, cap, pack('renewed', now_s, cur.owner, cur.fence, ttl_s, cur.count, actor, '', nil, left, nil, nil))
if set then
  redis.call('PEXPIREAT', KEYS[5], keep)
end
if set or n == 1 then
  -- n == 1: the first renewal since the list lapsed gets the history's TTL.
  redis.call('PEXPIREAT', renewals, keep)
end
if cur.w == '1' then
  redis.call(cfg.publish, channel, 'renewed:' .. ttl)
end
return {'ok', cur.owner, cur.token, cur.fence, tonumber(cur.count), ttl, cur.acquired, ttl, now_ms}
