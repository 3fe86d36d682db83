-- Multi-name fencing raise: KEYS = the names, then their counters; ARGV[1] = value, ARGV[2] =
-- token. Raises every name's counter, only where every name holds our value.

local names = #KEYS / 2
local verdict = 1
for i = 1, names do
  local current = redis.call('GET', KEYS[i])
  if not current then verdict = 0 elseif current ~= ARGV[1] then return -1 end
end
if verdict == 0 then return 0 end
local token = tonumber(ARGV[2])
local counters = {}
for i = names + 1, #KEYS do
  counters[i] = tonumber(redis.call('GET', KEYS[i]) or '0')
  if not counters[i] then return redis.error_reply('redmutex: ' .. KEYS[i] .. ' is not a fencing counter') end
end
for i = names + 1, #KEYS do
  if counters[i] < token then redis.call('SET', KEYS[i], ARGV[2]) end
end
return 1
