-- ops.lua: what scan.lua, sale.lua and refund.lua share: the key and argument layout,
-- idempotency records, the order guard of pipelined execs, and run, which wraps an op.
-- lua.go puts it between lib.lua and the op's own file; it defines locals only.

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

-- The order guard of a pipelined Exec of several ops. Op pos (0-based) runs only if the
-- guard key holds pos-1, i.e. the op before it in the same Exec ran; it then stores pos
-- (the last op deletes the key). So if one op of a pipeline fails (NOSCRIPT after a
-- failover, say), the ops after it refuse with ORDER instead of running out of order, and
-- the client re-sends them in order from the failed one.
local function guard_enter(gkey, pos)
  if gkey and pos > 0 and redis.call('GET', gkey) ~= fmt(pos - 1) then
    return redis.error_reply('ORDER op ' .. fmt(pos) .. ' of a pipelined exec: op ' .. fmt(pos - 1) .. ' did not run')
  end
  return nil
end

local function guard_leave(gkey, pos, last)
  if not gkey then
    return
  end
  if last then
    redis.call('DEL', gkey)
  else
    redis.call('SET', gkey, fmt(pos), 'PX', 60000)
  end
end

-- The layout shared by scan.lua, sale.lua and refund.lua.
--   KEYS: 1 idempotency, 2 stock, 3 rl store, 4 rl terminal, 5 rl action, 6 rl seq,
--         7 limits, 8 promo; sale and refund: 9 counters, 10 counter index, 11 flow;
--         last, only in a pipelined Exec of several ops: the order guard.
--   ARGV: 1 hash, 2 live (1|0), 3 idempotency TTL ms, 4 default window ms, 5..7 default
--         store, terminal and action limits, 8 action name, 9 guard position, 10 last op
--         (1|0), then the op's own arguments from 11.
local H = {
  hash = ARGV[1],
  live = ARGV[2] == '1',
  ttl = ARGV[3],
  defaults = { tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7]) },
  action = ARGV[8],
  pos = tonumber(ARGV[9]),
  last = ARGV[10] == '1',
  rk = { KEYS[3], KEYS[4], KEYS[5] },
}

-- run wraps an op: the order guard around it, then idempotency, then the live limiter
-- check. body(now, win_ms, lim, counts) does the op's own work and returns the reply
-- fields and whether to record the op in the limiter.
local function run(nkeys, body)
  local gkey = nil
  if #KEYS > nkeys then
    gkey = KEYS[#KEYS]
  end
  local err = guard_enter(gkey, H.pos)
  if err then
    return err
  end
  local out = idem_check(KEYS[1], H.hash)
  if not out then
    local now, win_ms, lim, counts = 0, 0, nil, nil
    if H.live then
      win_ms, lim = load_limits(KEYS[7], KEYS[8], H.defaults, H.action)
      now = now_us()
      local ok, worst, wait
      ok, worst, wait, counts = rl_check(H.rk, lim, win_ms, now, 1)
      if not ok then
        out = limited(worst, wait, lim, counts, win_ms, H.action)
      end
    end
    if not out then
      local r = body()
      if r.status == 'accepted' then
        idem_record(KEYS[1], H.hash, r.flow or 0, r.oversold or 0, H.ttl)
        if H.live then
          rl_record(H.rk, KEYS[6], win_ms, now, 1)
          r.rem = remaining(lim, counts, 1)
        end
      elseif H.live then
        r.rem = remaining(lim, counts, 0)
      end
      out = reply(r)
    end
  end
  guard_leave(gkey, H.pos, H.last)
  return out
end

-- stock_short returns the reply fields of an out_of_stock refusal if the stock hash holds
-- less than qty of sku (a SKU missing from the hash has 0), or nil.
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
