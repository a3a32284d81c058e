-- lockset: take the keys of a lock set that share one slot (every key, on
-- one server or Sentinel), all or nothing (exclusive.set_try).
--
-- The call (c, below): epoch (marker), sched, stream, replicas: the
--   bucket's keys; then, for each key in the set's order (sorted, the same
--   for every set: lockset.go), its lease, hist, queue, qinfo, holders
--   token (the set's, the same on every key and every try), owner, ttl_ms,
--   actor, intent ("grant": take every key if all are free to the set now;
--   "reserve": only queue the set first on each, for a set with keys in
--   other slots too), seen, replica, epoch_args (as acquire's), waiter (the
--   set's queue id, "" for a set that does not wait), deadline (ms from
--   now), set (the set's size), mode ("x" exclusive or "s" shared), and,
--   each "" when left off the end: trace, value, session (the handle of
--   the session every key is bound to, lockset_session.go; ttl_ms is then
--   the session's time left), rec and rec_ms (a set with keys in several
--   slots: the id of its record and how long its grants' marks live,
--   exclusive.lua's set_mark)
--
-- Reply: {"granted", now_ms, epoch_id, fence, …} a fence per key, in
-- order; {"reserved", now_ms, epoch_id}; or {"refused", i, refusal…}: the
-- i-th key's refusal as acquire.lua answers it (held, queued, recovering,
-- delay, ended).
local c = calls.lockset
c.epoch, c.sched, c.stream, c.replicas = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
c.token, c.owner, c.ttl_ms, c.actor, c.intent = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
c.seen, c.replica, c.epoch_args, c.waiter, c.deadline = ARGV[6], ARGV[7], ARGV[8], ARGV[9], ARGV[10]
c.set, c.mode, c.trace, c.value, c.session = ARGV[11], ARGV[12], ARGV[13] or '', ARGV[14] or '', ARGV[15] or ''
c.rec, c.rec_ms = ARGV[16] or '', ARGV[17] or ''
-- What a lone acquire may ask and a set does not.
c.named, c.reentry, c.idem, c.limit, c.place, c.delay, c.hold = false, '', '', 0, '', '', ''
c.keys, c.ttl, c.epoch_id, c.untl = KEYS, tonumber(c.ttl_ms), nil, nil
c.now_ms, c.now_us = clock()
return exclusive.set_try(c, (#KEYS - 4) / 5)
