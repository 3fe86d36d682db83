-- Multi-name compare-and-PEXPIRE: KEYS = the names, ARGV[1] = value, ARGV[2] = expiry in
-- milliseconds and, to repair, ARGV[3] = `repair`. Acts only where every name still holds our
-- value: a node that lost one key does not hold the lock (0). With ARGV[3], a node where no name
-- holds another value sets each missing name again (`SET NX PX`, our value), extends the others
-- and replies 2, which the client counts as gone and takes back unless the extend holds on a
-- quorum without it (see `Held::extend`). The names are read in one MGET per slice of 1000.

local missing = {}
for first = 1, #KEYS, 1000 do
  local current = redis.call('MGET', unpack(KEYS, first, math.min(first + 999, #KEYS)))
  for i = 1, #current do
    if not current[i] then
      missing[first + i - 1] = true
    elseif current[i] ~= ARGV[1] then
      return -1
    end
  end
end
local repair = next(missing) ~= nil
if repair and ARGV[3] ~= 'repair' then return 0 end
for i = 1, #KEYS do
  if missing[i] then
    redis.call('SET', KEYS[i], ARGV[1], 'NX', 'PX', ARGV[2])
  else
    redis.call('PEXPIRE', KEYS[i], ARGV[2])
  end
end
if repair then return 2 end
return 1
