-- refund.lua: one refund (lib.lua and ops.lua come first).
-- Idempotency first. Live: the refund limits. Then the terminal's day counters (refunds +1,
-- refund_amount, rm:<method>), the refunded lines back in stock if asked, the next store
-- flow number of the business date, the idempotency record and (live) the limiter entries.
--   KEYS 1..11 as in ops.lua.
--   ARGV 1..10 as in ops.lua; 11 terminal; 12 restock (1|0); 13 line count, then
--   (sku, qty) pairs with each SKU once; then the amount in fen, the method count and
--   (method, fen) pairs.
return run(11, function()
  local ls, i = lines(13)
  if ARGV[12] == '1' then
    for _, l in ipairs(ls) do
      redis.call('HINCRBY', KEYS[2], l.sku, fmt(l.qty))
    end
  end
  counts_add(KEYS[9], KEYS[10], ARGV[11], 'refunds', 'refund_amount', 'rm:', i)
  return { status = 'accepted', flow = redis.call('INCR', KEYS[11]) }
end)
