-- adjust.lua: a manager's stock adjustment, applied once per id (proj.lua comes first).
--   KEYS: 1 the adjustment's record, 2 stock, 3 projection marker.
--   ARGV: 1 sku, 2 delta, 3 record TTL ms, 4 the gate's projection epoch.
-- Reply {qty, applied}: applied is 1 when this call changed the stock, 0 when the id was
-- already applied with the same sku and delta, -1 when it was applied with others (a
-- conflict: nothing changes). qty is the SKU's stock after the call (0 if absent). A
-- projection Redis lost (proj.lua) answers "LOST <reason>" and changes nothing.
local why = proj_base(KEYS[3], ARGV[4], KEYS[2])
if why then
  return lost(why)
end
local rec = redis.call('GET', KEYS[1])
if rec then
  local delta, sku = string.match(rec, '^(-?%d+)|(.*)$')
  local qty = tonumber(redis.call('HGET', KEYS[2], ARGV[1])) or 0
  if sku ~= ARGV[1] or delta ~= ARGV[2] then
    return { qty, -1 }
  end
  return { qty, 0 }
end
local hlen0 = redis.call('HLEN', KEYS[2])
local qty = redis.call('HINCRBY', KEYS[2], ARGV[1], ARGV[2])
proj_settle(KEYS[3], KEYS[2], hlen0, {})
redis.call('SET', KEYS[1], ARGV[2] .. '|' .. ARGV[1], 'PX', ARGV[3])
return { qty, 1 }
