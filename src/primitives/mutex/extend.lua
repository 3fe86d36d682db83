-- Compare-and-PEXPIRE: KEYS[1] = name, ARGV[1] = value, ARGV[2] = expiry in milliseconds.
-- Replies as release.lua does; never re-creates an expired key.

local current = redis.call('GET', KEYS[1])
if not current then return 0 end
if current == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return -1
