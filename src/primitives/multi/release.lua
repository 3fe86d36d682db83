-- Multi-name compare-and-delete: KEYS = the names, ARGV[1] = value, ARGV[2] = 1 to publish a
-- release notice for each name freed. Deletes every name that holds our value (one MGET and one
-- DEL per slice of 1000); answers 1 only if all of them did.

local result = 1
for first = 1, #KEYS, 1000 do
  local last = math.min(first + 999, #KEYS)
  local current = redis.call('MGET', unpack(KEYS, first, last))
  local ours = {}
  for i = 1, #current do
    if current[i] == ARGV[1] then
      ours[#ours + 1] = KEYS[first + i - 1]
    elseif current[i] then
      result = -1
    elseif result == 1 then
      result = 0
    end
  end
  if #ours > 0 then
    redis.call('DEL', unpack(ours))
    if ARGV[2] == '1' then
      for i = 1, #ours do
        redis.call('PUBLISH', 'redmutex:released:' .. ours[i], ARGV[1])
      end
    end
  end
end
return result
