-- rebuild.lua: sets the store's projection from the ledger's snapshot, atomically.
-- Stock is set exactly (SKUs not in the snapshot are deleted). For every business date
-- with counters in the snapshot, each terminal's counters are set exactly and the counters
-- of terminals not in the snapshot are deleted. Each flow counter is raised to the
-- ledger's highest flow number of its date and never lowered, so flow numbers never repeat.
--
-- It writes the projection marker (proj.lua) last: a new epoch above the last one and above
-- Redis TIME in milliseconds (so that it rises even after the marker itself was lost), the
-- stock hash's field count, the index count of each date with counters in the snapshot, and
-- each date's flow counter. Terminals whose
-- counters are all zero get no counter hash and no index entry. Reply: the new epoch.
--
-- KEYS: 1 stock, 2 projection marker; then per date: flow, counter index, then the counter
--   keys of the snapshot's terminals followed by those of the extra terminals.
-- ARGV: stock pair count, (sku, qty) pairs; date count; per date: highest flow number,
--   counters present (1|0), snapshot terminal count, extra terminal count, then per
--   snapshot terminal: its id, field count, (field, value) pairs; then the extra
--   terminals' ids. Extra terminals are those the caller found in the counter index; if
--   the index now lists a terminal in neither list, nothing is changed and the script
--   fails with STALE so that the caller reads the index again.
local a, k = 1, 3

local function arg()
  local v = ARGV[a]
  a = a + 1
  return v
end

local function key()
  local v = KEYS[k]
  k = k + 1
  return v
end

local function hset_pairs(hkey, pairs)
  for i = 1, #pairs, 200 do
    redis.call('HSET', hkey, unpack(pairs, i, math.min(i + 199, #pairs)))
  end
end

-- Read everything first and check the indexes, so that a STALE answer changes nothing.
local stock = {}
for _ = 1, tonumber(arg()) * 2 do
  stock[#stock + 1] = arg()
end
local dates = {}
for _ = 1, tonumber(arg()) do
  local d = { flow = key(), index = key(), maxflow = tonumber(arg()), has = arg() == '1', snap = {}, extra = {} }
  local nsnap, nextra = tonumber(arg()), tonumber(arg())
  local known = {}
  for i = 1, nsnap do
    local t = { id = arg(), key = key(), fields = {} }
    for _ = 1, tonumber(arg()) * 2 do
      t.fields[#t.fields + 1] = arg()
    end
    d.snap[i] = t
    known[t.id] = true
  end
  for i = 1, nextra do
    local t = { id = arg(), key = key() }
    d.extra[i] = t
    known[t.id] = true
  end
  if d.has then
    for _, m in ipairs(redis.call('SMEMBERS', d.index)) do
      if not known[m] then
        return redis.error_reply('STALE counter index ' .. d.index .. ' lists ' .. m)
      end
    end
  end
  dates[#dates + 1] = d
end

local marker = KEYS[2]
local last = tonumber(redis.call('HGET', marker, 'epoch')) or 0
local t = redis.call('TIME')
local epoch = math.max(last + 1, tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
local mark = { 'epoch', string.format('%d', epoch), 'skus', string.format('%d', #stock / 2) }

redis.call('DEL', KEYS[1])
hset_pairs(KEYS[1], stock)
for _, d in ipairs(dates) do
  if d.has then
    redis.call('DEL', d.index)
    for _, t in ipairs(d.extra) do
      redis.call('DEL', t.key)
    end
    for _, t in ipairs(d.snap) do
      redis.call('DEL', t.key)
      if #t.fields > 0 then
        hset_pairs(t.key, t.fields)
        redis.call('SADD', d.index, t.id)
      end
    end
  end
  -- Only the dates whose counters the snapshot holds are tracked: the others' counters
  -- (older than the snapshot's window) are left as they are, not checked, not exact.
  if d.has then
    mark[#mark + 1] = d.index
    mark[#mark + 1] = string.format('%d', redis.call('SCARD', d.index))
  end
  local cur = tonumber(redis.call('GET', d.flow)) or 0
  if d.maxflow > cur then
    redis.call('SET', d.flow, string.format('%d', d.maxflow))
  end
  if redis.call('EXISTS', d.flow) == 1 then
    mark[#mark + 1] = d.flow
    mark[#mark + 1] = '1'
  end
end
redis.call('DEL', marker)
hset_pairs(marker, mark)
return epoch
