-- The body of a fencing raise (raise.lua; the election's raise_lead.lua includes it too): KEYS[1]
-- = name, KEYS[2] = counter, ARGV[1] = value, ARGV[2] = token. Returns 0 where the key is gone
-- and -1 where another value holds it; otherwise raises the counter to the token, never down, and
-- goes on with the including script.

local current = redis.call('GET', KEYS[1])
if not current then return 0 end
if current ~= ARGV[1] then return -1 end
local counter = tonumber(redis.call('GET', KEYS[2]) or '0')
if counter < tonumber(ARGV[2]) then
  redis.call('SET', KEYS[2], ARGV[2])
end
