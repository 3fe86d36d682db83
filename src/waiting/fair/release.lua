-- Leaves the line, and releases the lock if it holds our value, handing it to the head of the
-- line. On a standalone server KEYS[1] = name alone, and the rest is made from it (keys.lua); on a
-- Redis Cluster KEYS as for round.lua. ARGV[1] = value; on a cluster also ARGV[2] = the command that
-- publishes notices (`SPUBLISH`) and ARGV[3] = the name's notice channel (left out, `PUBLISH` on
-- the channel of the mutex's release_notify.lua). Replies as the mutex's release.lua does.
--
-- Where the key holds our value and the waiters' mark is not there, nobody waits on this node: no
-- line stands (every script that leaves a line leaves the mark with it, see mark.lua), and the
-- release is the plain one, `DEL` of the key and the mark, with nothing to publish. That is what
-- the rest of the script decides in that case, in two commands instead of eight, and with the
-- request of the mutex's release_notify.lua. Otherwise the mark is gone with the key, and the rest
-- looks at the line: our own entry leaves it (a waiter that gives up), and if we held the lock, the
-- head of the line gets it, or, with nobody in line, a plain release notice goes out; the mark is
-- made again for the line that is left.
--
-- The hand-off sets the key to the head's value for what is left of the head's entry: the head
-- renewed its entry at a moment it knows, so it knows how long the key lives without asking (see
-- mod.rs). The notice names the head by the SHA1 of its value, never the value itself (a
-- capability), and carries the node's ticket counter (a hint for later joiners) and the ticket the
-- head's place had.

local current = redis.call('GET', KEYS[1])
if current == ARGV[1] and redis.call('DEL', KEYS[1], KEYS[5] or KEYS[1] .. ':waiters') == 1 then
  return 1
end
--- @include "keys.lua"
local function publish(notice, channel)
  redis.call(ARGV[2] or 'PUBLISH', channel or ARGV[3] or 'redmutex:released:' .. KEYS[1], notice)
end
--- @include "clock_and_sweep.lua"
--- @include "head_of_line.lua"
--- @include "counter.lua"
--- @include "hand_off.lua"
--- @include "mark.lua"

redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('HDEL', KEYS[6], ARGV[1])
if current ~= ARGV[1] then
  if current then return -1 end
  return 0
end
local head, place, left = head_of_line()
if head then
  hand_off(head, place, left)
else
  publish(ARGV[1])
end
keep_mark()
return 1
