-- ops.lua: the parts of an op (scan, sale, refund) that exec.lua runs: idempotency records,
-- the stock check, the lines and the day counters. lua.go puts it between lib.lua and
-- exec.lua; it defines locals only and touches no key by itself.

-- Idempotency records: "<hash>|<status>|<flow>|<oversold>". Only accepted events are
-- recorded (status "a"); a live refusal leaves no record.
local function idem_check(key, hash)
  local rec = redis.call('GET', key)
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
  redis.call('SET', key, hash .. '|a|' .. fmt(flow) .. '|' .. fmt(over), 'PX', ttl_ms)
end

-- stock_short returns the reply fields of an out_of_stock refusal if the stock hash holds
-- less than qty of sku, or nil. A SKU missing from the hash has 0: exec.lua checked the
-- projection marker first (proj.lua), so no field the rebuild wrote is missing.
local function stock_short(stock, sku, qty)
  local have = tonumber(redis.call('HGET', stock, sku)) or 0
  if have < qty then
    return { status = 'rejected', code = 'out_of_stock', sku = sku, left = have, asked = qty }
  end
  return nil
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
-- lists the terminal in the day's index (SET ikey). Amounts are fen as decimal strings,
-- straight from ARGV to HINCRBY. It reads count, total, then count pairs (method, amount)
-- from ARGV at i.
local function counts_add(ckey, ikey, terminal, nfield, afield, mprefix, i)
  redis.call('HINCRBY', ckey, nfield, 1)
  redis.call('HINCRBY', ckey, afield, ARGV[i])
  local n = tonumber(ARGV[i + 1])
  i = i + 2
  for _ = 1, n do
    redis.call('HINCRBY', ckey, mprefix .. ARGV[i], ARGV[i + 1])
    i = i + 2
  end
  redis.call('SADD', ikey, terminal)
  return i
end
