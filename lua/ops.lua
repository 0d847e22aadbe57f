-- ops.lua: the parts of an op (scan, sale, refund) that exec.lua runs: idempotency records,
-- stock, the lines, the day counters and flow numbers. lua.go puts it between lib.lua and
-- exec.lua; it defines locals only and touches no key by itself.
--
-- What the ops of one call read most is read once per call and kept in the tables below
-- as the ops change it: the idempotency records (one MGET), the stock of every SKU the ops
-- name (one HMGET) and each date's flow counter (one GET). Each op sees the effects of the
-- ops before it, exactly as if they ran one by one; ops_flush writes stock, flow counters
-- and counter indexes back once at the end of the call (one HSET, one INCRBY per date, one
-- SADD per date). A Redis command called from Lua costs a few microseconds whatever it
-- does, and a sale used to make a dozen of them.

local idem = {}                  -- idempotency key → record, or false when there is none
local stock = {}                 -- sku → level (a SKU missing from the hash has 0)
local stock_changed, stock_order = {}, {}
local flows, flow_order = {}, {} -- flow key → { last = last number in Redis, n = numbers given }
local listed, list_order = {}, {} -- counter index key → { terminal → true, order }

-- ops_load reads the idempotency records of idem_keys and the stock of skus.
local function ops_load(stock_key, idem_keys, skus)
  for s = 1, #idem_keys, 1000 do -- unpack is bounded by Lua's C stack
    local recs = redis.call('MGET', unpack(idem_keys, s, math.min(s + 999, #idem_keys)))
    for j, rec in ipairs(recs) do
      idem[idem_keys[s + j - 1]] = rec
    end
  end
  for s = 1, #skus, 1000 do
    local v = redis.call('HMGET', stock_key, unpack(skus, s, math.min(s + 999, #skus)))
    for j = 1, math.min(1000, #skus - s + 1) do
      stock[skus[s + j - 1]] = tonumber(v[j]) or 0
    end
  end
end

-- Idempotency records: "<hash>|<status>|<flow>|<oversold>". Only accepted events are
-- recorded (status "a"); a live refusal leaves no record.
local function idem_check(key, hash)
  local rec = idem[key]
  if not rec then
    return nil
  end
  local h, _, flow, over = string.match(rec, '^([^|]*)|([^|]*)|([^|]*)|([^|]*)$')
  if h ~= hash then
    return reply({ status = 'conflict', code = 'idempotency_conflict', flow = tonumber(flow) or 0 })
  end
  return reply({ status = 'duplicate', flow = tonumber(flow) or 0, oversold = tonumber(over) or 0 })
end

local function idem_record(key, hash, flow, over, ttl_ms)
  local rec = hash .. '|a|' .. fmt(flow) .. '|' .. fmt(over)
  redis.call('SET', key, rec, 'PX', ttl_ms)
  idem[key] = rec
end

-- stock_short returns the reply fields of an out_of_stock refusal if there is less than qty
-- of sku in stock, or nil.
local function stock_short(sku, qty)
  local have = stock[sku]
  if have < qty then
    return { status = 'rejected', code = 'out_of_stock', sku = sku, left = have, asked = qty }
  end
  return nil
end

-- stock_add moves sku's stock by delta and returns the new level.
local function stock_add(sku, delta)
  local v = stock[sku] + delta
  stock[sku] = v
  if not stock_changed[sku] then
    stock_changed[sku] = true
    stock_order[#stock_order + 1] = sku
  end
  return v
end

-- flow_next gives out the next store flow number of the date whose counter is fkey.
local function flow_next(fkey)
  local f = flows[fkey]
  if not f then
    f = { last = tonumber(redis.call('GET', fkey)) or 0, n = 0 }
    flows[fkey] = f
    flow_order[#flow_order + 1] = fkey
  end
  f.n = f.n + 1
  return f.last + f.n
end

-- lines reads count pairs (sku, qty) from ARGV starting at i; it returns them and the index
-- after them.
local function lines(i)
  local n = tonumber(ARGV[i])
  i = i + 1
  local out = {}
  for j = 1, n do
    out[j] = { sku = ARGV[i], qty = tonumber(ARGV[i + 1]) }
    i = i + 2
  end
  return out, i
end

-- counts_add adds one event and its amounts to a terminal's day counters (HASH ckey) and
-- lists the terminal in the day's index (SET ikey, written by ops_flush). Amounts are fen
-- as decimal strings, straight from ARGV to HINCRBY. It reads count, total, then count
-- pairs (method, amount) from ARGV at i.
local function counts_add(ckey, ikey, terminal, nfield, afield, mprefix, i)
  redis.call('HINCRBY', ckey, nfield, 1)
  redis.call('HINCRBY', ckey, afield, ARGV[i])
  local n = tonumber(ARGV[i + 1])
  i = i + 2
  for _ = 1, n do
    redis.call('HINCRBY', ckey, mprefix .. ARGV[i], ARGV[i + 1])
    i = i + 2
  end
  local l = listed[ikey]
  if not l then
    l = { set = {}, order = {} }
    listed[ikey] = l
    list_order[#list_order + 1] = ikey
  end
  if not l.set[terminal] then
    l.set[terminal] = true
    l.order[#l.order + 1] = terminal
  end
  return i
end

-- ops_flush writes back what the call's ops changed: stock, flow counters, counter indexes.
local function ops_flush(stock_key)
  local args = {}
  for _, sku in ipairs(stock_order) do
    args[#args + 1] = sku
    args[#args + 1] = fmt(stock[sku])
  end
  for s = 1, #args, 1000 do
    redis.call('HSET', stock_key, unpack(args, s, math.min(s + 999, #args)))
  end
  for _, fkey in ipairs(flow_order) do
    redis.call('INCRBY', fkey, flows[fkey].n)
  end
  for _, ikey in ipairs(list_order) do
    local ts = listed[ikey].order
    for s = 1, #ts, 1000 do
      redis.call('SADD', ikey, unpack(ts, s, math.min(s + 999, #ts)))
    end
  end
end
