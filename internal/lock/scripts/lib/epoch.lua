-- epoch: the restart quarantine's marker, one per bucket.
--
-- The epoch marker of a bucket (a hash, no TTL: id, u2) says that Redis
-- still has the data it had; it disappears only with everything else (a
-- restart without persistence, a failover to an empty replica, a flush).
-- A lockd that saw it before and finds it gone, or finds another id, knows
-- leases may have been forgotten while their holders still work: no key
-- of the bucket is granted until every such lease has expired (u2). How
-- long that is each lockd knows before the loss: it reads the bucket's
-- latest expiry (epoch.lua, the script) every refresh and adds its own grants since,
-- so a lease released long ago never counts.
--
-- The marker also says which data layout writes the bucket (layout, this
-- one's is 2: leases as packed strings, histories as lists). lockd
-- before it kept its quarantine in "until", and honours nothing else: a
-- lockd of this layout keeps "until" a few seconds ahead (epoch.old_fence, on
-- every refresh), so that lockd of the layout before refuse grants (503
-- backend_recovering, /readyz 503) while any of this layout runs, and
-- serve again within seconds of a rollback. (Were one to grant anyway, it
-- fails on a lease of this layout, a string, rather than take it; and
-- this layout honours the leases it made, exclusive.read.)
epoch.layout = '2'

-- old_fence is how far ahead "until" is kept for lockd of the layout
-- before: twice the shortest quarantine (min_ms, two refreshes).
function epoch.old_fence(now, min_ms)
  return string.format('%d', now + 2 * min_ms)
end

-- check reads the marker and, for a lockd that saw another id
-- before (seen), starts or extends the quarantine: with the marker gone,
-- a new one (id new_id) whose u2 is now + max(live_ms, min_ms); with
-- another id (a lockd that noticed the loss first made it, maybe without
-- knowing what this one granted), u2 at least now + live_ms. live_ms is
-- how long what the caller knows of could still be live; min_ms gives
-- every other lockd one refresh to add what it knows. rest is
-- "live_ms min_ms new_id", read only then. It returns the id and u2 (a
-- number).
function epoch.check(marker, seen, rest, now)
  local ep = redis.call('HMGET', marker, 'id', 'u2')
  if ep[1] and (seen == '' or ep[1] == seen) then
    -- The common case: the marker this lockd saw. Nothing to convert.
    return ep[1], tonumber(ep[2]) or 0
  end
  local live_ms, min_ms, new_id = string.match(rest, '^(%d+) (%d+) (.*)$')
  live_ms, min_ms = tonumber(live_ms), tonumber(min_ms)
  local untl = tonumber(ep[2]) or 0
  if not ep[1] then
    if seen ~= '' then
      untl = now + math.max(live_ms, min_ms)
    end
    redis.call('HSET', marker, 'id', new_id, 'u2', string.format('%d', untl), 'layout', epoch.layout,
      'until', epoch.old_fence(now, min_ms))
    return new_id, untl
  end
  if seen ~= '' and ep[1] ~= seen and untl < now + live_ms then
    untl = now + live_ms
    redis.call('HSET', marker, 'u2', string.format('%d', untl))
  end
  return ep[1], untl
end

-- latest_of names a bucket's set of shared and semaphore keys by the
-- expiry of their last holder (multi.settle): the expiry schedule holds their
-- first, which is what the sweeper needs, and epoch.lua needs the last.
function epoch.latest_of(sched)
  return sched .. ':latest'
end
