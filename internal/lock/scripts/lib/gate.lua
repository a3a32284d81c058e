-- gate: what an acquire passes after the holders let it in and before it
-- is granted, whichever the holding model: the FIFO queue, the restart
-- quarantine, the lapse and the lock-delay. Its refusals (held, behind,
-- and admit's) queue a waiting caller and flag that waiters may be queued.
--
-- What the gate reads it keeps on the call, for the grant after it:
-- c.last the history's newest event (nil: not read yet; false: none),
-- c.epoch_id and c.untl the marker's id and quarantine end (epoch.check),
-- c.walked whether the queue was read, c.q the queue (q.found: the caller
-- was in it), c.used the live holders of a multi key (0 otherwise).

-- last is the history's newest event, read once (false: none).
function gate.last(c)
  if c.last == nil then
    c.last = events.last(c.hist) or false
  end
  return c.last
end

-- flag says, on a free key or an exclusive one, that waiters may be
-- queued from now on: releases, renewals and the next grant look at the
-- queue only then (a lease's w, and the newest event's while the key is
-- free). Shared holders and permits always look.
function gate.flag(c)
  local cur = c.cur
  if cur and not cur.multi then
    if cur.w ~= '1' and not cur.old then
      cur.w = '1'
      exclusive.save(c.lease, cur, tonumber(cur.exp) - c.now_ms)
    end
  elseif not cur then
    local last = gate.last(c)
    if last and last.w ~= '1' then
      last.w = '1'
      redis.call('LSET', c.hist, -1, events.pack({last.type, last.at, last.owner, last.fence, last.ttl_ms, last.count,
        last.actor, last.reason, last.exp, last.left, last.w, last.keep, last.d, last.s, last.t,
        last.ls ~= '' and last.ls or nil}))
    end
  end
end

-- wait queues a waiting caller and flags the key; it returns the caller's
-- place ("" for a request that does not wait).
local function wait(c)
  local place = queue.join(c, c.q)
  if place ~= '' then
    gate.flag(c)
  end
  return place
end

-- reserve queues a lock set's waiter on a key it may be granted now
-- (gate.admit let it through): first in the queue, with the key flagged,
-- nobody else is granted the key while the set gathers its others, and
-- the set holds nothing (lockset.lua).
function gate.reserve(c)
  wait(c)
  queue.forget(c.q)
end

-- epoch_id is the marker's id: a lockd that only ever meets held keys
-- must know the epoch too, to notice a loss later.
local function epoch_id(c)
  return redis.call('HGET', c.epoch, 'id') or ''
end

-- held answers that the caller waits for the holder who, whose lease has
-- retry ms left: {"held", owner, retry_ms, epoch_id, place[, set mark]}.
-- set_fence is the holder's fence when it took the key in a lock set (nil
-- otherwise): the reply names the set's mark while the set gathers its
-- keys in other slots (set_mark, exclusive.lua).
function gate.held(c, who, retry, set_fence)
  local place = wait(c)
  queue.forget(c.q)
  if set_fence then
    -- A lock set's grant while the set gathers its other slots' keys:
    -- the record it names says whether the holder is one yet (lockset.go).
    local rec = redis.call('HGET', sibling(c.lease, 'setmark'), set_fence)
    if rec then
      return {'held', who, retry, epoch_id(c), place, rec}
    end
  end
  return {'held', who, retry, epoch_id(c), place}
end

-- min_hold answers that the key is kept, by nobody, until its hold window
-- ends retry ms from now (exclusive.lua's keep_window); who held it last:
-- {"min_hold", owner, retry_ms, epoch_id, place}. A waiter waits it out as
-- a holder's lease.
function gate.min_hold(c, who, retry)
  local place = wait(c)
  queue.forget(c.q)
  return {'min_hold', who, retry, epoch_id(c), place}
end

-- behind answers that the caller waits for the waiters queued before it,
-- the first of them e (live until retry ms from now; nil when the walk
-- met only dead entries up to its bound): {"queued", next owner,
-- retry_ms, epoch_id, place, waiters, next's since_ms}. How many wait is
-- the queue's length, without the caller.
function gate.behind(c, e, retry)
  local place = wait(c)
  queue.forget(c.q)
  local waiters = redis.call('ZCARD', c.q.queue)
  if place ~= '' then
    waiters = waiters - 1
  end
  if not e then
    return {'queued', '', 0, epoch_id(c), place, waiters, ''}
  end
  return {'queued', e.owner, retry, epoch_id(c), place, waiters, e.since}
end

-- delayed is how long a key is still held off by a lock-delay (0: not):
-- after a lease that named one ended by expiry, force-release or the
-- lapse of its session (its newest event, last, carries the delay),
-- nobody is granted the key until that much time has passed since. A
-- holder's own release, or its session's end, sets none.
local function delayed(last, now_ms)
  if not last or last.d == '' then
    return 0
  end
  if last.type ~= 'expired' and last.type ~= 'force_released' and
    not (last.type == 'released' and last.actor == 'session' and last.reason == events.session_lapsed) then
    return 0
  end
  return math.max(0, tonumber(last.at) + tonumber(last.d) - now_ms)
end

-- open says whether nothing but a lapse, the quarantine or a lock-delay
-- keeps a free exclusive key from c with no waiters flagged: the fast
-- path's test (exclusive.fast), which reads the marker.
function gate.open(c, last)
  local now = c.now_ms
  local id, untl = epoch.check(c.epoch, c.seen, c.epoch_args, now)
  c.epoch_id, c.untl = id, untl
  return (untl <= now or cfg.quarantine_off) and delayed(last, now) == 0
end

-- admit lets c through the gate: nil, or the refusal to answer. The queue
-- is FIFO: a request is granted only when no live waiter queued before it
-- would be blocked by it (queue.ahead); a waiter's first try queues it,
-- and its place stays while it waits.
function gate.admit(c)
  -- On a free key the queue is read only when waiters may be queued
  -- (flag): the newest event says so, or says that its lease lapsed.
  local last = c.cur == nil and gate.last(c)
  c.walked = c.cur ~= nil or not last or last.w == '1' or last.exp ~= ''
  if c.walked then
    local ok, e, retry = queue.ahead(c.q, c.mode, c.used, c.limit, c.waiter, c.now_ms)
    if not ok then
      return gate.behind(c, e, retry)
    end
  end
  if c.intent == 'peek' then
    queue.forget(c.q)
    return {'free'}
  end
  -- The restart quarantine after a loss of data (epoch.lua).
  if not c.epoch_id then
    c.epoch_id, c.untl = epoch.check(c.epoch, c.seen, c.epoch_args, c.now_ms)
  end
  if c.untl > c.now_ms and not cfg.quarantine_off then
    wait(c)
    return {'recovering', c.epoch_id, int(epoch.retry(c.epoch, c.untl, c.now_ms))}
  end
  -- An exclusive lease that lapsed unrecorded is recorded first.
  last = gate.last(c)
  if not c.cur and events.record_lapse(c, last) then
    c.last = events.last(c.hist)
  end
  local hold_off = delayed(c.last, c.now_ms)
  if hold_off > 0 then
    return {'delay', c.epoch_id, int(hold_off), wait(c)}
  end
  return nil
end
