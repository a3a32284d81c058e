-- epoch: the restart quarantine's marker, one per bucket.
--
-- The epoch marker of a bucket (a hash, no TTL: id, u2) says that Redis
-- still has the data it had; it disappears only with everything else (a
-- restart without persistence, a failover to an empty replica, a flush).
-- A lockd that saw it before and finds it gone, or finds another id, knows
-- leases may have been forgotten while their holders still work: it puts
-- back every lease it granted or renewed that is still live (restore.lua),
-- and until every lockd has done so no key of the bucket is granted (u2,
-- below). Each lockd makes itself known in the marker at every refresh
-- ("r:<replica>": until when its leases may be live), so a lockd that died
-- with leases live keeps the keys nobody knows from being granted until
-- those leases would have ended.
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

-- check reads the marker for an acquire (gate.lua): its id and quarantine
-- end u2 (a number). A lockd that saw no marker yet (seen "") and finds
-- none makes one (new_id, no quarantine: a store nobody used). A lockd
-- that saw one and finds none knows Redis lost its data: it answers a
-- quarantine of min_ms with no id, and makes nothing, since the marker
-- after a loss is made by a refresh (epoch.lua, the script), which knows
-- the lockds whose leases must be put back first (epoch.start). rest is
-- "min_ms new_id", read only then.
function epoch.check(marker, seen, rest, now)
  local ep = redis.call('HMGET', marker, 'id', 'u2')
  if ep[1] then
    return ep[1], tonumber(ep[2]) or 0
  end
  local min_ms, new_id = string.match(rest, '^(%d+) (.*)$')
  if seen ~= '' then
    return '', now + tonumber(min_ms)
  end
  redis.call('HSET', marker, 'id', new_id, 'u2', '0', 'layout', epoch.layout, 'until', epoch.old_fence(now, tonumber(min_ms)))
  return new_id, 0
end

-- After a loss, the new marker lists as pending ("p:<replica>" → until
-- when its leases may be live, ms) every lockd that had leases live
-- ("r:<replica>", kept by each lockd's refresh, read by the others): the
-- quarantine (u2) lasts until each has put its leases back and said so
-- (epoch.restored), or their time has passed, and at least until f, the
-- shortest quarantine (min_ms: every lockd notices within a refresh).
-- Keys a lockd puts back are held again: only keys nobody knows wait.
-- u2 never grows after the marker is made, so a Retry-After holds.

-- settle sets u2 from f and the pending lockds still live, dropping the
-- others; it returns u2.
function epoch.settle(marker, now)
  local h = redis.call('HGETALL', marker)
  local untl = 0
  for i = 1, #h, 2 do
    local f, v = h[i], tonumber(h[i + 1]) or 0
    if f == 'f' then
      untl = math.max(untl, v)
    elseif string.sub(f, 1, 2) == 'p:' then
      if v <= now then
        redis.call('HDEL', marker, f)
      else
        untl = math.max(untl, v)
      end
    end
  end
  redis.call('HSET', marker, 'u2', string.format('%d', untl))
  return untl
end

-- start makes the marker after a loss: id, f = now + min_ms, and as
-- pending each lockd of known ("replica=ms_left …": what the last refresh
-- read of the marker before, and the caller itself) with leases left.
function epoch.start(marker, id, known, min_ms, now)
  redis.call('HSET', marker, 'id', id, 'f', string.format('%d', now + min_ms), 'layout', epoch.layout,
    'until', epoch.old_fence(now, min_ms))
  for rid, left in string.gmatch(known, '([^=%s]+)=(%d+)') do
    if tonumber(left) > 0 then
      redis.call('HSET', marker, 'p:' .. rid, string.format('%d', now + tonumber(left)))
    end
  end
  return epoch.settle(marker, now)
end

-- retry is when to try again during a quarantine that ends at untl, ms
-- from now: until f, when every lockd that lives has put its leases back
-- and the quarantine ends unless one died, f; after it, untl.
function epoch.retry(marker, untl, now)
  local f = tonumber(redis.call('HGET', marker, 'f') or '0') or 0
  if f > now then
    return math.min(f, untl) - now
  end
  return untl - now
end

-- restored says that lockd rid has put its leases back: it is no longer
-- pending, and the quarantine may end sooner.
function epoch.restored(marker, rid, now)
  if redis.call('HDEL', marker, 'p:' .. rid) == 1 then
    return epoch.settle(marker, now)
  end
  return tonumber(redis.call('HGET', marker, 'u2') or '0') or 0
end

-- latest_of names a bucket's set of shared and semaphore keys by the
-- expiry of their last holder (multi.settle): the expiry schedule holds their
-- first, which is what the sweeper needs, and epoch.lua needs the last.
function epoch.latest_of(sched)
  return sched .. ':latest'
end
