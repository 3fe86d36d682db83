-- Multi-name compare-and-delete: KEYS = the names and, to publish a release notice for each name
-- freed where a waiter marked the lock, then as many waiters' marks, in the same order; ARGV[1] =
-- value and, with the marks, ARGV[2] = the command that publishes (`PUBLISH` on a standalone
-- server, `SPUBLISH` on a Redis Cluster) and, on a cluster, ARGV[2 + i] = the notice channel of
-- KEYS[i] (each name's own; left out, the channel of today, as the mutex's release_notify.lua
-- publishes). Deletes every name that holds our value (one MGET and one DEL per slice of 1000),
-- with their marks in the same DEL; where it took a mark, it publishes for every name it freed.
-- Answers 1 only if all of them did.

local names = #KEYS
if ARGV[2] then names = names / 2 end
local result = 1
for first = 1, names, 1000 do
  local last = math.min(first + 999, names)
  local current = redis.call('MGET', unpack(KEYS, first, last))
  local ours = {}
  local freed = {}
  for i = 1, #current do
    if current[i] == ARGV[1] then
      ours[#ours + 1] = KEYS[first + i - 1]
      if ARGV[2] then freed[#freed + 1] = first + i - 1 end
    elseif current[i] then
      result = -1
    elseif result == 1 then
      result = 0
    end
  end
  if #ours > 0 then
    local count = #ours
    for i = 1, #freed do ours[#ours + 1] = KEYS[names + freed[i]] end
    if redis.call('DEL', unpack(ours)) == count then freed = {} end
    for i = 1, #freed do
      local channel = ARGV[2 + freed[i]] or 'redmutex:released:' .. KEYS[freed[i]]
      redis.call(ARGV[2], channel, ARGV[1])
    end
  end
end
return result
