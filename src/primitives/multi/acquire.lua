-- Multi-name acquire: every name or none. KEYS = the names, then (fenced) their counters in the
-- same order, then (fenced, on a standalone server) their counters where the previous key layout
-- kept them (`<name>:fence`), in the same order; ARGV[1] = value, ARGV[2] = expiry in milliseconds,
-- ARGV[3] = how many keys each name has here (1 unfenced, 2 fenced, 3 with the old counters). Sets
-- nothing unless every name is free here, so no node ever holds part of a multi-name lock. Returns
-- the highest counter of the names, raised to the node's time in microseconds where that is larger
-- (the mutex's clock_floor.lua; 0 unfenced), or -1. An unfenced acquire goes plain instead (`SET NX
-- PX` per name in one MULTI/EXEC, see `MultiTarget::settle`), and this runs for the rest.
--
-- Each command a script calls costs the node more than the work it does here, so the names are
-- checked in one EXISTS (in slices: Lua's `unpack` has a bounded stack). An old counter counts as
-- the mutex's acquire_fenced.lua says: the larger one wins, and one that is not a number counts 0.
-- The clock is read after the last write, which Redis before 5.0 requires of a script.
--- @include "../mutex/clock_floor.lua"

local names = #KEYS / tonumber(ARGV[3])
for first = 1, names, 1000 do
  if redis.call('EXISTS', unpack(KEYS, first, math.min(first + 999, names))) > 0 then return -1 end
end
local counter = 0
for i = names + 1, math.min(2 * names, #KEYS) do
  local n = tonumber(redis.call('GET', KEYS[i]) or '0')
  if not n then return redis.error_reply('redmutex: ' .. KEYS[i] .. ' is not a fencing counter') end
  if n > counter then counter = n end
end
for i = 2 * names + 1, #KEYS do
  counter = math.max(counter, tonumber(redis.pcall('GET', KEYS[i])) or 0)
end
for i = 1, names do
  redis.call('SET', KEYS[i], ARGV[1], 'PX', ARGV[2])
end
if ARGV[3] ~= '1' then counter = at_least_now(counter) end
return counter
