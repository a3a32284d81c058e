-- acquire: take a free key, re-enter a grant, or queue behind others.
--
-- The call (c, below, the only place positions appear; protocol.go's
-- acquireCall has its fields in the same order):
--   lease, hist (history), queue, epoch (marker), sched (the bucket's
--   expiry schedule), stream (its event stream), qinfo (the queue's
--   entries), holders (shared or permits), replicas (the bucket's replica
--   liveness set): keys
--   token (new, the same on every try of one waiter), owner, ttl_ms,
--   actor, channel (wake), intent ("grant", or "peek": leave a free key
--   alone, Redlock's waiters queue in process), mode ("x" exclusive, "s"
--   shared, "p" a semaphore's permit), seen (the epoch id this lockd saw
--   last), replica (this lockd's id), epoch_args ("live_ms min_ms new_id",
--   epoch.check)
--   and, each "" when left off the end: trace (the request's trace id),
--   named ("1": the caller named its mode or a limit, which a re-entry or
--   replay must then match), reentry (token), idem (idempotency tag),
--   limit (mode "p"), waiter (queue id, "" for a request that does not
--   wait), deadline (ms from now), place (from an earlier try), delay (the
--   lock-delay in ms, gate.lua), value (JSON: none on a new grant, the
--   value kept on a re-entry), session (the handle of the session the
--   grant is bound to; ttl_ms is then the session's time left), hold (the
--   hold window in ms, min_hold_ms: a release before it ends keeps the
--   key taken until then, exclusive.lua's keep_window)
--
-- Reply, one of: {"new", fence, now_ms, epoch_id} (a fresh exclusive grant
-- of what was asked, exclusive.fast); the grant reply (grant_reply) with
-- "granted", "reentered" or "idempotent"; gate.held's, gate.behind's and
-- gate.admit's refusals ("held", "queued", "free", "recovering", "delay");
-- gate.min_hold's ("min_hold": released inside its hold window);
-- {"lost"} (the re-entry token is not the live one); {"in_set", n} (the
-- re-entry token is a lock set's of n keys: a set is held whole, never
-- one key of it); {"ended"} (a late try
-- of a waiter whose wait has ended: queue.ended); {"mismatch"} (the
-- idempotency tag is the live lease's, but owner, ttl, value, or a named
-- mode or limit is not); {"mode", mode} (a re-entry named another mode than the
-- lease's); {"limit"} (held with another limit); {"full", n}
-- (cfg.max_holders live holders).
local c = calls.acquire
-- What the fast path reads (exclusive.fast) ...
c.lease, c.hist, c.queue, c.epoch, c.sched, c.stream, c.qinfo = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6],
  KEYS[7]
c.token, c.owner, c.ttl_ms, c.actor = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
c.intent, c.mode, c.seen, c.epoch_args = ARGV[6], ARGV[7], ARGV[8], ARGV[10]
c.trace, c.reentry, c.idem, c.waiter = ARGV[11] or '', ARGV[13] or '', ARGV[14] or '', ARGV[16] or ''
c.delay, c.value, c.session, c.hold = ARGV[19] or '', ARGV[20] or '', ARGV[21] or '', ARGV[22] or ''
-- ... and learns (gate.lua), starting empty.
c.last, c.epoch_id, c.ended = nil, nil, nil
c.ttl, c.key, c.now_ms, c.now_us = tonumber(c.ttl_ms), lock_of(c.lease), clock()

-- The common case first, before the lease is read: SET NX GET. A waiter
-- whose wait has ended is not granted (queue.ended).
if c.mode == 'x' and c.reentry == '' and c.intent ~= 'peek' and (c.waiter == '' or not queue.ended(c)) then
  local r = exclusive.fast(c)
  if r then
    return r
  end
end
-- The rest of the call, read only past the fast path.
c.holders, c.replicas = KEYS[8], KEYS[9]
c.channel, c.replica, c.named, c.limit = ARGV[5], ARGV[9], ARGV[12] == '1', tonumber(ARGV[15]) or 0
c.deadline, c.place, c.used = ARGV[17], ARGV[18] or '', 0
c.q = queue.of(c)
c.cur = exclusive.read(c)
if c.cur and not c.cur.multi then
  return exclusive.acquire(c)
elseif c.cur then
  local r = multi.acquire(c)
  if r then
    return r
  end
end
-- Free, or shared holders let the caller in.
if c.reentry ~= '' then
  return {'lost'}
end
if c.waiter ~= '' and queue.ended(c) then
  return {'ended'}
end
local r = gate.admit(c)
if r then
  return r
end
local fence
if c.mode == 'x' then
  fence = exclusive.take(c)
  queue.leave(c)
else
  fence = multi.take(c)
  queue.leave(c)
  multi.wake(c)
end
queue.forget(c.q)
return grant_reply('granted', {owner = c.owner, token = c.token, fence = fence, count = 1, ttl = c.ttl,
  acquired = c.now_ms, pttl = c.ttl, mode = c.mode, limit = c.mode == 'p' and c.limit or 0}, c.now_ms, c.epoch_id)
