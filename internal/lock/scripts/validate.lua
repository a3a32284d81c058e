-- validate: which leases of a lockd's ledger Redis still holds (restore.go,
-- validateLedger), so that a lease released, broken or replaced through
-- another lockd is not put back after a loss of data. Nothing is answered
-- when the marker is not the one the lockd saw: a loss must not read as
-- every lease gone.
--
-- KEYS[1] the bucket's epoch marker, then one lease key per lease
-- ARGV[1] the marker's id the lockd saw, then per lease: its mode ("x" an
--         exclusive lease, else a holder of a shared or semaphore key),
--         then its token
--
-- Reply: {"lost"} | {"ok", held…} with held 1 or 0 per lease, in order.
if redis.call('HGET', KEYS[1], 'id') ~= ARGV[1] then
  return {'lost'}
end
local out = {'ok'}
for i = 2, #KEYS do
  local mode, token = ARGV[2 * i - 2], ARGV[2 * i - 1]
  local held = 0
  if mode == 'x' then
    local v = redis.pcall('GETRANGE', KEYS[i], 0, #token)
    if type(v) == 'string' and v == token .. '\31' then
      held = 1
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
