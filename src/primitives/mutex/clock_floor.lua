-- The floor under a fencing counter as an acquire reads it (acquire_fenced.lua; the multi-name
-- lock's and the writer's acquires include it too): defines `at_least_now(counter)`, the larger of
-- the counter and the node's time (`TIME`) in microseconds since 1970.
--
-- A counter is lost with its node's data (a restart without persistence, a replica promoted before
-- it had the last raise), and then quorum intersection no longer carries the last token into the
-- next holder's quorum. The node's clock does: the next holder acquires only after the previous
-- lock expired on the node, so its clock reads later than every token handed out before, as long
-- as node clocks agree within that time (`doc/fencing.md`). Where they do not, the floor is never
-- below the counter: tokens are never smaller than without it. Call it after the script's last
-- write: before Redis 5, a script may not write after reading the clock.

local function at_least_now(counter)
  local clock = redis.call('TIME')
  return math.max(counter, tonumber(clock[1]) * 1000000 + tonumber(clock[2]))
end
