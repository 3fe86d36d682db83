-- Takes a permit: ARGV[1] = value, ARGV[2] = expiry in milliseconds, ARGV[3] = permits (KEYS[1] as
-- in prelude.lua).
--
-- Admits the value only if fewer than `permits` live holders remain (expired ones are swept
-- first). Returns 0 when admitted (the value already there is admitted again, its expiry renewed),
-- -1 when the node is full, and an error naming both counts when live holders were admitted under
-- another permit count: two counts on one node would admit different numbers.
--- @include "prelude.lua"

local members = redis.pcall('ZCARD', KEYS[1])
local refusal = refused(members)
if refusal then return refusal end
local now = clock()
local expires = now + ARGV[2]
local permits = tonumber(ARGV[3])
if members == 0 then
  redis.call('ZADD', KEYS[1], -permits, '', expires, ARGV[1])
  redis.call('PEXPIREAT', KEYS[1], expires)
  return 0
end
local agreed = redis.call('ZSCORE', KEYS[1], '')
local held = members
if agreed then
  agreed = -tonumber(agreed)
  held = members - 1
end
local other = agreed and agreed ~= permits
if other or held >= permits then
  held = held - redis.call('ZREMRANGEBYSCORE', KEYS[1], 0, now)
end
if other and held > 0 then
  return redis.error_reply('REDMUTEX semaphore "' .. KEYS[1] .. '" is held with ' .. agreed ..
    ' permits on this node, asked with ' .. permits ..
    ' (all holders must agree; the count can change once nobody holds it)')
end
if held >= permits and not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  return -1
end
if agreed == permits then
  redis.call('ZADD', KEYS[1], expires, ARGV[1])
else
  redis.call('ZADD', KEYS[1], -permits, '', expires, ARGV[1])
end
if held == 0 and not agreed then
  -- The sweep emptied a set without its count member (not one these scripts made): it is new.
  redis.call('PEXPIREAT', KEYS[1], expires)
else
  redis.call('PEXPIREAT', KEYS[1], expires, 'GT')
end
return 0
