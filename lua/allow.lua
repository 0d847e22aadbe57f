-- allow.lua: the three-layer sliding-window limiter alone (lib.lua comes first): n events
-- of an action are checked against the store, terminal and action windows and, only if all
-- three allow, recorded in all three.
--   KEYS: 1 rl store, 2 rl terminal, 3 rl action, 4 rl seq, 5 limits, 6 promo.
--   ARGV: 1 default window ms, 2..4 default store, terminal and action limits, 5 action
--   name, 6 n.
local rk = { KEYS[1], KEYS[2], KEYS[3] }
local d = { tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]) }
local action, n = ARGV[5], tonumber(ARGV[6])
local win_ms, lim = load_limits(KEYS[5], KEYS[6], d, action)
local now = now_us()
local ok, worst, wait, counts = rl_check(rk, lim, win_ms, now, n)
if not ok then
  return limited(worst, wait, lim, counts, win_ms, action)
end
rl_record(rk, KEYS[4], win_ms, now, n)
return reply({ status = 'accepted', rem = remaining(lim, counts, n) })
