-- sweep: record the lapses that are due in some buckets, each exactly once,
-- and (Cluster) read the events waiting in their outboxes. See expiry.go.
--
-- No KEYS: the buckets are named by ARGV. On a Cluster they are slots of
-- the node this runs on, and the script runs with allow-cross-slot-keys
-- (Go prepends the flag): every key it touches lives on this node.
-- ARGV[1] sweeper id   ARGV[2] sweeper lease ms
-- ARGV[3] batch: most lapses per bucket per call
-- ARGV[4] relay: most outbox events to return, 0 when the scripts write the
--         shared event stream directly (one server, Sentinel)
-- ARGV[5] mode: "all" sweeps every bucket listed; "due" (Cluster) only the
--         buckets the due list says are due
-- ARGV[6] n, then n pairs (bucket, ms): buckets to put on the due list
--         (Cluster: written since the last sweep)
-- ARGV[7+2n] the home bucket: its "sweeper" key is the sweeper lease and,
--         on a Cluster, its "due" key the due list; then (mode "all") the
--         other buckets
--
-- The due list (Cluster) is a sorted set of this node's buckets by the
-- earliest moment one may need a sweep: its earliest expiry, or "now" when
-- its outbox got events. A sweep visits only the due buckets and sets each
-- one's next moment, so that its cost follows the lapses and events, not
-- the 16384 slots or the live leases.
--
-- The sweeper lease keeps replicas from repeating each other's work: only
-- the lockd that holds it sweeps. Recording a lapse is safe anyway in any
-- number of concurrent sweeps (record_lapse is idempotent).
--
-- Reply: {"busy"} when another lockd holds the lease, else
--   {"ok", more, lapses, outbox, now_ms}
--   more:   1 when a bucket had more due than one call takes
--   lapses: {key, lapsed_at_ms, last_type, last_at_ms, …} flat
--   outbox: {bucket, {id, {field, value, …}}, …} flat
local id, leasems, batch = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local relay = tonumber(ARGV[4])
local mode, n = ARGV[5], tonumber(ARGV[6])
local home = 7 + 2 * n
local now = clock()

local due, relaying = nil, relay > 0
if relaying then
  due = ARGV[home] .. 'due'
  for i = 7, home - 1, 2 do
    redis.call('ZADD', due, 'LT', ARGV[i + 1], ARGV[i])
  end
end

local buckets = {}
if mode == 'all' then
  for i = home, #ARGV do
    buckets[#buckets + 1] = ARGV[i]
  end
else
  buckets = redis.call('ZRANGEBYSCORE', due, '-inf', now, 'LIMIT', 0, 1000)
end

-- The lease is taken only once there is work: an idle sweep (the usual
-- case) writes nothing.
local lock, mine = ARGV[home] .. 'sweeper', false
local function claim()
  if mine then
    return true
  end
  local holder = redis.call('GET', lock)
  if holder and holder ~= id then
    return false
  end
  redis.call('SET', lock, id, 'PX', leasems)
  mine = true
  return true
end

local more, lapses, outbox = 0, {}, {}

-- lapse_multi records the lapses of c's shared holders or permits, each
-- of which lapses on its own.
local function lapse_multi(c)
  local gone = multi.prune(c)
  multi.settle(c)
  if #gone == multi.prune_max then
    -- More lapsed together than one call records: come back now.
    more = 1
  end
  if gone[1] then
    redis.call(cfg.publish, key_of(c.key, 'wake'), 'expired')
  end
  for _, h in ipairs(gone) do
    lapses[#lapses + 1] = c.key
    lapses[#lapses + 1] = h.e
    lapses[#lapses + 1] = 'acquired'
    lapses[#lapses + 1] = h.a
  end
end

-- lapse_key records the lapse of key, due on bucket b's schedule.
local function lapse_key(b, key)
  local c = {lease = key_of(key, 'lease'), hist = key_of(key, 'history'), holders = key_of(key, 'holders'),
    sched = b .. 'expiries', stream = b .. 'events', key = key, now_ms = now}
  local pttl = redis.call('PTTL', c.lease)
  -- An exclusive lease is a string (exclusive.lua): HEXISTS answers it an error.
  if pttl > 0 and redis.pcall('HEXISTS', c.lease, 'mode') == 1 then
    lapse_multi(c)
  elseif pttl == -2 then
    local r = events.record_lapse(c, events.last(c.hist))
    redis.call('ZREM', c.sched, key)
    if r then
      -- Waiters wake now rather than at their PTTL timer.
      redis.call(cfg.publish, key_of(key, 'wake'), 'expired')
      lapses[#lapses + 1] = key
      lapses[#lapses + 1] = r[1]
      lapses[#lapses + 1] = r[2]
      lapses[#lapses + 1] = r[3]
    end
  elseif pttl == -1 then
    redis.call('ZREM', c.sched, key)
  else
    -- Still live: renewed through a lockd that did not schedule it.
    events.schedule(c.sched, key, now + pttl)
  end
end

-- take_outbox takes b's outbox events, as many as the call may still
-- relay; it answers false when another lockd holds the lease, and true
-- when events are left for the next call.
local function take_outbox(b)
  local es = redis.call('XRANGE', b .. 'events', '-', '+', 'COUNT', relay)
  if not es[1] then
    return true, false
  end
  if not claim() then
    return false
  end
  for _, e in ipairs(es) do
    outbox[#outbox + 1] = b
    outbox[#outbox + 1] = e
  end
  relay = relay - #es
  if relay <= 0 then
    more, relay = 1, -1
    return true, true
  end
  return true, false
end

-- sweep_bucket records b's due lapses and takes its outbox's events; it
-- answers false when another lockd holds the lease.
local function sweep_bucket(b)
  local sched = b .. 'expiries'
  local lapsing = redis.call('ZRANGEBYSCORE', sched, '-inf', now, 'LIMIT', 0, batch)
  if lapsing[1] then
    if not claim() then
      return false
    end
    if #lapsing == batch then
      more = 1
    end
    for _, key in ipairs(lapsing) do
      lapse_key(b, key)
    end
  end
  -- Once the call took all the outbox events it may, later buckets keep
  -- theirs for the next call.
  local left = relaying and relay <= 0
  if relay > 0 then
    local ok, full = take_outbox(b)
    if not ok then
      return false
    end
    left = left or full
  end
  if due then
    -- When b needs its next sweep: now if events are left, else at its
    -- earliest expiry; never if it has neither.
    local first = redis.call('ZRANGE', sched, 0, 0, 'WITHSCORES')
    if left or #lapsing == batch then
      redis.call('ZADD', due, now, b)
    elseif first[2] then
      redis.call('ZADD', due, first[2], b)
    else
      redis.call('ZREM', due, b)
    end
  end
  return true
end

for _, b in ipairs(buckets) do
  -- A slot that moved away fails its own keys only; the lockd that sweeps
  -- its new master records its lapses.
  local ok, res = pcall(sweep_bucket, b)
  if ok and not res then
    return {'busy'}
  end
  if not ok and due then
    redis.call('ZREM', due, b)
  end
end
return {'ok', more, lapses, outbox, int(now)}
