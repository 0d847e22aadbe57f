-- lib.lua: the limiter and reply helpers shared by allow.lua and exec.lua. lua.go
-- prepends this file to both; it only defines locals and touches no key by itself.
--
-- Numbers: Redis runs Lua 5.1, whose numbers are doubles. Every value here is an integer
-- far below 2^53 (microseconds since 1970 are ~1.8e15), so arithmetic on them is exact.
-- Money never passes through a Lua number: amounts go from ARGV to HINCRBY as strings.
-- Numbers sent back to Redis are formatted with fmt (%d), never with tostring, which
-- would print 1.7e+15.

local function fmt(x)
  return string.format('%d', x)
end

-- now_us returns the server's time in microseconds (Redis TIME, never the caller's clock).
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- load_limits reads the store's limits (HASH lkey, fields as store.Limits' JSON names)
-- and the promo coefficient (STRING pkey, integer percent; missing or expired = 100). d
-- holds the defaults {window_ms, store, terminal, action}. It returns the window in ms
-- and the three effective limits {store, terminal, action} = floor(limit * promo / 100).
local function load_limits(lkey, pkey, d, action)
  local v = redis.call('HMGET', lkey, 'window_ms', 'store', 'terminal', action)
  local win = tonumber(v[1]) or d[1]
  local promo = tonumber(redis.call('GET', pkey)) or 100
  local lim = {}
  for i = 1, 3 do
    local l = tonumber(v[i + 1]) or d[i + 1]
    lim[i] = math.floor(l * promo / 100)
  end
  return win, lim
end

-- rl_wait returns the refusing layer with the longest wait (1 store, 2 terminal, 3 action;
-- 0 when all three allow) and that wait in microseconds, for n more events against the
-- three sliding-window logs rk (ZSETs scored by microseconds) that hold counts[i] events
-- each, logged[i] of them in the ZSET already (exec.lua adds the rest, with time now, at
-- the end of its call). The wait is the time until enough of that layer's oldest entries
-- leave the window, in [1, window]; a whole window when those entries are not in the ZSET
-- yet, or when n alone exceeds the limit.
local function rl_wait(rk, lim, win, now, n, counts, logged)
  local worst, wait = 0, 0
  for i = 1, 3 do
    local over = counts[i] + n - lim[i]
    if over > 0 then
      local w = win
      if over <= logged[i] then
        local e = redis.call('ZRANGE', rk[i], over - 1, over - 1, 'WITHSCORES')
        w = tonumber(e[2]) + win - now
        if w > win then w = win end -- the clock went back
        if w < 1 then w = 1 end
      end
      if w > wait then worst, wait = i, w end
    end
  end
  return worst, wait
end

-- rl_check checks n more events against the three logs rk without recording anything. It
-- drops entries that left the window, and returns whether all layers allow, rl_wait's layer
-- and wait, and the counts.
local function rl_check(rk, lim, win_ms, now, n)
  local win = win_ms * 1000
  local counts = {}
  for i = 1, 3 do
    redis.call('ZREMRANGEBYSCORE', rk[i], '-inf', fmt(now - win))
    counts[i] = redis.call('ZCARD', rk[i])
  end
  local worst, wait = rl_wait(rk, lim, win, now, n, counts, counts)
  return worst == 0, worst, wait, counts
end

-- rl_record records n events in the three logs. Members are "<micros>-<seq>" with seq from
-- the store's counter seqkey, so they are unique even within one microsecond.
local function rl_record(rk, seqkey, win_ms, now, n)
  local last = redis.call('INCRBY', seqkey, n)
  redis.call('PEXPIRE', seqkey, win_ms)
  local score = fmt(now)
  for i = 1, 3 do
    local args = {}
    for j = 1, n do
      args[#args + 1] = score
      args[#args + 1] = score .. '-' .. fmt(last - n + j)
    end
    redis.call('ZADD', rk[i], unpack(args))
    redis.call('PEXPIRE', rk[i], win_ms)
  end
end

-- remaining returns the capacity left in each layer after recording n events.
local function remaining(lim, counts, n)
  local r = {}
  for i = 1, 3 do
    r[i] = math.max(0, lim[i] - counts[i] - n)
  end
  return r
end

-- The reply of an op (exec.lua) and of allow.lua, one array:
--   1 status  accepted | duplicate | conflict | rejected | rate_limited
--   2 code    "" | idempotency_conflict | out_of_stock | rate_limited
--   3 flow    store flow number (sale, refund; original one for a duplicate)
--   4 oversold 1 when an offline sale took a SKU below zero
--   5 wait    rate_limited: microseconds to wait
--   6 layer   rate_limited: refusing layer name
--   7..9      remaining capacity of the store, terminal and action windows (live)
--   10 limit  rate_limited: effective limit of the refusing layer; 11 window ms
--   12 sku, 13 left, 14 asked: out_of_stock details
local function reply(r)
  return {
    r.status, r.code or '', r.flow or 0, r.oversold or 0, r.wait or 0, r.layer or '',
    r.rem and r.rem[1] or 0, r.rem and r.rem[2] or 0, r.rem and r.rem[3] or 0,
    r.limit or 0, r.window or 0, r.sku or '', r.left or 0, r.asked or 0,
  }
end

local function limited(worst, wait, lim, counts, win_ms, action)
  local names = { 'store', 'terminal', action }
  return reply({ status = 'rate_limited', code = 'rate_limited', wait = wait, layer = names[worst],
    rem = remaining(lim, counts, 0), limit = lim[worst], window = win_ms })
end

