-- Multi-name compare-and-PEXPIRE: KEYS = the names, ARGV[1] = value, ARGV[2] = expiry in
-- milliseconds. Acts only where every name still holds our value: a node that lost one key does
-- not hold the lock. The names are read in one MGET per slice of 1000.

local verdict = 1
for first = 1, #KEYS, 1000 do
  local current = redis.call('MGET', unpack(KEYS, first, math.min(first + 999, #KEYS)))
  for i = 1, #current do
    if not current[i] then verdict = 0 elseif current[i] ~= ARGV[1] then return -1 end
  end
end
if verdict == 0 then return 0 end
for i = 1, #KEYS do
  redis.call('PEXPIRE', KEYS[i], ARGV[2])
end
return 1
