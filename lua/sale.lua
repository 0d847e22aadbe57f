-- sale.lua: one completed sale (lib.lua and ops.lua come first).
-- Idempotency first (duplicate or conflict). Live: the pay limits, then every SKU must be
-- in stock; all lines are decremented or none. Offline: decremented even below zero, and
-- the sale is flagged oversold. Then the terminal's day counters (sales +1, amount,
-- m:<method>), the next store flow number of the business date, the idempotency record
-- and (live) the limiter entries.
--   KEYS 1..11 as in ops.lua.
--   ARGV 1..10 as in ops.lua; 11 terminal; 12 line count, then (sku, qty) pairs with each
--   SKU once; then the total in fen, the method count and (method, fen) pairs.
return run(11, function()
  local ls, i = lines(12)
  if H.live then
    for _, l in ipairs(ls) do
      local short = stock_short(KEYS[2], l.sku, l.qty)
      if short then
        return short
      end
    end
  end
  local over = 0
  for _, l in ipairs(ls) do
    if redis.call('HINCRBY', KEYS[2], l.sku, fmt(-l.qty)) < 0 then
      over = 1
    end
  end
  counts_add(KEYS[9], KEYS[10], ARGV[11], 'sales', 'amount', 'm:', i)
  return { status = 'accepted', flow = redis.call('INCR', KEYS[11]), oversold = over }
end)
