-- Fenced acquire: `SET name value NX PX expiry`, and on success the name's fencing counter.
-- KEYS[1] = name, KEYS[2] = counter, and on a standalone server KEYS[3] = the counter where the
-- previous key layout kept it (`<name>:fence`); ARGV[1] = value, ARGV[2] = expiry in milliseconds.
--
-- Returns the counter (0 if never set), raised to the node's time in microseconds where that is
-- larger (clock_floor.lua), or -1 if the name is held. Setting and reading are one atomic step: the
-- counter read is the one in force when the lock was free. Where the old counter is read too, the
-- larger of the two counts, so that tokens never go backwards across the upgrade (raises write only
-- the new one, which then stays ahead); anything there that is not a number was never a counter of
-- ours, and counts as 0.
--- @include "clock_floor.lua"

if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local counter = tonumber(redis.call('GET', KEYS[2]) or '0')
  if not counter then return redis.error_reply('redmutex: ' .. KEYS[2] .. ' is not a fencing counter') end
  if KEYS[3] then
    counter = math.max(counter, tonumber(redis.pcall('GET', KEYS[3])) or 0)
  end
  return at_least_now(counter)
end
return -1
