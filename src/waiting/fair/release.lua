-- Leaves the line, and releases the lock if it holds our value, handing it to the head of the
-- line. KEYS as for round.lua; ARGV[1] = value; on a Redis Cluster also ARGV[2] = the command that
-- publishes notices (`SPUBLISH`) and ARGV[3] = the name's notice channel (left out, `PUBLISH` on
-- the channel of the mutex's release_notify.lua). Replies as the mutex's release.lua does.
--
-- The hand-off sets the key to the head's value for what is left of the head's entry: the head
-- renewed its entry at a moment it knows, so it knows how long the key lives without asking (see
-- mod.rs). The notice names the head by the SHA1 of its value, never the value itself (a
-- capability), and carries the node's ticket counter (a hint for later joiners) and the ticket the
-- head's place had. Without a head the notice is the plain release notice.

local function publish(notice)
  redis.call(ARGV[2] or 'PUBLISH', ARGV[3] or 'redmutex:released:' .. KEYS[1], notice)
end
--- @include "release_without_line.lua"
--- @include "clock_and_sweep.lua"
--- @include "head_of_line.lua"
--- @include "counter.lua"
--- @include "hand_off.lua"

redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
local current = redis.call('GET', KEYS[1])
if not current then return 0 end
if current ~= ARGV[1] then return -1 end
local head, place, left = head_of_line()
if head then
  hand_off(head, place, left)
else
  redis.call('DEL', KEYS[1])
  publish(ARGV[1])
end
return 1
