-- exec.lua: a group of ops (scans, sales, refunds) decided in order in one atomic call
-- (lib.lua and ops.lua come first). Each op sees the effects of the ops before it, exactly
-- as if they ran one by one; what the ops share is read once per call: the limits, the
-- promo coefficient, the time (one Redis TIME for the whole call) and, per sliding-window
-- log, the entries that left the window and the count. Accepted live ops are added to the
-- logs at the end, one ZADD per log.
--
-- Per op: idempotency first (duplicate or conflict: its original result). Live: the three
-- limiter layers (store, terminal, the op's action), all or nothing; then
--   scan    the SKU must be in stock (nothing is decremented);
--   sale    live: every SKU must be in stock, and all lines are decremented or none;
--           offline: decremented even below zero, and the sale is flagged oversold;
--           the terminal's day counters (sales +1, amount, m:<method>), the next store
--           flow number of the business date;
--   refund  the counters (refunds +1, refund_amount, rm:<method>), the lines back in stock
--           if asked, the next flow number.
-- An accepted op leaves an idempotency record; a live refusal leaves nothing.
--
-- Before anything, the projection marker (proj.lua) is checked for the call's stock, dates and
-- counters; a projection Redis lost answers "LOST <reason>" and changes nothing.
--
--   KEYS: 1 stock, 2 rl store, 3 rl seq, 4 limits, 5 promo, 6 projection marker; then each
--         op's keys from its key base b: b idempotency, b+1 rl terminal, b+2 rl action; sale
--         and refund also b+3 counters, b+4 counter index, b+5 flow.
--   ARGV: 1 idempotency TTL ms, 2 default window ms, 3..7 default store, terminal, scan, pay
--         and refund limits, 8 op count, 9 the gate's projection epoch; then each op: kind
--         (scan|sale|refund), key base, hash, live (1|0), and
--           scan    sku, qty
--           sale    terminal, line count, (sku, qty) pairs with each SKU once, total fen,
--                   method count, (method, fen) pairs
--           refund  terminal, restock (1|0), then as a sale (the amount for the total).
-- Reply: one reply array (lib.lua) per op, in order.

local ttl = ARGV[1]
local defaults = { window_ms = tonumber(ARGV[2]), store = tonumber(ARGV[3]), terminal = tonumber(ARGV[4]),
  scan = tonumber(ARGV[5]), pay = tonumber(ARGV[6]), refund = tonumber(ARGV[7]) }
local STOCK, RL_STORE, RL_SEQ, LIMITS, PROMO, MARKER = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local ACTION = { scan = 'scan', sale = 'pay', refund = 'refund' }

-- The effective limits (limit * promo / 100), the window and the time, read when the first
-- live op needs them.
local win_ms, lim, now
local function load()
  if now then
    return
  end
  local v = redis.call('HMGET', LIMITS, 'window_ms', 'store', 'terminal', 'scan', 'pay', 'refund')
  win_ms = tonumber(v[1]) or defaults.window_ms
  local promo = tonumber(redis.call('GET', PROMO)) or 100
  lim = {}
  for j, name in ipairs({ 'store', 'terminal', 'scan', 'pay', 'refund' }) do
    lim[name] = math.floor((tonumber(v[j + 1]) or defaults[name]) * promo / 100)
  end
  now = now_us()
end

-- The sliding-window logs this call touches: entries in the log after dropping those that
-- left the window (n), and the accepted ops to add (added: their numbers in this call).
local logs, log_order, accepted = {}, {}, 0
local function window(key)
  local w = logs[key]
  if not w then
    redis.call('ZREMRANGEBYSCORE', key, '-inf', fmt(now - win_ms * 1000))
    w = { n = redis.call('ZCARD', key), added = {} }
    logs[key] = w
    log_order[#log_order + 1] = key
  end
  return w
end

-- check is rl_check (lib.lua) for one event, counting this call's accepted ops: an entry
-- still to be added has this call's time, so it leaves the window a whole window from now.
local function check(rk, lims)
  local win = win_ms * 1000
  local counts, logged = {}, {}
  for j = 1, 3 do
    local w = window(rk[j])
    logged[j] = w.n
    counts[j] = w.n + #w.added
  end
  local worst, wait = rl_wait(rk, lims, win, now, 1, counts, logged)
  return worst == 0, worst, wait, counts
end

local function record(rk)
  accepted = accepted + 1
  for j = 1, 3 do
    local added = logs[rk[j]].added
    added[#added + 1] = accepted
  end
end

-- flush adds the accepted ops to the logs, members "<micros>-<seq>" with seq from the
-- store's counter, so that they are unique even within one microsecond.
local function flush()
  if accepted == 0 then
    return
  end
  local first = redis.call('INCRBY', RL_SEQ, accepted) - accepted
  redis.call('PEXPIRE', RL_SEQ, win_ms)
  local score = fmt(now)
  for _, key in ipairs(log_order) do
    local added = logs[key].added
    if #added > 0 then
      local args = {}
      for _, k in ipairs(added) do
        args[#args + 1] = score
        args[#args + 1] = score .. '-' .. fmt(first + k)
      end
      for s = 1, #args, 1000 do -- unpack is bounded by Lua's C stack
        redis.call('ZADD', key, unpack(args, s, math.min(s + 999, #args)))
      end
      redis.call('PEXPIRE', key, win_ms)
    end
  end
end

-- sale applies a sale whose lines are ls and whose total is at ARGV[ti].
local function sale(b, live, terminal, ls, ti)
  if live then
    for _, l in ipairs(ls) do
      local short = stock_short(STOCK, l.sku, l.qty)
      if short then
        return short
      end
    end
  end
  local over = 0
  for _, l in ipairs(ls) do
    if redis.call('HINCRBY', STOCK, l.sku, fmt(-l.qty)) < 0 then
      over = 1
    end
  end
  counts_add(KEYS[b + 3], KEYS[b + 4], terminal, 'sales', 'amount', 'm:', ti)
  return { status = 'accepted', flow = redis.call('INCR', KEYS[b + 5]), oversold = over }
end

local function refund(b, terminal, restock, ls, ti)
  if restock then
    for _, l in ipairs(ls) do
      redis.call('HINCRBY', STOCK, l.sku, fmt(l.qty))
    end
  end
  counts_add(KEYS[b + 3], KEYS[b + 4], terminal, 'refunds', 'refund_amount', 'rm:', ti)
  return { status = 'accepted', flow = redis.call('INCR', KEYS[b + 5]) }
end

-- parse reads every op from ARGV first, so that the projection is checked before any write.
local function parse()
  local ops = {}
  local i = 10
  for o = 1, tonumber(ARGV[8]) do
    local op = { kind = ARGV[i], b = tonumber(ARGV[i + 1]), hash = ARGV[i + 2], live = ARGV[i + 3] == '1' }
    i = i + 4
    if op.kind == 'scan' then
      op.sku, op.qty = ARGV[i], tonumber(ARGV[i + 1])
      i = i + 2
    else
      op.terminal = ARGV[i]
      i = i + 1
      if op.kind == 'refund' then
        op.restock = ARGV[i] == '1'
        i = i + 1
      end
      op.ls, i = lines(i)
      op.ti = i
      i = i + 2 + 2 * tonumber(ARGV[i + 1]) -- total, method count, (method, fen) pairs
    end
    ops[o] = op
  end
  return ops
end

-- check_projection checks the marker for every date and terminal counter of the call; it
-- returns a reason, or nil with the stock's field count and the dates to settle.
local function check_projection(ops)
  local why = proj_base(MARKER, ARGV[9], STOCK)
  if why then
    return why
  end
  local dates, seen, pairs_seen = {}, {}, {}
  for _, op in ipairs(ops) do
    if op.kind ~= 'scan' then
      local ckey, index, flow = KEYS[op.b + 3], KEYS[op.b + 4], KEYS[op.b + 5]
      if not seen[index] then
        local d
        why, d = proj_date(MARKER, index, flow)
        if why then
          return why
        end
        seen[index] = d
        dates[#dates + 1] = d
      end
      if seen[index].n and not pairs_seen[ckey] then
        why = proj_counters(index, ckey, op.terminal)
        if why then
          return why
        end
        pairs_seen[ckey] = true
      end
    end
  end
  return nil, redis.call('HLEN', STOCK), dates
end

local ops = parse()
local why, hlen0, dates = check_projection(ops)
if why then
  return lost(why)
end
local out = {}
for o, op in ipairs(ops) do
  local kind, b, hash, live = op.kind, op.b, op.hash, op.live
  local sku, qty, terminal, restock, ls, ti = op.sku, op.qty, op.terminal, op.restock, op.ls, op.ti
  local r = idem_check(KEYS[b], hash)
  if not r then
    local rk, lims, counts
    if live then
      load()
      rk = { RL_STORE, KEYS[b + 1], KEYS[b + 2] }
      lims = { lim.store, lim.terminal, lim[ACTION[kind]] }
      local ok, worst, wait
      ok, worst, wait, counts = check(rk, lims)
      if not ok then
        r = limited(worst, wait, lims, counts, win_ms, ACTION[kind])
      end
    end
    if not r then
      local res
      if kind == 'scan' then
        res = (live and stock_short(STOCK, sku, qty)) or { status = 'accepted' }
      elseif kind == 'sale' then
        res = sale(b, live, terminal, ls, ti)
      else
        res = refund(b, terminal, restock, ls, ti)
      end
      if res.status == 'accepted' then
        idem_record(KEYS[b], hash, res.flow or 0, res.oversold or 0, ttl)
        if live then
          record(rk)
          res.rem = remaining(lims, counts, 1)
        end
      elseif live then
        res.rem = remaining(lims, counts, 0)
      end
      r = reply(res)
    end
  end
  out[o] = r
end
flush()
proj_settle(MARKER, STOCK, hlen0, dates)
return out
