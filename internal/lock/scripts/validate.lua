-- validate: which leases of a lockd's ledger Redis still holds (restore.go,
-- validateLedger), so that a lease released, broken or replaced through
-- another lockd is not put back after a loss of data. Nothing is answered
-- when the marker is not the one the lockd saw: a loss must not read as
-- every lease gone.
--
-- KEYS[1] the bucket's epoch marker, then one lease key per lease
-- ARGV[1] the marker's id the lockd saw, then per lease: its mode ("x" an
--         exclusive lease, else a holder of a shared or semaphore key),
--         its token and its fence
--
-- Reply: {"lost"} | {"ok", held…} with, per lease in order, 1 (held), 0
-- (gone: released, broken, expired or replaced) or 2 (an exclusive lease
-- gone with no trace of its end in the key's history, nor of a later
-- lease: a write a failover to a replica that missed it lost).
if redis.call('HGET', KEYS[1], 'id') ~= ARGV[1] then
  return {'lost'}
end
local out = {'ok'}
for i = 2, #KEYS do
  local j = 3 * (i - 2) + 2
  local mode, token, fence = ARGV[j], ARGV[j + 1], tonumber(ARGV[j + 2]) or 0
  local held = 0
  if mode == 'x' then
    local v = redis.pcall('GETRANGE', KEYS[i], 0, #token)
    if type(v) == 'string' and v == token .. '\31' then
      held = 1
    elseif v == '' then
      -- Free: its history says whether the lease ended.
      local last = events.last(sibling(KEYS[i], 'history'))
      if not last or (tonumber(last.fence) < fence) or (tonumber(last.fence) == fence and last.type ~= 'released'
        and last.type ~= 'expired' and last.type ~= 'force_released') then
        held = 2
      end
    end
  else
    local t = redis.call('TYPE', KEYS[i])
    if type(t) == 'table' then
      t = t.ok
    end
    if t == 'hash' and redis.call('HEXISTS', KEYS[i], 'h:' .. token) == 1 then
      held = 1
    end
  end
  out[#out + 1] = held
end
return out
