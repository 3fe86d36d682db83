-- Raise the fencing counter to the chosen token, only where our value still holds the lock:
-- KEYS[1] = name, KEYS[2] = counter, ARGV[1] = value, ARGV[2] = token. The counter never goes
-- down and never expires. Replies as release.lua does.

local current = redis.call('GET', KEYS[1])
if not current then return 0 end
if current ~= ARGV[1] then return -1 end
local counter = tonumber(redis.call('GET', KEYS[2]) or '0')
if counter < tonumber(ARGV[2]) then
  redis.call('SET', KEYS[2], ARGV[2])
end
return 1
