-- proj.lua: the projection marker, checked before a script reads or writes projection state
-- (exec.lua, adjust.lua; lua.go prepends it). It defines locals only.
--
-- Absence is never zero. Redis may drop keys while it stays up (an allkeys-* eviction, an
-- operator's DEL or FLUSHALL, a restart without persistence), and a dropped stock field or
-- counter hash read as 0 refused in-stock sales and counted from zero. The marker, written
-- by rebuild.lua with the projection, says what must be there:
--
--   pg:{S}:projection  HASH  epoch             the rebuild epoch (the gate sends its own)
--                            skus              fields the stock hash holds
--                            <counter index>   terminals the date's counter index holds
--                            <flow key>        "1": the date's flow counter exists
--
-- A call whose marker is missing, names another epoch, or disagrees with what is there
-- answers an error "LOST <reason>" before any write, and the store rebuilds from the ledger.
-- The counters of a date the marker does not track (outside the rebuild's window: older than
-- its week, or a day it had not reached) are not checked; a call that gives such a date its
-- first counters starts tracking it. Scripts keep the marker exact as they add stock fields,
-- terminals to an index and flow counters.

local function lost(why)
  return redis.error_reply('LOST ' .. why)
end

-- proj_base checks the marker and the stock hash; it returns a reason or nil.
local function proj_base(marker, epoch, stock)
  local m = redis.call('HMGET', marker, 'epoch', 'skus')
  if not m[1] then
    return 'marker_missing'
  end
  if m[1] ~= epoch then
    return 'epoch_mismatch'
  end
  if redis.call('HLEN', stock) ~= tonumber(m[2]) then
    return 'stock_missing'
  end
  return nil
end

-- proj_date checks a business date's counter index and flow counter against the marker; it
-- returns a reason or nil, and the state to settle with (n: the tracked index count, or
-- false; n0: the index's count now).
local function proj_date(marker, index, flow)
  local m = redis.call('HMGET', marker, index, flow)
  local n0 = redis.call('SCARD', index)
  if m[1] and n0 ~= tonumber(m[1]) then
    return 'counters_missing'
  end
  if m[2] and redis.call('EXISTS', flow) == 0 then
    return 'flow_missing'
  end
  return nil, { index = index, flow = flow, n = m[1] and tonumber(m[1]), n0 = n0, f = m[2] ~= false }
end

-- proj_counters checks that a terminal a tracked date's index lists still has its counter
-- hash, and that one it does not list has none.
local function proj_counters(index, ckey, terminal)
  if (redis.call('SISMEMBER', index, terminal) == 1) ~= (redis.call('EXISTS', ckey) == 1) then
    return 'counters_missing'
  end
  return nil
end

-- proj_settle brings the marker up to date after the call's writes: the stock hash's fields
-- (hlen0 before them) and, per date checked, its index count and flow counter.
local function proj_settle(marker, stock, hlen0, dates)
  local h = redis.call('HLEN', stock)
  if h ~= hlen0 then
    redis.call('HSET', marker, 'skus', string.format('%d', h))
  end
  for _, d in ipairs(dates) do
    local n = redis.call('SCARD', d.index)
    if (d.n and n ~= d.n) or (not d.n and d.n0 == 0 and n > 0) then
      redis.call('HSET', marker, d.index, string.format('%d', n))
    end
    if not d.f and redis.call('EXISTS', d.flow) == 1 then
      redis.call('HSET', marker, d.flow, '1')
    end
  end
end
