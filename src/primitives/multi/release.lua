-- Multi-name compare-and-delete: KEYS = the names; ARGV[1] = value and, to publish a release notice
-- for each name freed, ARGV[2] = the command that publishes (`PUBLISH` on a standalone server,
-- `SPUBLISH` on a Redis Cluster) and, on a cluster, ARGV[2 + i] = the notice channel of KEYS[i]
-- (each name's own; left out, the channel of today, as the mutex's release_notify.lua publishes).
-- Deletes every name that holds our value (one MGET and one DEL per slice of 1000); answers 1 only
-- if all of them did.

local result = 1
for first = 1, #KEYS, 1000 do
  local last = math.min(first + 999, #KEYS)
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
    redis.call('DEL', unpack(ours))
    for i = 1, #freed do
      local channel = ARGV[2 + freed[i]] or 'redmutex:released:' .. KEYS[freed[i]]
      redis.call(ARGV[2], channel, ARGV[1])
    end
  end
end
return result
