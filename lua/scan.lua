-- scan.lua: the store's verdict on one scanned line (lib.lua and ops.lua come first).
-- Live: the scan limits, then the SKU must be in stock (stock >= qty; a SKU missing from
-- the stock hash has 0). Nothing is decremented: the sale does that. Offline: accepted
-- unchecked. Accepted scans leave an idempotency record, so a resent scan gets its
-- original verdict; a live refusal leaves none.
--   KEYS 1..8 and ARGV 1..10 as in ops.lua; ARGV 11 sku, 12 qty.
return run(8, function()
  if H.live then
    local short = stock_short(KEYS[2], ARGV[11], tonumber(ARGV[12]))
    if short then
      return short
    end
  end
  return { status = 'accepted' }
end)
